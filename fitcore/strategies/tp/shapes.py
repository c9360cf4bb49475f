"""The declared shape of Detail('tp').value, through which a recording's is read (fitcore.core.schema)."""

from __future__ import annotations

from fitcore.core.schema import COUNT, MAX_RANKS, MEMORY_ROW, RANK, SHARD, Int, List, Obj, Str

RANK_ROW = Obj(
    {"rank": RANK, "device": Str(200), "columns": List(COUNT, least=2, most=2)},
    optional={"shard": SHARD, "memory": MEMORY_ROW},
)
DETAIL = Obj(
    {"world_size": Int(1, MAX_RANKS), "features": Int(1, 1 << 16), "ranks": List(RANK_ROW, most=MAX_RANKS),
     "per_rank_memory": List(MEMORY_ROW, most=MAX_RANKS)},
)  # fmt: skip
