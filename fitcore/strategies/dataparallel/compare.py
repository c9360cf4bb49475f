"""The dataparallel column of `fitcore compare`: fitcore's DataParallel on the chosen devices (nn.DataParallel
on 2+ GPUs, the CPU emulation on virtual:K), fed the very same batches as the reference."""

from __future__ import annotations

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.i18n import t
from fitcore.kit.equivalence import StepRows, Toggles, Trainer, finite, max_diff
from fitcore.strategies.dataparallel.name import NAME
from fitcore.strategies.dataparallel.wrappers import wrap


class Comparer(Trainer):
    """The reference's batches, through DataParallel; a step's difference is the largest over its batches."""

    def __init__(self, cfg: FitConfig, data, device, plan: DevicePlan, toggles: Toggles):
        super().__init__(cfg, data, device, lambda raw: wrap(raw, plan))
        self.lr, self.worst = cfg.lr, 0.0

    def batch(self, ids: list[int], reduction: str, n: int, reference: Trainer) -> None:
        finite(Trainer.step(self, ids, reduction), NAME, n, self.lr)
        self.worst = max(self.worst, max_diff(self.flat(), reference.flat()))

    def step(self, rows: StepRows, reduction: str, n: int, reference: Trainer) -> float:
        worst, self.worst = self.worst, 0.0
        return worst


def engine(plan: DevicePlan) -> str:
    """What ran it: the real nn.DataParallel, the emulation, or one device, in a sentence."""
    if plan.uses_data_parallel:
        return t("cli.compare.engine.real", spec=plan.spec)
    if plan.emulated:
        return t("cli.compare.engine.emulated", host=plan.host, spec=plan.spec)
    return t("cli.compare.engine.one")


def engine_word(plan: DevicePlan) -> str:
    """The same in a word, for the table's column."""
    if plan.uses_data_parallel:
        return t("cli.compare.word.real")
    return t("cli.compare.word.emulated") if plan.emulated else t("cli.compare.word.one")
