"""The tp column of `fitcore compare`: TP's arithmetic for K ranks, simulated exactly in one process.

Every rank takes the reference's whole batch; rank r multiplies its columns X[:, lo:hi] by its rows of W,
and the partial outputs are summed (what the forward all-reduce does) before b is added. The gradient of
each rank's rows is then its own columns' part of the whole gradient, so one copy of the parameters stands
for the ranks' rows joined; it equals one device up to the order of a sum (1e-5).
"""

from __future__ import annotations

import torch

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.kit.equivalence import StepRows, Toggles, Trainer, finite, loss_of, max_diff
from fitcore.strategies.tp.name import NAME


class Comparer(Trainer):
    """The reference's batches, each forward a sum of K column blocks' partial outputs."""

    def __init__(self, cfg: FitConfig, data, device, plan: DevicePlan, toggles: Toggles):
        super().__init__(cfg, data, device)
        self.cols = columns(cfg.n_features, len(plan.labels))
        self.lr, self.worst = cfg.lr, 0.0

    def forward(self, xb: torch.Tensor) -> torch.Tensor:
        w, b = self.raw.fc.weight, self.raw.fc.bias  # (1, d), (1,)
        partial = [xb[:, lo:hi] @ w[:, lo:hi].T for lo, hi in self.cols]  # each rank's (B, 1)
        return torch.stack(partial).sum(0) + b  # the all-reduce, then b once

    def batch(self, ids: list[int], reduction: str, n: int, reference: Trainer) -> None:
        xb, yb = self.rows(ids)
        loss = loss_of(self.forward(xb), yb, reduction)
        for p in self.params:
            p.grad = None
        loss.backward()
        self.optimizer.step()
        finite(loss.item(), NAME, n, self.lr)
        self.worst = max(self.worst, max_diff(self.flat(), reference.flat()))

    def step(self, rows: StepRows, reduction: str, n: int, reference: Trainer) -> float:
        worst, self.worst = self.worst, 0.0
        return worst
