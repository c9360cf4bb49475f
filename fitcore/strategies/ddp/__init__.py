"""The ddp strategy: torch's DistributedDataParallel, one process per rank, each with its own data shard.

Its record hands the engine its Engine (`rank.ENGINE`, its `ranks`); the engine's launcher starts K =
cfg.workers ranks (spawned on 127.0.0.1) and emits the same events as DataParallel's train; under torchrun
(one machine or several) each process is one rank of the engine's torchrun launcher. Both run the engine's
one rank loop with DDP's part:

  1. every rank builds the same data and the same initial parameters from the seed;
  2. a DistributedSampler(num_replicas=K, rank, shuffle, seed, drop_last=False) gives each rank its shard of
     ceil(N / K) rows per epoch (padded by repeating the first indices of the epoch's order, so all shards are
     the same length), and `set_epoch(epoch - 1)` draws a fresh order each epoch;
  3. each rank takes ceil(batch_size / K) rows of its shard per step, so the global batch is K times that:
     batch_size when K divides it, up to K - 1 rows more otherwise (DDP needs equal steps on every rank);
  4. forward and the loss on the rank's own rows only; backward, during which DDP all-reduces (averages)
     the gradients; then the same optimizer step everywhere, so the parameters stay identical.

Because every rank has the same number of rows at every step, the averaged gradient is the gradient of the
mean loss over the global batch: DDP matches single-process training on the concatenated rows.

The package, by responsibility:
  rank.py      one rank's loop (DistributedDataParallel, its all-reduce timed by a comm hook) and its Engine;
  phases.py    the phases of its step (the all-reduce inside backward), their time slots and their bytes;
  view.py      what each rank holds (the whole model), its parallelism line and console frame;
  check.py     its rows of `fitcore check`; compare.py DDP simulated in one process for `fitcore compare`;
  whatif.py    its row of `fitcore whatif`; locale.json its words (explanation, headers, presets, ...);
  memory.py    what each rank holds: the whole model, on every rank;
  syncbn.py    SyncBatchNorm's arithmetic in one process, and its check of torch's own on nccl ranks spawned
               by the engine (fitcore.engine.spawn); the lab's BatchNorm question imports it too;
  name.py      its name alone (what its modules and the traps import).
How an epoch is cut into shards is fitcore.core.shards, and the panels of the ranks' shards
fitcore.view.ranks, which DDP and FSDP share; the console lines of ranks, shards and finals are
fitcore.runs.console's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.core.i18n import count, t
from fitcore.core.memory import memory_part
from fitcore.core.shards import Layout, padded_part
from fitcore.protocols.mesh import DP, TP
from fitcore.protocols.registry import Strategy, hook, ranked, value
from fitcore.runs.console import rank_step_lines
from fitcore.strategies.ddp.name import NAME

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.core.config import FitConfig


def _steps_per_epoch(cfg) -> int:
    # at least one rank: the config check asks before it has refused a bad worker count
    return Layout(cfg.data_size, max(1, cfg.workers), cfg.batch_size).steps_per_epoch


def _presets(tutorial) -> tuple:
    return (
        ("DistributedDataParallel", replace(tutorial, strategy=NAME, workers=2, devices="cpu"), NAME),
        (
            "Uneven shards",
            replace(tutorial, data_size=10, batch_size=10, strategy=NAME, workers=3, devices="cpu"),
            "uneven_shards",
        ),
        (  # a 2-D mesh: DDP over dp, RowwiseParallel over tp, X cut both ways (4 features: 2 columns a rank)
            "DDP × TP: a 2-D mesh",
            replace(tutorial, weights=(5.2, 9.6, -1.0, 2.5), strategy=NAME, workers=4, devices="cpu",
                    mesh=f"{DP}=2,{TP}=2"),  # fmt: skip
            "ddp_tp",
        ),
    )


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    part = padded_part(cfg, step, devices)
    return {**part, "memory_measured": memory_part(devices, extra.get("memory"))}


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="DistributedDataParallel",
    short="DDP",
    composes=(TP,),  # a dp x tp mesh: its ranks cut W by features over tp (RowwiseParallel), DDP over dp
    processes=True,
    drawer=NAME,
    steps_per_epoch=_steps_per_epoch,
    step_lines=rank_step_lines,
    markdown=lambda cfg=None: t("explain.ddp"),
    bytes_of_step=hook(f"{__name__}.phases:bytes_of_step"),
    view=value(f"{__name__}.view"),
    check_rows=hook(f"{__name__}.check:check_rows"),
    comparer=hook(f"{__name__}.compare:Comparer"),
    compare_causes=hook(f"{__name__}.compare:causes"),
    engine=lambda plan: t("cli.compare.engine.ddp", ranks=count("cli.count.rank", len(plan.labels))),
    engine_word=lambda plan: t("cli.compare.word.simulated"),
    projections=value(f"{__name__}.whatif:PROJECTIONS"),
    questions=hook("fitcore.view.quiz:shard_questions"),
    words={"title": f"page.title.{NAME}", "explain": f"page.explain.{NAME}", "lab": f"lab.strategy.{NAME}",
           "who": f"cli.compare.who.{NAME}"},  # fmt: skip
    locale=str(Path(__file__).with_name("locale.json")),
    presets=_presets,
    preload=(f"{__name__}.rank",),
    phases=value(f"{__name__}.phases:DDP_PHASES"),
    picture=_picture,
    **ranked(value(f"{__name__}.rank:ENGINE")),  # its Engine; train and torchrun: the engine's, which run it
)
