"""The lab's arithmetic, below its command (fitcore.lab.compare) and its traps: the reference and every
strategy's column trained on DDP's schedule (`train_all`), and the comparer that DDP's and FSDP's columns
share (ranks on their own rows, in one process) with the reasons such a column differs (`rank_causes`).

The strategies' packages build their columns on this module; fitcore.lab.compare, which adds the traps, the
table and the command line, imports it, never the other way round.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import torch

from fitcore.core.config import FitConfig
from fitcore.core.data import make_data
from fitcore.core.devices import DevicePlan
from fitcore.core.i18n import count, t
from fitcore.kit.equivalence import (
    TOL,
    Comparer,
    StepRows,
    Toggles,
    Trainer,
    finite,
    first_divergent,
    loss_of,
    max_diff,
    schedule,
)
from fitcore.protocols import registry


class _Trained(NamedTuple):
    per_step: dict[str, list[float]]  # strategy -> the largest |parameter - reference| after each step
    finals: dict[str, list[float]]  # "reference" and each strategy -> the final parameters
    steps: list[StepRows]
    # strategy -> the step at which its own model's loss stopped being finite, for a column that trains a
    # model of its own beside the reference (a pipeline's deep one), which the lab leaves frozen there
    diverged: dict[str, int] = {}


def train_all(cfg: FitConfig, plan: DevicePlan, toggles: Toggles, names: tuple[str, ...] = ()) -> _Trained:
    """Train the reference and the strategies `names` (all of them when empty) on DDP's schedule: per-step
    differences and final parameters. Each strategy's `comparer` takes the reference's batches as they come
    (`batch`) and the ranks' rows of the step (`step`), and says how far it is from the reference."""
    device = plan.first_device
    data = make_data(cfg, device)
    reference = Trainer(cfg, data, device)
    trainers: dict[str, Comparer] = {}
    for name in names or registry.NAMES:
        trainers[name] = registry.strategy(name).comparer(cfg, data, device, plan, toggles)
    per_step: dict[str, list[float]] = {name: [] for name in trainers}
    steps = list(schedule(cfg, len(plan.labels), toggles))
    red = toggles.loss_reduction
    try:
        for n, rows in enumerate(steps, 1):
            for ids in rows.batches:  # the reference and DataParallel: the very same batches
                finite(reference.step(ids, red), "reference", n, cfg.lr)
                for trainer in trainers.values():
                    trainer.batch(ids, red, n, reference)
            for name, trainer in trainers.items():
                per_step[name].append(trainer.step(rows, red, n, reference))
        finals = {"reference": reference.flat().tolist()}
        finals.update({name: t.flat().tolist() for name, t in trainers.items()})
        diverged = {name: n for name, t in trainers.items()
                    if (n := getattr(t, "diverged", None)) is not None}  # fmt: skip
    finally:
        for t in trainers.values():
            t.close()
    return _Trained(per_step, finals, steps, diverged)


# ---------------------------------------------------------------------------------------------------------
# Causes: each toggle's one-line reason and measured effect.


def _worst(trained: _Trained, strategy: str) -> float:
    return max(trained.per_step[strategy], default=0.0)


# ---------------------------------------------------------------------------------------------------------
# Ranks that each take their own rows (DDP, FSDP): their arithmetic in one process, and why they differ.


class RanksComparer(Trainer):
    """K ranks on their own rows in one process: per-rank loss and gradient, then the average DDP's
    all-reduce (and FSDP's reduce-scatter, shard by shard) makes; a subclass names its strategy."""

    name = ""  # the strategy whose column this is

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
        super().__init__(cfg, data, device, lr=toggles.ranks_lr(cfg, k))

    def batch(self, ids: list[int], reduction: str, n: int, reference: Trainer) -> None:
        pass  # the ranks step once on the whole step's rows

    def step(self, rows: StepRows, reduction: str, n: int, reference: Trainer) -> float:
        finite(self.ddp_step(rows.ranks, reduction), self.name, n, self.optimizer.param_groups[0]["lr"])
        return max_diff(self.flat(), reference.flat())


def rank_causes(cfg, plan, toggles, trained, name: str, who: str) -> list[str]:
    """The reasons a strategy on DistributedSampler's rows (`name`, called `who`: DDP, FSDP) differs from the
    reference, each measured; none when it matches."""
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
