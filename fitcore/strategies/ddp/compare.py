"""The ddp column of `fitcore compare`: DDP's arithmetic for K ranks, simulated exactly in one process.

Each rank's rows come from DistributedSampler (the lab's schedule), each rank computes its own loss and
gradient, the gradients are divided by K and summed (what DDP's all-reduce hook does), then every rank takes
the same optimizer step: the replicas stay identical, so one copy of the parameters stands for all of them.
tests/test_compare.py checks this simulation against the real gloo run to 1e-6.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from fitcore.compare import _worst, train_all
from fitcore.config import FitConfig
from fitcore.devices import DevicePlan
from fitcore.equivalence import (
    TOL,
    StepRows,
    Toggles,
    Trainer,
    finite,
    first_divergent,
    loss_of,
    max_diff,
)
from fitcore.i18n import count, t
from fitcore.strategies.ddp.name import NAME


class Comparer(Trainer):
    """DDP's arithmetic for K ranks in one process: per-rank loss and gradient, then DDP's averaging."""

    name = NAME  # the strategy whose column this is (FSDP's column runs the same arithmetic)

    def ddp_step(self, ranks: tuple[list[int], ...], reduction: str) -> float:
        k = len(ranks)
        total, losses = None, []
        for ids in ranks:  # rank r: forward and backward on its own rows only
            xb, yb = self.rows(ids)
            loss = loss_of(self.raw(xb), yb, reduction)
            grads = torch.autograd.grad(loss, self.params)
            # DDP's allreduce_hook divides each rank's gradient by K, then all-reduces with a sum
            shares = [g / k for g in grads]
            total = shares if total is None else [t + s for t, s in zip(total, shares)]
            losses.append(loss.item())
        for p, g in zip(self.params, total):
            p.grad = g
        self.optimizer.step()
        return sum(losses) / k

    def __init__(self, cfg: FitConfig, data, device, plan: DevicePlan, toggles: Toggles):
        k = len(plan.labels)
        super().__init__(cfg, data, device, lr=cfg.lr * k if toggles.scale_lr else cfg.lr)

    def batch(self, ids: list[int], reduction: str, n: int, reference: Trainer) -> None:
        pass  # the ranks step once on the whole step's rows

    def step(self, rows: StepRows, reduction: str, n: int, reference: Trainer) -> float:
        finite(self.ddp_step(rows.ranks, reduction), self.name, n, self.optimizer.param_groups[0]["lr"])
        return max_diff(self.flat(), reference.flat())


def causes(cfg, plan, toggles, trained, name: str = NAME, who: str = "DDP") -> list[str]:
    """The reasons DDP (or `name`, another strategy on DDP's rows, called `who`) differs from the reference,
    each measured; none when it matches."""
    k, worst = len(plan.labels), _worst(trained, name)
    if first_divergent(trained.per_step[name]) is None:
        return []
    causes = []
    padded = [s for s in trained.steps if s.padded]
    if padded:
        first = trained.steps.index(padded[0]) + 1
        # the step the table names too: the padding's first step is not always where the difference shows
        diverges = first_divergent(trained.per_step[name])
        causes.append(t(
            "cli.compare.cause.padding", who=who, padded=count("view.count.row", padded[0].padded), k=k,
            rows=cfg.data_size, first=first, diverges=diverges, tol=format(TOL, "g"),
        ))  # fmt: skip
    reasons = {
        "loss_reduction": ("sum", t("cli.compare.cause.sum", k=k, who=who)),
        "per_rank_batch": (
            True,
            t(
                "cli.compare.cause.per_rank",
                batch=cfg.batch_size,
                global_batch=k * cfg.batch_size,
                k=k,
                who=who,
            ),
        ),
        "scale_lr": (True, t("cli.compare.cause.scale_lr", k=k, lr=f"{cfg.lr:g}", who=who)),
    }
    for name, (on, text) in reasons.items():
        if getattr(toggles, name) != on or k == 1:
            continue
        off = replace(toggles, **{name: Toggles().__getattribute__(name)})
        without = _worst(train_all(cfg, plan, off, (name,)), name)
        if without < worst / 2 or without <= TOL:  # taking it away brings DDP closer: it made the difference
            measured = t("cli.compare.measured", text=text, worst=f"{worst:.3g}", without=f"{without:.3g}")
            causes.append(measured)
    return causes
