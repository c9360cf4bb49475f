"""The training strategies, one object each: what every part of fitcore asks about a strategy.

A new strategy (FSDP, say) is a whole plug-in: its trainer module (a train function that emits
fitcore.events), its view module in fitcore.view (the names fitcore.view.dataparallel lists), its drawer in
frontend/, and one entry here. The registry sits below fitcore.config, which checks `strategy` and counts
steps with it, so an entry names its functions as "module:function" and its view as a module, imported when
first used.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from fitcore.config import FitConfig


@dataclass(frozen=True)
class Strategy:
    """One way of training on several devices."""

    name: str  # the value of FitConfig.strategy
    label: str  # what the page and the messages call it
    processes: bool  # one process per worker: `workers` applies, `cpu` means workers CPU processes
    steps_per_epoch: Callable[[FitConfig], int]  # optimizer steps per epoch (pure arithmetic)
    trainer: str  # "module:function" of its train(cfg, on_event, control, plan=...) -> RunEnded
    lines: str  # "module:function" of its console lines for one Step
    explanation: str  # "module:NAME" of its Markdown for the page
    step_bytes: str  # "module:function" of bytes(rows, k, d, itemsize): one step's bytes on k devices
    view: str  # its module in fitcore.view: planned step, the page's panels, parallelism, console frame
    drawer: str  # the key of its step picture's drawer in the browser (frontend/), sent with every picture

    @property
    def train(self) -> Callable[..., Any]:
        return _load(self.trainer)

    @property
    def step_lines(self) -> Callable[..., list[str]]:
        return _load(self.lines)

    @property
    def markdown(self) -> str:
        return _load(self.explanation)

    @property
    def bytes_of_step(self) -> Callable[[int, int, int, int], int]:
        return _load(self.step_bytes)

    @property
    def view_module(self) -> ModuleType:
        return importlib.import_module(self.view)

    @property
    def planned_step(self) -> Callable[..., Any]:
        """planned_step(cfg, gpus) -> (its first Step before a run, the device labels)."""
        return self.view_module.planned_step


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _batches(cfg: FitConfig) -> int:
    return math.ceil(cfg.data_size / cfg.batch_size)


def _ddp_steps(cfg: FitConfig) -> int:
    # DistributedSampler gives each of K ranks ceil(N / K) rows, and each rank takes ceil(B / K) of them per
    # step (fitcore.ddp.shards.Layout, which tests check against this)
    k = max(1, cfg.workers)
    return math.ceil(math.ceil(cfg.data_size / k) / math.ceil(cfg.batch_size / k))


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            name="dataparallel",
            label="DataParallel",
            processes=False,
            steps_per_epoch=_batches,
            trainer="fitcore.train:train",
            lines="fitcore.console:step_lines",
            explanation="fitcore.explain:DATAPARALLEL_MARKDOWN",
            step_bytes="fitcore.phases:dataparallel_step_bytes",
            view="fitcore.view.dataparallel",
            drawer="dataparallel",
        ),
        Strategy(
            name="ddp",
            label="DistributedDataParallel",
            processes=True,
            steps_per_epoch=_ddp_steps,
            trainer="fitcore.ddp:train_ddp",
            lines="fitcore.console:rank_step_lines",
            explanation="fitcore.explain:DDP_MARKDOWN",
            step_bytes="fitcore.phases:ddp_step_bytes",
            view="fitcore.view.ddp",
            drawer="ddp",
        ),
    )
}
NAMES = tuple(STRATEGIES)
DEFAULT = "dataparallel"


def strategy(name: Any) -> Strategy:
    """The strategy called `name`, or DataParallel's for a name that is not one (the config check refuses
    it with its own message)."""
    return STRATEGIES.get(name, STRATEGIES[DEFAULT])


def of(source: Any) -> Strategy:
    """The strategy of a FitConfig, or of anything with a `.config` (a Snapshot, a RunStarted)."""
    cfg = getattr(source, "config", source)
    return strategy(cfg.strategy)
