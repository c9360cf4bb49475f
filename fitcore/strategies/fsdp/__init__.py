"""The fsdp strategy: PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`), one process per rank.

Its record hands the engine its Engine (`train.engine(cfg)`, its `ranks`); the engine's launcher starts K =
cfg.workers ranks (the store on loopback, spawned ranks, the gate between steps; or one rank of a torchrun
launch):

  1. every rank builds the same data and initial parameters; W is laid out (d, 1), y = X @ W + b;
  2. fully_shard cuts W's rows and b over the ranks (torch.chunk's rule, padded: .layout), so no
     rank holds the whole model: 3 features on 2 ranks, rank 0 holds w1, w2 and b, rank 1 w3 alone;
  3. each rank takes DDP's rows (DistributedSampler, ceil(B / K) a step: fitcore.core.shards);
  4. a step: all-gather W and b (the whole model on every rank), forward, loss, backward (ZeRO-3 all-gathers
     again, the parameters having been freed after forward), reduce-scatter (each rank keeps the average
     gradient of its own shard), then each rank's optimizer steps its shard, Adam state included.

With a mean loss, equal rows per rank make the averaged gradient the gradient of the global mean loss, so
FSDP matches DDP and one process on the same rows. `cfg.reshard_after_forward` is fully_shard's own switch:
True (ZeRO-3) frees the gathered parameters after forward, False (ZeRO-2) keeps them until backward ends.

The package, by responsibility:
  train.py    its Engine (`engine(cfg)`): what the ranks run and what the parent emits;
  layout.py   who holds which rows, the bytes of each collective, one rank's phases;
  rank.py     one rank's loop, its timed collectives, what a rank reports;
  view.py     the page's shard and memory tables, its planned step, parallelism line and console frame;
  check.py    its rows of `fitcore check`; compare.py its column of `fitcore compare` (DDP's arithmetic
              with FSDP's reduce-scatter, checked against the real fully_shard run); whatif.py its rows
              of `fitcore whatif`, calibrated on a run's measured collectives; locale.json its words;
  name.py     its name alone (what its modules and the traps import);
  shapes.py   the declared shape of its Detail, through which a recording's is read.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.core.i18n import count, t
from fitcore.core.shards import Layout
from fitcore.protocols.mesh import TP
from fitcore.protocols.registry import Strategy, hook, ranked, value
from fitcore.runs.console import rank_step_lines
from fitcore.strategies.fsdp.name import NAME
from fitcore.strategies.fsdp.shapes import DETAIL

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.core.config import FitConfig

OPTION = "reshard_after_forward"  # the config field only this strategy reads

def _steps_per_epoch(cfg) -> int:
    # DDP's rows: DistributedSampler's shards, ceil(B / K) rows of each a step (at least one rank: the config
    # check asks before it has refused a bad worker count)
    return Layout(cfg.data_size, max(1, cfg.workers), cfg.batch_size).steps_per_epoch


def _presets(tutorial) -> tuple:
    three = replace(tutorial, weights=(5.2, 9.6, -1.0), strategy=NAME, workers=2, devices="cpu")
    return (
        ("FSDP (ZeRO-3)", three, NAME),
        ("FSDP, ZeRO-2", replace(three, reshard_after_forward=False), "fsdp_zero2"),
    )


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="FSDP",
    short="FSDP",
    composes=(TP,),  # a dp x tp mesh: RowwiseParallel over tp, then fully_shard over dp
    processes=True,
    drawer=NAME,
    steps_per_epoch=_steps_per_epoch,
    step_lines=lambda step: rank_step_lines(step, "cli.fsdp.console.all_ranks"),
    markdown=hook(f"{__name__}.view:markdown"),
    bytes_of_step=hook(f"{__name__}.layout:bytes_of_step"),
    view=value(f"{__name__}.view"),
    check_rows=hook(f"{__name__}.check:check_rows"),
    comparer=hook(f"{__name__}.compare:Comparer"),
    compare_causes=hook(f"{__name__}.compare:causes"),
    engine=lambda plan: t("cli.compare.engine.fsdp", ranks=count("cli.count.rank", len(plan.labels))),
    engine_word=lambda plan: t("cli.compare.word.simulated"),
    projections=value(f"{__name__}.whatif:PROJECTIONS"),
    questions=hook("fitcore.view.quiz:shard_questions"),
    words={"title": f"page.title.{NAME}", "explain": f"page.explain.{NAME}", "lab": f"lab.strategy.{NAME}",
           "who": f"cli.compare.who.{NAME}"},  # fmt: skip
    locale=str(Path(__file__).with_name("locale.json")),
    presets=_presets,
    # Detail(NAME): who holds which rows, and each rank's memory
    detail_lines={NAME: hook(f"{__name__}.view:layout_lines")},
    detail_schemas={NAME: DETAIL},
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    options=(OPTION,),
    picture=hook(f"{__name__}.view:picture_part"),
    phases=value(f"{__name__}.layout:FSDP_PHASES"),
    calibrate=hook(f"{__name__}.whatif:calibrate"),
    **ranked(hook(f"{__name__}.train:engine")),  # its Engine; train and torchrun: the engine's, which run it
)
