"""The ddp strategy: torch's DistributedDataParallel, one process per rank, each with its own data shard.

`train_ddp` starts K = cfg.workers ranks on the engine's launcher (fitcore.engine: spawned on 127.0.0.1) and
emits the same events as DataParallel's train; under torchrun (one machine or several) each process is one
rank of the engine's torchrun launcher. Both run the same loop, `train_rank`:

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
  train.py     `train_ddp`: the engine's launcher with DDP's Engine;
  view.py      what each rank holds (the whole model), its parallelism line and console frame;
  check.py     its rows of `fitcore check`; compare.py DDP simulated in one process for `fitcore compare`;
  whatif.py    its row of `fitcore whatif`; locale.json its words (explanation, headers, presets, ...);
  memory.py    what each rank holds: the whole model, on every rank;
  syncbn.py    SyncBatchNorm's arithmetic in one process, and its check of torch's own on nccl ranks spawned
               by the engine (fitcore.engine.spawn); the lab's BatchNorm question imports it too;
  name.py      its name alone (what its modules and the traps import).
How an epoch is cut into shards is fitcore.shards, and the panels of the ranks' shards fitcore.view.ranks,
which DDP and FSDP share; the console lines of ranks, shards and finals are fitcore.console's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.mesh import DP, TP
from fitcore.registry import Strategy
from fitcore.strategies.ddp.name import NAME

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.config import FitConfig


def _steps_per_epoch(cfg) -> int:
    from fitcore.shards import Layout

    # at least one rank: the config check asks before it has refused a bad worker count
    return Layout(cfg.data_size, max(1, cfg.workers), cfg.batch_size).steps_per_epoch


def _train(cfg, on_event=lambda event: None, control=None, clock=None, plan=None):
    from fitcore.strategies.ddp.train import train_ddp

    return train_ddp(cfg, on_event, control, plan=plan, **({} if clock is None else {"clock": clock}))


def _torchrun(cfg, on_event=lambda event: None, control=None, plan=None):
    from fitcore.engine.torchrun import train_torchrun
    from fitcore.strategies.ddp.rank import ENGINE

    return train_torchrun(cfg, on_event, control, plan=plan, engine=ENGINE)


def _step_lines(step) -> list[str]:
    from fitcore.console import rank_step_lines

    return rank_step_lines(step)


def _markdown(cfg=None) -> str:
    from fitcore.i18n import t

    return t("explain.ddp")


def _bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg=None) -> int:
    from fitcore.strategies.ddp.phases import ddp_bytes

    return ddp_bytes(k, d, itemsize)  # the same whatever the rows: every rank all-reduces d + 1 numbers


def _view():
    from fitcore.strategies.ddp import view

    return view


def _check_rows(machine) -> list:
    from fitcore.strategies.ddp.check import check_rows

    return check_rows(machine)


def _comparer(cfg, data, device, plan, toggles):
    from fitcore.strategies.ddp.compare import Comparer

    return Comparer(cfg, data, device, plan, toggles)


def _compare_causes(cfg, plan, toggles, trained) -> list[str]:
    from fitcore.strategies.ddp.compare import causes

    return causes(cfg, plan, toggles, trained)


def _engine(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.engine.ddp", k=len(plan.labels))


def _engine_word(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.word.simulated")


def _projections() -> tuple:
    from fitcore.strategies.ddp.whatif import PROJECTIONS

    return PROJECTIONS


def _questions(step, cfg, labels, extra=None) -> list:
    from fitcore.view.quiz import shard_questions

    return shard_questions(step, cfg, labels, extra)


def _presets(tutorial) -> tuple:
    from dataclasses import replace

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


def _phases() -> tuple[str, ...]:
    from fitcore.strategies.ddp.phases import DDP_PHASES

    return DDP_PHASES


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    from fitcore.memory import memory_part
    from fitcore.shards import padded_part

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
    presets=_presets,
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    phases=_phases,
    picture=_picture,
    torchrun=_torchrun,
)
