"""`train_tp`: the engine's launcher (spawned ranks, the gate between steps; or one rank of a torchrun launch)
with TP's Engine: what each rank runs (RowwiseParallel, fitcore.strategies.tp.rank) and what the parent emits.

Besides the engine's events, a TP run emits Detail('tp') after step 1 (each rank's columns and the bytes it
holds, measured) and again at the end (with each rank's own rows of W and b).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

from fitcore.chunks import columns
from fitcore.config import FitConfig
from fitcore.devices import DevicePlan
from fitcore.engine.contract import (
    Engine,
    first_memory_details,
    joined_parts,
    memory_details,
    memory_on_step_one,
)
from fitcore.engine.launcher import launch
from fitcore.engine.torchrun import train_torchrun
from fitcore.events import Detail, Event, RunEnded
from fitcore.split import COLUMNS
from fitcore.strategies.tp.layout import TP_SLOTS, ranks_tp_specs
from fitcore.strategies.tp.name import NAME
from fitcore.strategies.tp.rank import TpPart, final_rows, holds_memory, own_rows, whole_params
from fitcore.strategies.tp.view import holds_lines
from fitcore.train import Control


def holds_value(cfg: FitConfig, labels, memory=None, finals=None) -> dict:
    """Detail('tp').value: each rank's columns of X (its rows of W), and what it holds where measured."""
    k = len(labels)
    ranks = [
        {"rank": r, "device": labels[r], "columns": list(c)} for r, c in enumerate(columns(cfg.n_features, k))
    ]
    for row, final in zip(ranks, finals or ()):
        row["shard"] = final.extra.get("shard")
    value = {"world_size": k, "features": cfg.n_features, "ranks": ranks}
    if memory:
        value["per_rank_memory"] = memory
    return value


def _first_step_details(cfg, labels, reports) -> list[Detail]:
    if reports[0].extra is None:
        return []
    memory = [report.extra["memory"] for report in reports]
    value = holds_value(cfg, labels, memory)
    return [Detail(NAME, value, "\n".join(holds_lines(value))), *first_memory_details(cfg, labels, reports)]


def _details(cfg, labels, finals) -> list[Detail]:
    memory = [final.extra["memory"] for final in finals if "memory" in final.extra]
    return [Detail(NAME, holds_value(cfg, labels, memory, finals)), *memory_details(cfg, labels, finals)]


ENGINE = Engine(
    part=TpPart,
    step_params=own_rows,
    final=final_rows,
    specs=ranks_tp_specs,
    slots=TP_SLOTS,
    words=NAME,
    weights=joined_parts,
    details=_details,
    step_extra=partial(memory_on_step_one, holds_memory),
    step_details=_first_step_details,
    joined=whole_params,
    split=COLUMNS,
)


def train_tp(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
) -> RunEnded:
    """Fit y = X·W + b with W's rows (the features) split over cfg.workers spawned ranks; emit the engine's
    events: a Step per step with a Replica per rank covering the whole batch and its own columns, the step's
    W joined from the ranks' rows, Detail('tp') and Detail('memory') after step 1 and at the end."""
    return launch(cfg, on_event, control, clock, plan, ENGINE)


def torchrun_tp(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    plan: DevicePlan | None = None,
) -> RunEnded:
    """One rank of a torchrun launch of TP (its record's `torchrun`): the engine's torchrun side, TP's
    Engine."""
    return train_torchrun(cfg, on_event, control, plan=plan, engine=ENGINE)
