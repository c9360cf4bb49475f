"""The declared shape of Detail('pp').value, through which a recording's is read (fitcore.core.schema)."""

from __future__ import annotations

from fitcore.core.schema import BYTES, COUNT, MAX_RANKS, MEMORY_ROW, RANK, Int, List, Num, Obj, Str

MOST_BLOCKS = 6 * 32  # a rank's blocks in a step: ZBV's 3 kinds x 2 stages x the most microbatches
BLOCK = Obj(
    {"kind": Str(1), "stage": COUNT, "microbatch": COUNT, "start": Num(0), "end": Num(0), "sent": BYTES}
)
HELD = Obj({"stage": COUNT, "microbatches": COUNT, "bytes": BYTES})
RANK_ROW = Obj(
    {"rank": RANK, "device": Str(200), "stages": List(COUNT, most=2),
     "layers": List(List(COUNT, 2, 2), most=2),
     "blocks": List(BLOCK, most=MOST_BLOCKS), "held": List(HELD, most=2), "busy_seconds": Num(0),
     "span_seconds": Num(0)},
)  # fmt: skip
LINK = Obj({"from_stage": COUNT, "to_stage": COUNT, "forward_bytes": BYTES, "backward_bytes": BYTES})
DETAIL = Obj(
    {"schedule": Str(40), "world_size": Int(1, MAX_RANKS), "stages": Int(1, 1 << 10),
     "layers": Int(1, 1 << 10), "width": Int(1, 1 << 16), "microbatches": Int(1, 1 << 10),
     "microbatch_rows": COUNT, "bubble_measured": Num(0, 1),
     "bubble_formula": Num(0, 1), "bubble_formula_text": Str(80), "bubble_unit_time": Num(0, 1),
     "ranks": List(RANK_ROW, most=MAX_RANKS), "links": List(LINK, most=1 << 10),
     "bytes_between_stages": BYTES},
    optional={"per_rank_memory": List(MEMORY_ROW, most=MAX_RANKS)},
)  # fmt: skip
