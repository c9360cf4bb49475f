"""The declared shape of Detail('fsdp').value, through which a recording's is read (fitcore.core.schema)."""

from __future__ import annotations

from fitcore.core.schema import BYTES, COUNT, MAX_RANKS, MEMORY_ROW, RANK, SHARD, Bool, Int, List, Obj, Str

COLLECTIVE = Obj({"op": Str(64), "input_bytes": BYTES, "output_bytes": BYTES})
RANK_ROW = Obj(
    {"rank": RANK, "device": Str(200), "weight_rows": List(COUNT, least=2, most=2), "bias": Bool(),
     "numel": COUNT},
    optional={"shard": SHARD, "collectives": List(COLLECTIVE, most=1024), "memory": MEMORY_ROW},
)  # fmt: skip
DETAIL = Obj(
    {"world_size": Int(1, MAX_RANKS), "reshard_after_forward": Bool(), "zero": Int(2, 3),
     "padded_numel": COUNT, "ranks": List(RANK_ROW, most=MAX_RANKS),
     "per_rank_memory": List(MEMORY_ROW, most=MAX_RANKS)},
)  # fmt: skip
