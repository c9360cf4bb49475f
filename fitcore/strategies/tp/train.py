"""TP's Engine (`ENGINE`, its record's `ranks`), which the engine's launchers run (spawned ranks, or one rank
of a torchrun launch): what each rank runs (RowwiseParallel, fitcore.strategies.tp.rank) and what the parent
emits.

Besides the engine's events, a TP run emits Detail('tp') after step 1 (each rank's columns and the bytes it
holds, measured) and again at the end (with each rank's own rows of W and b).
"""

from __future__ import annotations

from functools import partial

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.events import Detail
from fitcore.engine.contract import (
    Engine,
    first_memory_details,
    joined_parts,
    memory_details,
    memory_on_step_one,
)
from fitcore.protocols.split import COLUMNS
from fitcore.strategies.tp.layout import TP_SLOTS, ranks_tp_specs
from fitcore.strategies.tp.name import NAME
from fitcore.strategies.tp.rank import TpPart, final_rows, holds_memory, own_rows, whole_params
from fitcore.strategies.tp.view import holds_lines


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
