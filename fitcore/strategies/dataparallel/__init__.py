"""The dataparallel strategy: torch's nn.DataParallel in one process, each batch scattered across devices.

The package, by responsibility:
  train.py    `train`: the loop (scatter, replicate, parallel_apply, gather, loss, backward, step);
  wrappers.py the timed nn.DataParallel and its CPU emulation (`wrap`), which the lab's traps use too;
  phases.py   its phases in the order of a step, their bytes and the specs the wrappers record;
  view.py     the page's split table, its parallelism line and console frame, the planned first step;
  console.py  the tutorial's `In Model:` and `Outside:` lines of each step;
  check.py    its rows of `fitcore check`;
  compare.py  its column of `fitcore compare`; whatif.py its row of `fitcore whatif`;
  memory.py   what each device holds (device 0 the model and the optimizer state, the others a replica);
  quiz.py     its classroom questions: a device's rows, the idle devices, where outputs meet, gather's bytes;
  locale.json its catalog keys; name.py its name alone (what its modules and the traps import).
Its record names its modules' functions by where they live, each imported at its first call
(fitcore.protocols.registry.hook).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.core.i18n import t
from fitcore.core.memory import memory_part
from fitcore.protocols.registry import Strategy, hook, value
from fitcore.strategies.dataparallel.name import NAME

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.core.config import FitConfig


def _steps_per_epoch(cfg) -> int:
    return math.ceil(cfg.data_size / cfg.batch_size)


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    return {"memory_measured": memory_part(devices, extra.get("memory"))}


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="DataParallel",
    short="DataParallel",
    processes=False,
    drawer=NAME,
    steps_per_epoch=_steps_per_epoch,
    train=hook(f"{__name__}.train:train"),
    step_lines=hook(f"{__name__}.console:step_lines"),
    markdown=lambda cfg=None: t("explain.dataparallel"),
    bytes_of_step=hook(f"{__name__}.phases:bytes_of_step"),
    view=value(f"{__name__}.view"),
    check_rows=hook(f"{__name__}.check:check_rows"),
    comparer=hook(f"{__name__}.compare:Comparer"),
    compare_causes=lambda cfg, plan, toggles, trained: [],  # the reference's batches: only the toggles
    engine=hook(f"{__name__}.compare:engine"),
    engine_word=hook(f"{__name__}.compare:engine_word"),
    projections=value(f"{__name__}.whatif:PROJECTIONS"),
    questions=hook(f"{__name__}.quiz:questions"),
    words={"title": f"page.title.{NAME}", "explain": f"page.explain.{NAME}", "lab": f"lab.strategy.{NAME}",
           "who": f"cli.compare.who.{NAME}"},  # fmt: skip
    locale=str(Path(__file__).with_name("locale.json")),
    phases=value(f"{__name__}.phases:DATAPARALLEL_PHASES"),
    picture=_picture,
)
