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
  train.py     its Engine (`engine(cfg)`); view.py the page's tables, picture part and lines;
  quiz.py, check.py, compare.py, whatif.py, shapes.py, locale.json, name.py: as every strategy's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.core.i18n import count, t
from fitcore.protocols.mesh import PP
from fitcore.protocols.registry import Strategy, hook, ranked, value
from fitcore.protocols.split import WHOLE
from fitcore.runs.console import rank_step_lines
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.name import NAME
from fitcore.strategies.pp.shapes import DETAIL

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.core.config import FitConfig


def _check_config(cfg):
    """The checks' config for a pipeline: Adam at 0.1, where SGD at the one-layer checks' 0.3 would make the
    deep model diverge, and epochs enough to reach least squares."""
    return replace(cfg, optimizer="adam", lr=0.1, epochs=300)


def _presets(tutorial) -> tuple:
    pipe = replace(
        tutorial, strategy=NAME, workers=2, devices="cpu", layers=4, microbatches=4, schedule="1f1b"
    )
    return (("Pipeline (stages, 1F1B)", pipe, NAME),)


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="PP (pipelining)",  # torch.distributed.pipelining's name: a code name in every language
    short="PP",
    processes=True,
    drawer=NAME,
    steps_per_epoch=lambda cfg: layout.steps_per_epoch(cfg.data_size, cfg.batch_size),
    step_lines=lambda step: rank_step_lines(step, "cli.pp.console.all_ranks"),
    markdown=hook(f"{__name__}.view:markdown"),
    bytes_of_step=layout.bytes_of_step,
    view=value(f"{__name__}.view"),
    check_rows=hook(f"{__name__}.check:check_rows"),
    comparer=hook(f"{__name__}.compare:Comparer"),
    compare_causes=hook(f"{__name__}.compare:causes"),
    engine=lambda plan: t("cli.compare.engine.pp", ranks=count("cli.count.rank", len(plan.labels))),
    engine_word=lambda plan: t("cli.compare.word.simulated"),
    projections=value(f"{__name__}.whatif:PROJECTIONS"),
    questions=hook(f"{__name__}.quiz:questions"),
    words={
        "title": f"page.title.{NAME}",
        "explain": f"page.explain.{NAME}",
        "lab": f"lab.strategy.{NAME}",
        "who": f"cli.compare.who.{NAME}",
    },
    locale=str(Path(__file__).with_name("locale.json")),
    presets=_presets,
    # Detail(NAME): the stages, the bubble, what each stage held
    detail_lines={NAME: hook(f"{__name__}.view:holds_lines")},
    detail_schemas={NAME: DETAIL},
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    phases=lambda: layout.PP_PHASES,
    picture=hook(f"{__name__}.view:picture_part"),
    flows=hook(f"{__name__}.view:flows"),
    options=("layers", "width", "microbatches", "schedule", "block_ms", "slow_stage"),
    choices={"schedule": layout.SCHEDULES},
    **ranked(hook(f"{__name__}.train:engine")),  # its Engine; train and torchrun: the engine's, which run it
    rules=layout.rules,
    lab_skip=layout.lab_skip,
    check_config=_check_config,
    one_device=hook(f"{__name__}.check:one_device"),
    split=WHOLE,
    dim=PP,
)
