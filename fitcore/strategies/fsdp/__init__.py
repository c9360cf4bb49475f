"""The fsdp strategy: PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`), one process per rank.

`train_fsdp` starts K = cfg.workers ranks on the engine's launcher (fitcore.engine: the store on loopback,
spawned ranks, the gate between steps; or one rank of a torchrun launch), with FSDP's Engine:

  1. every rank builds the same data and initial parameters; W is laid out (d, 1), y = X @ W + b;
  2. fully_shard cuts W's rows and b over the ranks (torch.chunk's rule, padded: .layout), so no
     rank holds the whole model: 3 features on 2 ranks, rank 0 holds w1, w2 and b, rank 1 w3 alone;
  3. each rank takes DDP's rows (DistributedSampler, ceil(B / K) a step: fitcore.shards);
  4. a step: all-gather W and b (the whole model on every rank), forward, loss, backward (ZeRO-3 all-gathers
     again, the parameters having been freed after forward), reduce-scatter (each rank keeps the average
     gradient of its own shard), then each rank's optimizer steps its shard, Adam state included.

With a mean loss, equal rows per rank make the averaged gradient the gradient of the global mean loss, so
FSDP matches DDP and one process on the same rows. `cfg.reshard_after_forward` is fully_shard's own switch:
True (ZeRO-3) frees the gathered parameters after forward, False (ZeRO-2) keeps them until backward ends.

The package, by responsibility:
  train.py    `train_fsdp` and the launcher's Engine: what the ranks run and what the parent emits;
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

from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.mesh import TP
from fitcore.registry import Strategy
from fitcore.strategies.fsdp.name import NAME
from fitcore.strategies.fsdp.shapes import DETAIL

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.config import FitConfig

OPTION = "reshard_after_forward"  # the config field only this strategy reads

def _steps_per_epoch(cfg) -> int:
    from fitcore.shards import Layout

    # DDP's rows: DistributedSampler's shards, ceil(B / K) rows of each a step (at least one rank: the config
    # check asks before it has refused a bad worker count)
    return Layout(cfg.data_size, max(1, cfg.workers), cfg.batch_size).steps_per_epoch


def _train(cfg, on_event=lambda event: None, control=None, clock=None, plan=None):
    from fitcore.strategies.fsdp.train import train_fsdp

    kwargs = {} if clock is None else {"clock": clock}
    return train_fsdp(cfg, on_event, control, plan=plan, reshard_after_forward=cfg.reshard_after_forward,
                      **kwargs)  # fmt: skip


def _torchrun(cfg, on_event=lambda event: None, control=None, plan=None):
    from fitcore.engine.torchrun import train_torchrun
    from fitcore.strategies.fsdp.train import engine

    return train_torchrun(cfg, on_event, control, plan=plan, engine=engine(cfg.reshard_after_forward))


def _step_lines(step) -> list[str]:
    from fitcore.console import rank_step_lines

    return rank_step_lines(step, "cli.fsdp.console.all_ranks")


def _group_lines(value: dict) -> list[str]:
    from fitcore.strategies.fsdp.view import layout_lines

    return layout_lines(value)


def _markdown(cfg=None) -> str:
    from fitcore.i18n import t
    from fitcore.strategies.fsdp.view import layout_example

    return t("explain.fsdp", example=layout_example(cfg))


def _bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg=None) -> int:
    from fitcore.strategies.fsdp.layout import fsdp_step_bytes

    reshard = True if cfg is None else cfg.reshard_after_forward
    return fsdp_step_bytes(k, d, itemsize, reshard)


def _view():
    from fitcore.strategies.fsdp import view

    return view


def _check_rows(machine) -> list:
    from fitcore.strategies.fsdp.check import check_rows

    return check_rows(machine)


def _comparer(cfg, data, device, plan, toggles):
    from fitcore.strategies.fsdp.compare import Comparer

    return Comparer(cfg, data, device, plan, toggles)


def _compare_causes(cfg, plan, toggles, trained) -> list[str]:
    from fitcore.strategies.fsdp.compare import causes

    return causes(cfg, plan, toggles, trained)


def _engine(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.engine.fsdp", k=len(plan.labels))


def _engine_word(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.word.simulated")


def _projections() -> tuple:
    from fitcore.strategies.fsdp.whatif import PROJECTIONS

    return PROJECTIONS


def _questions(step, cfg, labels, extra=None) -> list:
    from fitcore.view.quiz import shard_questions

    return shard_questions(step, cfg, labels, extra)


def _presets(tutorial) -> tuple:
    from dataclasses import replace

    three = replace(tutorial, weights=(5.2, 9.6, -1.0), strategy=NAME, workers=2, devices="cpu")
    return (
        ("FSDP (ZeRO-3)", three, NAME),
        ("FSDP, ZeRO-2", replace(three, reshard_after_forward=False), "fsdp_zero2"),
    )


def _phases() -> tuple[str, ...]:
    from fitcore.strategies.fsdp.layout import FSDP_PHASES

    return FSDP_PHASES


def _calibrate(cfg, k: int) -> dict:
    from fitcore.strategies.fsdp.whatif import calibrate

    return calibrate(cfg, k)


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    from fitcore.strategies.fsdp.view import picture_part

    return picture_part(cfg, step, devices, extra)


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="FSDP",
    short="FSDP",
    composes=(TP,),  # a dp x tp mesh: RowwiseParallel over tp, then fully_shard over dp
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
    detail_lines={NAME: _group_lines},  # Detail(NAME): who holds which rows, and each rank's memory
    detail_schemas={NAME: DETAIL},
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    options=(OPTION,),
    picture=_picture,
    phases=_phases,
    calibrate=_calibrate,
    torchrun=_torchrun,
)
