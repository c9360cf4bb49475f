"""Held by the type checker, not run: the parts of every built-in strategy, with the floor's real types.

The registry sits below the floor that declares these types, so its record types its hooks loosely (and
names most of them by path, imported on first call). Here each part a package gives is bound to its type:
its view module to fitcore.view.contract.StrategyView, its trainers to fitcore.core.train.Trainer, and each of
its record's hooks that is a function of its own to that hook's signature. pyproject.toml's [tool.mypy]
lists this file, so tests/test_types.py fails when a part stops matching; tests/test_contract.py fails when
a hook's function is missing here.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import Step
from fitcore.core.projection import Projection
from fitcore.core.train import Trainer
from fitcore.engine.contract import Engine
from fitcore.engine.launcher import launch
from fitcore.engine.torchrun import train_torchrun
from fitcore.kit.check import Machine, Row
from fitcore.kit.equivalence import Toggles
from fitcore.runs.console import rank_step_lines
from fitcore.strategies.dataparallel import check as dataparallel_check
from fitcore.strategies.dataparallel import compare as dataparallel_compare
from fitcore.strategies.dataparallel import console as dataparallel_console
from fitcore.strategies.dataparallel import phases as dataparallel_phases
from fitcore.strategies.dataparallel import quiz as dataparallel_quiz
from fitcore.strategies.dataparallel import view as dataparallel_view
from fitcore.strategies.dataparallel import whatif as dataparallel_whatif
from fitcore.strategies.dataparallel.train import train as dataparallel_train
from fitcore.strategies.ddp import check as ddp_check
from fitcore.strategies.ddp import compare as ddp_compare
from fitcore.strategies.ddp import phases as ddp_phases
from fitcore.strategies.ddp import view as ddp_view
from fitcore.strategies.ddp import whatif as ddp_whatif
from fitcore.strategies.fsdp import check as fsdp_check
from fitcore.strategies.fsdp import compare as fsdp_compare
from fitcore.strategies.fsdp import layout as fsdp_layout
from fitcore.strategies.fsdp import train as fsdp_train
from fitcore.strategies.fsdp import view as fsdp_view
from fitcore.strategies.fsdp import whatif as fsdp_whatif
from fitcore.strategies.pp import check as pp_check
from fitcore.strategies.pp import compare as pp_compare
from fitcore.strategies.pp import layout as pp_layout
from fitcore.strategies.pp import quiz as pp_quiz
from fitcore.strategies.pp import train as pp_train
from fitcore.strategies.pp import view as pp_view
from fitcore.strategies.pp import whatif as pp_whatif
from fitcore.strategies.tp import check as tp_check
from fitcore.strategies.tp import layout as tp_layout
from fitcore.strategies.tp import quiz as tp_quiz
from fitcore.strategies.tp import view as tp_view
from fitcore.strategies.tp import whatif as tp_whatif
from fitcore.view.contract import StrategyView
from fitcore.view.quiz import Question, shard_questions
from tests import zero_strategy

# the page's: each view module, and the trainers the runner, the command line and torchrun call
VIEWS: tuple[StrategyView, ...] = (dataparallel_view, ddp_view, fsdp_view, pp_view, tp_view, zero_strategy)
TRAINERS: tuple[Trainer, ...] = (dataparallel_train, launch, train_torchrun)

# the console's lines of a step, and of a strategy's own Detail
STEP_LINES: tuple[Callable[[Step], list[str]], ...] = (dataparallel_console.step_lines, rank_step_lines)
DETAIL_LINES: tuple[Callable[[dict[str, Any]], list[str]], ...] = (
    fsdp_view.layout_lines, tp_view.holds_lines, pp_view.holds_lines,
)  # fmt: skip

# the live picture's part, the trace's flows, the explanation
PICTURES: tuple[Callable[[FitConfig, Step, list[dict[str, Any]], dict[str, Any]], dict[str, Any]], ...] = (
    fsdp_view.picture_part, tp_view.picture_part, pp_view.picture_part,
)  # fmt: skip
FLOWS: tuple[Callable[[FitConfig, Step], Sequence[tuple[str, float, str, float]]], ...] = (pp_view.flows,)
MARKDOWN: tuple[Callable[[FitConfig | None], str], ...] = (
    fsdp_view.markdown, tp_view.markdown, pp_view.markdown,
)  # fmt: skip

# the classroom's questions on a step
QUESTIONS: tuple[Callable[[Step, FitConfig, Sequence[str], dict[str, Any] | None], list[Question]], ...] = (
    dataparallel_quiz.questions, shard_questions, tp_quiz.questions, pp_quiz.questions,
)  # fmt: skip

# fitcore check's rows, the lab's compare and what-if, the config's rules
CHECK_ROWS: tuple[Callable[[Machine], list[Row]], ...] = (
    dataparallel_check.check_rows, ddp_check.check_rows, fsdp_check.check_rows, tp_check.check_rows,
    pp_check.check_rows,
)  # fmt: skip
ENGINE_WORDS: tuple[Callable[[DevicePlan], str], ...] = (
    dataparallel_compare.engine, dataparallel_compare.engine_word,
)  # fmt: skip
CAUSES: tuple[Callable[[FitConfig, DevicePlan, Toggles, Any], list[str]], ...] = (
    ddp_compare.causes, fsdp_compare.causes, pp_compare.causes,
)  # fmt: skip
PROJECTIONS: tuple[Projection, ...] = (
    *dataparallel_whatif.PROJECTIONS, *ddp_whatif.PROJECTIONS, *fsdp_whatif.PROJECTIONS,
    *tp_whatif.PROJECTIONS, *pp_whatif.PROJECTIONS,
)  # fmt: skip
CALIBRATE: tuple[Callable[[FitConfig, int], dict[str, Any]], ...] = (fsdp_whatif.calibrate,)
ONE_DEVICE: tuple[Callable[[FitConfig], tuple[float, ...]], ...] = (pp_check.one_device,)
RULES: tuple[Callable[[FitConfig, DevicePlan], None], ...] = (tp_layout.rules, pp_layout.rules)
LAB_SKIP: tuple[Callable[[FitConfig], str], ...] = (pp_layout.lab_skip,)

# the bytes of one step on k devices, the arithmetic the picture and the what-if share
BYTES_OF_STEP: tuple[Callable[[int, int, int, int, FitConfig | None], int], ...] = (
    dataparallel_phases.bytes_of_step, ddp_phases.bytes_of_step, fsdp_layout.bytes_of_step,
    tp_layout.bytes_of_step, pp_layout.bytes_of_step,
)  # fmt: skip

# the engine's part of a ranked strategy, where the strategy makes it per config
ENGINES: tuple[Callable[[FitConfig], Engine[Any]], ...] = (fsdp_train.engine, pp_train.engine)
