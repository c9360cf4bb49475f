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
Its hooks below import their modules when called (see fitcore.registry).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.registry import Strategy
from fitcore.strategies.dataparallel.name import NAME

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.config import FitConfig


def _steps_per_epoch(cfg) -> int:
    return math.ceil(cfg.data_size / cfg.batch_size)


def _train(*args, **kwargs):
    from fitcore.strategies.dataparallel.train import train

    return train(*args, **kwargs)


def _step_lines(step) -> list[str]:
    from fitcore.strategies.dataparallel.console import step_lines

    return step_lines(step)


def _markdown(cfg=None) -> str:
    from fitcore.i18n import t

    return t("explain.dataparallel")


def _bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg=None) -> int:
    from fitcore.chunks import chunk_sizes
    from fitcore.strategies.dataparallel.phases import dataparallel_bytes

    return dataparallel_bytes(chunk_sizes(rows, k), d, itemsize)


def _view():
    from fitcore.strategies.dataparallel import view

    return view


def _check_rows(machine) -> list:
    from fitcore.strategies.dataparallel.check import check_rows

    return check_rows(machine)


def _comparer(cfg, data, device, plan, toggles):
    from fitcore.strategies.dataparallel.compare import Comparer

    return Comparer(cfg, data, device, plan, toggles)


def _compare_causes(cfg, plan, toggles, trained) -> list[str]:
    return []  # it trains on the reference's own batches: only the shared toggles move it


def _engine(plan) -> str:
    from fitcore.strategies.dataparallel.compare import engine

    return engine(plan)


def _engine_word(plan) -> str:
    from fitcore.strategies.dataparallel.compare import engine_word

    return engine_word(plan)


def _projections() -> tuple:
    from fitcore.strategies.dataparallel.whatif import PROJECTIONS

    return PROJECTIONS


def _questions(step, cfg, labels, extra=None) -> list:
    from fitcore.strategies.dataparallel.quiz import questions

    return questions(step, cfg, labels, extra)


def _phases() -> tuple[str, ...]:
    from fitcore.strategies.dataparallel.phases import DATAPARALLEL_PHASES

    return DATAPARALLEL_PHASES


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    from fitcore.memory import memory_part

    return {"memory_measured": memory_part(devices, extra.get("memory"))}


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="DataParallel",
    short="DataParallel",
    processes=False,
    drawer=NAME,
    steps_per_epoch=_steps_per_epoch,
    train=_train,
    step_lines=_step_lines,
    markdown=_markdown,
    bytes_of_step=_bytes_of_step,
    view=_view,
    check_rows=_check_rows,
    comparer=_comparer,
    compare_causes=_compare_causes,
    engine=_engine,
    engine_word=_engine_word,
    projections=_projections,
    questions=_questions,
    words={"title": f"page.title.{NAME}", "explain": f"page.explain.{NAME}", "lab": f"lab.strategy.{NAME}",
           "who": f"cli.compare.who.{NAME}"},  # fmt: skip
    locale=str(Path(__file__).with_name("locale.json")),
    phases=_phases,
    picture=_picture,
)
