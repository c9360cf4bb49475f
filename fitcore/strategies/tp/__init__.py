"""The tp strategy: tensor parallelism of the linear layer, PyTorch's own (`parallelize_module` with
`RowwiseParallel` over a DeviceMesh), one process per rank, on the engine (fitcore.engine).

Where DataParallel and DDP split X by rows, TP splits it by columns:
  1. every rank builds the same data and initial parameters; RowwiseParallel cuts W's rows, the features,
     by torch.chunk's rule (3 features on 2 ranks: w1, w2 on rank 0, w3 on rank 1); b is on every rank;
  2. every rank takes the whole batch, but only its columns X[:, lo:hi], and computes X[:, lo:hi]·W[lo:hi]:
     a partial output (B, 1);
  3. one all-reduce of the partial outputs in forward gives every rank X·W; b is added; the loss is the same
     everywhere; backward needs no communication, and each rank steps its own rows of W (and b).
So TP sees one device's batches and matches one device; its traffic is B numbers a step, growing with the
batch, where DDP's is d + 1, growing with the model. K is at most the features (each rank holds some).

The package, by responsibility:
  layout.py   who holds which columns, the bytes of the all-reduce, one rank's phases, the planned memory;
  rank.py     one rank's loop on RowwiseParallel, its all-reduce timed by hooks around it, its reports;
  train.py    `train_tp` and its Engine: what the ranks run and what the parent emits;
  view.py     the page's columns and memory tables, its picture part, its planned step, its console lines;
  quiz.py     its questions for the classroom: a rank's columns, and the all-reduce's bytes a rank;
  check.py    its rows of `fitcore check`; compare.py its column of `fitcore compare`; whatif.py its row of
              `fitcore whatif`; locale.json its words; name.py its name alone;
              shapes.py the declared shape of its Detail, through which a recording's is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.mesh import TP
from fitcore.registry import Strategy
from fitcore.split import COLUMNS
from fitcore.strategies.tp.name import NAME
from fitcore.strategies.tp.shapes import DETAIL

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.config import FitConfig


def _steps_per_epoch(cfg) -> int:
    from fitcore.strategies.tp.layout import steps_per_epoch

    return steps_per_epoch(cfg.data_size, cfg.batch_size)


def _train(cfg, on_event=lambda event: None, control=None, clock=None, plan=None):
    from fitcore.strategies.tp.train import train_tp

    return train_tp(cfg, on_event, control, plan=plan, **({} if clock is None else {"clock": clock}))


def _torchrun(cfg, on_event=lambda event: None, control=None, plan=None):
    from fitcore.engine.torchrun import train_torchrun
    from fitcore.strategies.tp.train import ENGINE

    return train_torchrun(cfg, on_event, control, plan=plan, engine=ENGINE)


def _rules(cfg, plan) -> None:
    """A rank count that torch.chunk gives columns each (4 features on 3 ranks: 2, 2 and none, refused)."""
    from fitcore.chunks import ranks_allowed
    from fitcore.config import MAX_WORKERS
    from fitcore.errors import ConfigError, Listed, Text

    allowed = ranks_allowed(cfg.n_features, MAX_WORKERS)
    if cfg.workers not in allowed:
        raise ConfigError(
            "workers",
            cfg.workers,
            Text("config.tp_workers", features=cfg.n_features, allowed=Listed(allowed)),
        )


def _step_lines(step) -> list[str]:
    from fitcore.console import rank_step_lines

    return rank_step_lines(step, "cli.tp.console.all_ranks")


def _holds_lines(value: dict) -> list[str]:
    from fitcore.strategies.tp.view import holds_lines

    return holds_lines(value)


def _markdown(cfg=None) -> str:
    from fitcore.i18n import t
    from fitcore.strategies.tp.view import example

    return t("explain.tp", example=example(cfg))


def _bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg=None) -> int:
    from fitcore.strategies.tp.layout import tp_step_bytes

    return tp_step_bytes(rows, k, itemsize)  # the batch's partial outputs: it grows with the rows


def _view():
    from fitcore.strategies.tp import view

    return view


def _check_rows(machine) -> list:
    from fitcore.strategies.tp.check import check_rows

    return check_rows(machine)


def _comparer(cfg, data, device, plan, toggles):
    from fitcore.strategies.tp.compare import Comparer

    return Comparer(cfg, data, device, plan, toggles)


def _compare_causes(cfg, plan, toggles, trained) -> list[str]:
    return []  # the same batches and arithmetic as one device: only the order of a sum differs


def _engine(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.engine.tp", k=len(plan.labels))


def _engine_word(plan) -> str:
    from fitcore.i18n import t

    return t("cli.compare.word.simulated")


def _projections() -> tuple:
    from fitcore.strategies.tp.whatif import PROJECTIONS

    return PROJECTIONS


def _questions(step, cfg, labels, extra=None) -> list:
    from fitcore.strategies.tp.quiz import questions

    return questions(step, cfg, labels, extra)


def _presets(tutorial) -> tuple:
    from dataclasses import replace

    three = replace(tutorial, weights=(5.2, 9.6, -1.0, 2.5), strategy=NAME, workers=2, devices="cpu")
    return (("Tensor parallel (columns)", three, NAME),)


def _phases() -> tuple[str, ...]:
    from fitcore.strategies.tp.layout import TP_PHASES

    return TP_PHASES


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    from fitcore.strategies.tp.view import picture_part

    return picture_part(cfg, step, devices, extra)


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="TP (RowwiseParallel)",  # torch.distributed.tensor.parallel's names: code names in every language
    short="TP",
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
    detail_lines={NAME: _holds_lines},  # Detail(NAME): who holds which columns, and each rank's memory
    detail_schemas={NAME: DETAIL},
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    phases=_phases,
    picture=_picture,
    torchrun=_torchrun,
    rules=_rules,
    split=COLUMNS,
    dim=TP,
)
