"""The pp column of `fitcore compare`: a pipeline's arithmetic, simulated exactly in one process, against the
same deep-linear model on one device (a pipeline changes the model's depth, not the fit: the one-layer
reference would differ for the depth alone).

torch's schedules cut each batch into m microbatches (tensor_split), take each microbatch's loss on the last
stage, and with scale_grads divide the summed gradients by m: the gradient of the mean of the microbatches'
mean losses. With equal microbatches that is the whole batch's mean loss, and the column equals one device
to the order of a sum (1e-5). With unequal ones (a batch of 30 in 4: 8, 8, 7, 7) a row of a smaller
microbatch weighs more, and the column says by how much it differs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.i18n import t
from fitcore.core.train import make_optimizer
from fitcore.kit.equivalence import StepRows, Toggles, Trainer, loss_of, max_diff
from fitcore.strategies.pp.model import deep_model, flat_parameters
from fitcore.strategies.pp.name import NAME


class DeepTrainer:
    """The deep-linear model and its optimizer, on the lab's data, in float64 where `double`: the lab's two
    deep models then differ by their arithmetic alone, not by float32's rounding, which Adam on deep layers
    grows to about 1e-5 over the tutorial's 200 steps (a gradient's last bits, divided by a tiny second
    moment)."""

    def __init__(self, cfg: FitConfig, data, device, lr: float, double: bool = False):
        self.X, self.y = (v.double() for v in data) if double else data
        self.model = deep_model(cfg).to(device)
        if double:
            self.model = self.model.double()
        self.params = list(self.model.parameters())
        self.optimizer = make_optimizer(replace(cfg, lr=lr), self.params)
        self.device = device

    rows = Trainer.rows  # the reference's own reader of a batch's rows (it reads X, y and the device)

    def flat(self) -> torch.Tensor:
        return flat_parameters(self.model)


class Comparer:
    """The reference's batches, each stepped twice: on the deep model whole (one device) and as a pipeline's
    microbatches (their losses' gradients summed, then divided by m)."""

    def __init__(self, cfg: FitConfig, data, device, plan: DevicePlan, toggles: Toggles):
        self.one = DeepTrainer(cfg, data, device, cfg.lr, double=True)
        self.pipe = DeepTrainer(cfg, data, device, cfg.lr, double=True)
        self.m, self.lr, self.worst = cfg.microbatches, cfg.lr, 0.0
        self.diverged: int | None = None  # the step at which the deep model's loss stopped being finite

    def batch(self, ids: list[int], reduction: str, n: int, reference) -> None:
        if self.diverged is not None:
            return  # both deep models stopped where their loss did: the lab's other columns go on
        xb, yb = self.one.rows(ids)
        self.one.optimizer.zero_grad(set_to_none=True)
        loss = loss_of(self.one.model(xb), yb, reduction)
        if not math.isfinite(loss.item()):
            self.diverged = n  # a deep model diverges at rates where one layer does not (its causes say so)
            return
        loss.backward()
        self.one.optimizer.step()
        self.pipe.optimizer.zero_grad(set_to_none=True)
        for x, y in zip(xb.tensor_split(self.m), yb.tensor_split(self.m)):  # each microbatch's loss, as the
            (loss_of(self.pipe.model(x), y, reduction) / self.m).backward()  # schedule's; scale_grads: / m
        self.pipe.optimizer.step()
        self.worst = max(self.worst, max_diff(self.pipe.flat(), self.one.flat()))

    def step(self, rows: StepRows, reduction: str, n: int, reference) -> float:
        worst, self.worst = self.worst, 0.0
        return worst

    def flat(self) -> torch.Tensor:
        return self.pipe.flat().float()

    def close(self) -> None:
        pass


def causes(cfg: FitConfig, plan, toggles: Toggles, trained) -> list[str]:
    """Why the column differs: the deep model diverged, or a summed loss (a config whose microbatches are
    unequal has no column: the package's lab_skip)."""
    found = []
    diverged = trained.diverged.get(NAME)
    if diverged is not None:
        found.append(t("cli.compare.cause.pp_diverged", step=diverged, lr=f"{cfg.lr:g}"))
    if toggles.loss_reduction == "sum":
        found.append(t("cli.compare.cause.pp_sum", m=cfg.microbatches))
    return found
