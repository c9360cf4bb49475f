"""A pipeline step as measured: each rank's blocks, the bubble beside its formula, the activations each stage
held, the bytes between stages. One function makes it (`schedule_value`), for Detail('pp') (the console, the
JSON, a recording) and for the live picture (fitcore.strategies.pp.view), so that a figure shown is computed
once, from what the ranks measured.
"""

from __future__ import annotations

from typing import Sequence

from fitcore.core.config import FitConfig
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.layout import Block


def blocks_of(rows: Sequence[dict]) -> list[Block]:
    return [Block(b["kind"], b["stage"], b["microbatch"]) for b in rows]


def schedule_value(
    cfg: FitConfig,
    labels: Sequence[str],
    blocks: Sequence[Sequence[dict]],
    memory: Sequence[dict] | None = None,
) -> dict:
    """Detail('pp').value: the pipeline's layout and one step's blocks as each rank ran them (`blocks`, in
    rank order, from its report), with the figures read from them."""
    p, m, d, h = len(labels), cfg.microbatches, cfg.n_features, layout.hidden(cfg)
    stages = layout.n_stages(cfg.schedule, p)
    bounds = layout.stage_layers(cfg.layers, stages)
    rows = min(cfg.batch_size, cfg.data_size) // m
    ranks = []
    for r, label in enumerate(labels):
        ran = list(blocks[r]) if r < len(blocks) else []
        held = layout.held_counts(blocks_of(ran))
        own = layout.rank_stages(cfg.schedule, p, r)
        ranks.append({
            "rank": r, "device": label, "stages": list(own), "layers": [list(bounds[s]) for s in own],
            "blocks": ran,
            "held": [{"stage": s, "microbatches": held.get(s, 0),
                      "bytes": held.get(s, 0) * layout.activation_bytes(rows, d, h, bounds[s])}
                     for s in own],
            "busy_seconds": sum(b["end"] - b["start"] for b in ran),
            "span_seconds": max((b["end"] for b in ran), default=0.0),
        })  # fmt: skip
    links = []
    for s in range(stages - 1):
        forward = sum(b["sent"] for rank in blocks for b in rank if b["stage"] == s and b["kind"] == layout.F)
        back = sum(b["sent"] for rank in blocks for b in rank
                   if b["stage"] == s + 1 and b["kind"] in (layout.B, layout.I))  # fmt: skip
        links.append({"from_stage": s, "to_stage": s + 1, "forward_bytes": forward, "backward_bytes": back})
    value = {
        "schedule": cfg.schedule,
        "world_size": p,
        "stages": stages,
        "layers": cfg.layers,
        "width": h,
        "microbatches": m,
        "microbatch_rows": rows,
        # 1 − Σ each rank's busy time / (p × the longest span from the schedule's start); 0 before a run
        "bubble_measured": layout.measured_bubble(
            [r["busy_seconds"] for r in ranks], [r["span_seconds"] for r in ranks]
        ),  # fmt: skip
        "bubble_formula": layout.formula_bubble(cfg.schedule, p, m),
        "bubble_formula_text": layout.formula_text(cfg.schedule),
        "bubble_unit_time": layout.unit_bubble(cfg.schedule, p, m),
        "ranks": ranks,
        "links": links,
        "bytes_between_stages": sum(link["forward_bytes"] + link["backward_bytes"] for link in links),
    }
    if memory:
        value["per_rank_memory"] = list(memory)
    return value


def step_value(
    cfg: FitConfig,
    labels: Sequence[str],
    blocks: Sequence[Sequence[dict]],
    memory: Sequence[dict] | None = None,
) -> dict:
    """The value the page draws for a step: schedule_value of its blocks as the ranks ran them, or for a
    planned step (no run yet: no blocks) planned_value."""
    return schedule_value(cfg, labels, blocks, memory) if any(blocks) else planned_value(cfg, labels)


def planned_value(cfg: FitConfig, labels: Sequence[str]) -> dict:
    """schedule_value before a run: the activations each stage will hold, read from the schedule's own
    order (layout.order: GPipe's m, 1F1B's p − r), and nothing measured: no blocks drawn, no bytes, and the
    measured bubble None (the page says it is not measured yet, beside the formula's)."""
    runs = layout.order(cfg.schedule, len(labels), cfg.microbatches)
    planned = [[{"kind": b.kind, "stage": b.stage, "microbatch": b.microbatch, "start": 0.0, "end": 0.0,
                 "sent": 0} for b in run] for run in runs]  # fmt: skip
    value = schedule_value(cfg, labels, planned)
    for rank in value["ranks"]:
        rank["blocks"] = []
    return {**value, "bubble_measured": None}
