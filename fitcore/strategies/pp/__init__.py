"""The pp strategy: pipeline parallelism of a deep-linear model, PyTorch's own (torch.distributed.pipelining:
PipelineStage and a schedule), one process per rank, on the engine (fitcore.engine).

Where DataParallel and DDP cut the batch's rows and TP its columns, a pipeline cuts the model's layers:
  1. the fit y = X·W + b made L layers deep, whose product is W (fitcore.strategies.pp.model); stage s holds
     some of the layers, and each rank runs one stage (two, interleaved and zero-bubble);
  2. every step cuts the batch into m equal microbatches; stage 0 takes each, runs its layers and sends the
     activations on; the last stage computes each microbatch's loss and sends the gradients back;
  3. the schedule orders the blocks (GPipe: every forward, then every backward; 1F1B: one of each in turn),
     and a stage waits for what it needs: the bubble, (p − 1)/(m + p − 1) of the step for GPipe and 1F1B.
With equal microbatches a step is one device's step of the same deep model; its traffic is each
microbatch's activations (and their gradients) between neighbouring stages, growing with the batch.

The package, by responsibility:
  layout.py    stages, layers, the schedules' order and ticks, the bubble's formulas, held and sent bytes;
  model.py     the deep-linear model and its product;
  rank.py      one rank's stages and schedule, each block timed, its reports;
  schedule.py  a step as measured: blocks, bubble, held activations, bytes between stages (Detail('pp'));
  train.py     `train_pp` and its Engine; view.py the page's tables, its picture part and console lines;
  quiz.py, check.py, compare.py, whatif.py, shapes.py, locale.json, name.py: as every strategy's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.mesh import PP
from fitcore.registry import Strategy
from fitcore.split import WHOLE
from fitcore.strategies.pp.name import NAME
from fitcore.strategies.pp.shapes import DETAIL

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.config import FitConfig


def _steps_per_epoch(cfg) -> int:
    from fitcore.strategies.pp.layout import steps_per_epoch

    return steps_per_epoch(cfg.data_size, cfg.batch_size)


def _train(cfg, on_event=lambda event: None, control=None, clock=None, plan=None):
    from fitcore.strategies.pp.train import train_pp

    return train_pp(cfg, on_event, control, plan=plan, **({} if clock is None else {"clock": clock}))


def _torchrun(cfg, on_event=lambda event: None, control=None, plan=None):
    from fitcore.engine.torchrun import train_torchrun
    from fitcore.strategies.pp.train import engine

    return train_torchrun(cfg, on_event, control, plan=plan, engine=engine(cfg))


def _rules(cfg, plan) -> None:
    """A schedule torch has, at least a layer a stage, equal microbatches every step, and the microbatches
    the schedule needs (1F1B: at least p); each refused with one line that names the field."""
    import math

    from fitcore.config import integer_range
    from fitcore.errors import ConfigError, Listed, Text
    from fitcore.strategies.pp import layout

    if cfg.schedule not in layout.SCHEDULES:
        raise ConfigError("schedule", cfg.schedule, Listed(layout.SCHEDULES))
    p = cfg.workers
    stages = layout.n_stages(cfg.schedule, p)
    if not (isinstance(cfg.layers, int) and stages <= cfg.layers <= layout.MAX_LAYERS):
        most = layout.MAX_LAYERS
        raise ConfigError("layers", cfg.layers, Text("config.pp_layers", stages=stages, most=most,
                                                      schedule=cfg.schedule))  # fmt: skip
    if not (isinstance(cfg.microbatches, int) and 1 <= cfg.microbatches <= layout.MAX_MICROBATCHES):
        raise ConfigError("microbatches", cfg.microbatches, integer_range(1, layout.MAX_MICROBATCHES))
    if not (isinstance(cfg.width, int) and 0 <= cfg.width <= layout.MAX_WIDTH):
        raise ConfigError("width", cfg.width, Text("config.pp_width", most=layout.MAX_WIDTH))
    if not (math.isfinite(cfg.block_ms) and 0 <= cfg.block_ms <= layout.MAX_BLOCK_MS):
        raise ConfigError("block_ms", cfg.block_ms, Text("config.pp_block_ms", most=layout.MAX_BLOCK_MS))
    if not (isinstance(cfg.slow_stage, int) and -1 <= cfg.slow_stage < stages):
        raise ConfigError("slow_stage", cfg.slow_stage, Text("config.pp_slow_stage", last=stages - 1))
    if cfg.slow_stage >= 0 and not cfg.block_ms:  # slower than nothing is nothing: say what makes it slow
        slow = Text("config.pp_slow_needs_block", factor=layout.SLOW_FACTOR)
        raise ConfigError("slow_stage", cfg.slow_stage, slow)
    b = min(cfg.batch_size, cfg.data_size)
    field = layout.uneven(cfg.data_size, cfg.batch_size, cfg.microbatches)
    if field == "batch_size":
        raise ConfigError("batch_size", cfg.batch_size, Text("config.pp_batches", rows=cfg.data_size))
    if field == "microbatches":
        fits = Listed(tuple(m for m in range(1, layout.MAX_MICROBATCHES + 1) if b % m == 0))
        raise ConfigError("microbatches", cfg.microbatches, Text("config.pp_equal", batch=b, allowed=fits))
    problem = layout.schedule_problem(cfg.schedule, p, cfg.microbatches)
    if problem:
        raise ConfigError("microbatches", cfg.microbatches, Text("config.pp_schedule", schedule=cfg.schedule,
                                                                  why=problem))  # fmt: skip


def _lab_skip(cfg) -> str:
    """Why the lab has no pp column for cfg: the microbatches would not cut its batches equally (a pipeline
    refuses the config: its receive buffers keep the first microbatch's shape)."""
    from fitcore.i18n import t
    from fitcore.strategies.pp.layout import uneven

    if uneven(cfg.data_size, cfg.batch_size, cfg.microbatches):
        b = min(cfg.batch_size, cfg.data_size)
        return t("cli.compare.skip.pp", batch=b, rows=cfg.data_size, m=cfg.microbatches)
    return ""


def _check_config(cfg):
    """The checks' config for a pipeline: Adam at 0.1, where SGD at the one-layer checks' 0.3 would make the
    deep model diverge, and epochs enough to reach least squares."""
    from dataclasses import replace

    return replace(cfg, optimizer="adam", lr=0.1, epochs=300)


def _one_device(cfg) -> tuple[float, ...]:
    from fitcore.strategies.pp.check import one_device

    return one_device(cfg)


def _step_lines(step) -> list[str]:
    from fitcore.console import rank_step_lines

    return rank_step_lines(step, "cli.pp.console.all_ranks")


def _holds_lines(value: dict) -> list[str]:
    from fitcore.strategies.pp.view import holds_lines

    return holds_lines(value)


def _markdown(cfg=None) -> str:
    from fitcore.i18n import t
    from fitcore.strategies.pp.view import example

    return t("explain.pp", example=example(cfg))


def _bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg=None) -> int:
    from fitcore.strategies.pp.layout import step_bytes

    schedule = cfg.schedule if cfg is not None else "1f1b"
    return step_bytes(
        rows, (cfg.width if cfg is not None else 0) or d, k, schedule, itemsize
    )  # activations down, gradients up: they grow with the rows


