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
  train.py    its Engine (`ENGINE`): what the ranks run and what the parent emits;
  view.py     the page's columns and memory tables, its picture part, its planned step, its console lines;
  quiz.py     its questions for the classroom: a rank's columns, and the all-reduce's bytes a rank;
  check.py    its rows of `fitcore check`; compare.py its column of `fitcore compare`; whatif.py its row of
              `fitcore whatif`; locale.json its words; name.py its name alone;
              shapes.py the declared shape of its Detail, through which a recording's is read.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.core.i18n import count, t
from fitcore.protocols.mesh import TP
from fitcore.protocols.registry import Strategy, hook, ranked, value
from fitcore.protocols.split import COLUMNS
from fitcore.runs.console import rank_step_lines
from fitcore.strategies.tp import layout
from fitcore.strategies.tp.name import NAME
from fitcore.strategies.tp.shapes import DETAIL

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.core.config import FitConfig


def _presets(tutorial) -> tuple:
    three = replace(tutorial, weights=(5.2, 9.6, -1.0, 2.5), strategy=NAME, workers=2, devices="cpu")
    return (("Tensor parallel (columns)", three, NAME),)


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label="TP (RowwiseParallel)",  # torch.distributed.tensor.parallel's names: code names in every language
    short="TP",
    processes=True,
    drawer=NAME,
    steps_per_epoch=lambda cfg: layout.steps_per_epoch(cfg.data_size, cfg.batch_size),
    step_lines=lambda step: rank_step_lines(step, "cli.tp.console.all_ranks"),
    markdown=hook(f"{__name__}.view:markdown"),
    bytes_of_step=layout.bytes_of_step,
    view=value(f"{__name__}.view"),
    check_rows=hook(f"{__name__}.check:check_rows"),
    comparer=hook(f"{__name__}.compare:Comparer"),
    compare_causes=lambda cfg, plan, toggles, trained: [],  # one device's batches: only a sum's order differs
    engine=lambda plan: t("cli.compare.engine.tp", ranks=count("cli.count.rank", len(plan.labels))),
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
    detail_lines={NAME: hook(f"{__name__}.view:holds_lines")},  # Detail(NAME): who holds which columns
    detail_schemas={NAME: DETAIL},
    preload=(f"{__name__}.train", f"{__name__}.rank"),
    phases=lambda: layout.TP_PHASES,
    picture=hook(f"{__name__}.view:picture_part"),
    **ranked(value(f"{__name__}.train:ENGINE")),  # its Engine; train and torchrun: the engine's, which run it
    rules=layout.rules,
    split=COLUMNS,
    dim=TP,
)