def _view():
    from fitcore.strategies.pp import view

    return view


def _check_rows(machine) -> list:
    from fitcore.strategies.pp.check import check_rows

    return check_rows(machine)


def _comparer(cfg, data, device, plan, toggles):
    from fitcore.strategies.pp.compare import Comparer

    return Comparer(cfg, data, device, plan, toggles)


def _compare_causes(cfg, plan, toggles, trained) -> list[str]:
    from fitcore.strategies.pp.compare import causes

    return causes(cfg, plan, toggles, trained)


def _engine(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.engine.pp", k=len(plan.labels))


def _engine_word(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.word.simulated")


def _projections() -> tuple:
    from fitcore.strategies.pp.whatif import PROJECTIONS

    return PROJECTIONS


def _questions(step, cfg, labels, extra=None) -> list:
    from fitcore.strategies.pp.quiz import questions

    return questions(step, cfg, labels, extra)


def _presets(tutorial) -> tuple:
    from dataclasses import replace

    pipe = replace(
        tutorial, strategy=NAME, workers=2, devices="cpu", layers=4, microbatches=4, schedule="1f1b"
    )
    return (("Pipeline (stages, 1F1B)", pipe, NAME),)


def _phases() -> tuple[str, ...]:
    from fitcore.strategies.pp.layout import PP_PHASES

    return PP_PHASES


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    from fitcore.strategies.pp.view import picture_part

    return picture_part(cfg, step, devices, extra)


def _flows(cfg, step) -> list:
    from fitcore.strategies.pp.view import flows

    return flows(cfg, step)


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="PP (pipelining)",  # torch.distributed.pipelining's name: a code name in every language
    short="PP",
    processes=True,
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
    words={
        "title": f"page.title.{NAME}",
        "explain": f"page.explain.{NAME}",
        "lab": f"lab.strategy.{NAME}",
        "who": f"cli.compare.who.{NAME}",
    },
    locale=str(Path(__file__).with_name("locale.json")),
    presets=_presets,
    detail_lines={NAME: _holds_lines},  # Detail(NAME): the stages, the bubble, what each stage held
    detail_schemas={NAME: DETAIL},
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    phases=_phases,
    picture=_picture,
    flows=_flows,
    options=("layers", "width", "microbatches", "schedule", "block_ms", "slow_stage"),
    choices={"schedule": ("gpipe", "1f1b", "interleaved-1f1b", "zbv")},  # layout.SCHEDULES, tests hold
    torchrun=_torchrun,
    rules=_rules,
    lab_skip=_lab_skip,
    check_config=_check_config,
    one_device=_one_device,
    split=WHOLE,
    dim=PP,
)
