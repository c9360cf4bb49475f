"""The pipeline's part of the page: each rank's stages and layers, the schedule as it ran (its picture part:
every block with its microbatch, its tick and its measured times, the bubble beside its formula), what each
stage holds, how it ran and its console lines.

It exposes the names every strategy's view module does (fitcore.protocols.registry.StrategyView).
"""

from __future__ import annotations

import math
from typing import Any

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import Replica, RunStarted, Step
from fitcore.core.i18n import count, t
from fitcore.core.memory import memory_part
from fitcore.core.text import format_bytes
from fitcore.engine.rank import rank_labels
from fitcore.runs.runner import Snapshot
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.layout import hidden
from fitcore.strategies.pp.name import NAME
from fitcore.strategies.pp.schedule import step_value
from fitcore.view import ranks as rank_view
from fitcore.view.common import Section, fitted_names, ranks_memory, shown

CONSOLE_HINT = "view.console_hint.pp"
BLOCK_PHASES = frozenset(layout.KIND_PHASE.values())


def planned_step(cfg: FitConfig, plan: DevicePlan) -> tuple[Step, tuple[str, ...]]:
    """(a pipeline's first step before any run: every rank the whole batch, its output (B, h), or (B, 1)
    where it holds the last stage, as a run reports them; the ranks)."""
    labels = rank_labels(cfg, plan)
    rows, d, p = min(cfg.batch_size, cfg.data_size), cfg.n_features, len(labels)
    last = layout.n_stages(cfg.schedule, p) - 1
    replicas = tuple(
        Replica(label, 0, rows, (rows, d), (rows, 1 if last in layout.rank_stages(cfg.schedule, p, r)
                                            else hidden(cfg)))
        for r, label in enumerate(labels)
    )  # fmt: skip
    return Step(1, 1, 1, math.nan, (rows, d), (rows, 1), replicas, (), 0.0, 0.0), labels


def _walk(cfg: FitConfig, step: Step, p: int) -> tuple[list[list[dict]], list[dict]]:
    """One pass over a step's recorded phases: each rank's blocks (kind, stage and microbatch in the
    schedule's order, layout.order, the order a run measures; start and end from the ranks' shared zero;
    bytes sent; its unit-time tick, which the phase walk steps through), and for each phase entry, in the
    step's order, a block's tick, microbatch and stage (an empty dict for the loss and the optimizer)."""
    blocks: list[list[dict]] = [[] for _ in range(p)]
    fields: list[dict] = []
    if step.phases is None:
        return blocks, fields
    runs, tick = (
        layout.order(cfg.schedule, p, cfg.microbatches),
        layout.ticks(cfg.schedule, p, cfg.microbatches),
    )
    labels = [r.device for r in step.replicas]
    for phase in step.phases.phases():
        r = labels.index(phase.device) if phase.device in labels else -1
        i = len(blocks[r]) if r >= 0 else 0
        if phase.name not in BLOCK_PHASES or r < 0 or i >= len(runs[r]):
            fields.append({})
            continue
        b = runs[r][i]
        blocks[r].append(
            {
                "kind": b.kind,
                "stage": b.stage,
                "microbatch": b.microbatch,
                "tick": tick[r][i],
                "start": phase.start,
                "end": phase.start + phase.duration,
                "sent": phase.bytes,
            }
        )
        fields.append({"tick": tick[r][i], "microbatch": b.microbatch, "stage": b.stage})
    return blocks, fields


def flows(cfg: FitConfig, step: Step) -> list[tuple[str, float, str, float]]:
    """The sends between ranks in a step, for the trace's arrows (fitcore.runs.trace.Flow): each block that
    hands its tensor to another rank's stage (layout.receiver), to that stage's block of the same microbatch,
    from just inside the sender's end to just inside the receiver's start, where the viewer binds each end."""
    p = len(step.replicas)
    blocks = step_blocks(cfg, step, p)
    labels = [r.device for r in step.replicas]
    found = {(b["kind"], b["stage"], b["microbatch"]): (r, b) for r in range(p) for b in blocks[r]}
    sends = []
    for r in range(p):
        for b in blocks[r]:
            to = layout.receiver(b["kind"], b["stage"], cfg.schedule, p)
            kinds = (layout.F,) if b["kind"] == layout.F else (layout.B, layout.I)  # a gradient: B, or ZB's I
            keys = [(k, to, b["microbatch"]) for k in kinds if (k, to, b["microbatch"]) in found]
            if to is None or not keys:
                continue
            r2, b2 = found[keys[0]]
            sends.append((labels[r], b["end"] - _inside(b), labels[r2], b2["start"] + _inside(b2)))
    return sends


def _inside(block: dict) -> float:
    """How far inside a block an arrow's end sits, where the viewer binds it: a microsecond, or half a
    shorter block."""
    return min(1e-6, (block["end"] - block["start"]) / 2)


def step_blocks(cfg: FitConfig, step: Step, p: int) -> list[list[dict]]:
    """Each rank's blocks in a step, from its recorded phases (_walk's)."""
    return _walk(cfg, step, p)[0]


def _memory(extra: dict | None) -> list[dict] | None:
    value = (extra or {}).get(NAME)
    return value.get("per_rank_memory") if isinstance(value, dict) else None


def picture_part(cfg: FitConfig, step: Step, devices: list[dict], extra: dict) -> dict:
    """The live picture's pipeline part: the step's schedule as it ran (step_value of the step's own blocks:
    the bubble, the held activations, the bytes between stages; before a run, the plan's), each block's
    unit-time tick (the phase walk steps through them) and microbatch on its phase entry, and what each rank
    holds."""
    blocks, fields = _walk(cfg, step, len(devices))
    memory = _memory(extra)
    value = step_value(cfg, [d["label"] for d in devices], blocks, memory)
    measured = memory_part(devices, memory)
    return {"pipeline": value, "phase_fields": fields, "param_names": fitted_names(cfg),
            "memory_measured": measured}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# The page's panels.


def held_text(held: list[dict]) -> str:
    """ "2 microbatches, 1.6 kB" for each of a rank's stages."""
    return "; ".join(count("pp.held", h["microbatches"], bytes=format_bytes(h["bytes"])) for h in held)


def stage_table(value: dict) -> list[dict[str, Any]]:
    """Each rank's stages, their layers, and the activations each stage held at most."""
    rank_, device = t("view.col.rank"), t("view.col.device")
    stages, layers, held = t("pp.col.stages"), t("pp.col.layers"), t("pp.col.held")
    rows = []
    for r in value["ranks"]:
        rows.append({
            rank_: r["rank"], device: r["device"],
            stages: ", ".join(str(s) for s in r["stages"]),
            layers: ", ".join(f"{lo + 1}–{hi}" if hi - lo > 1 else f"{hi}" for lo, hi in r["layers"]),
            held: held_text(r["held"]),
        })  # fmt: skip
    return rows


def sections(snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None) -> list[Section]:
    """Each rank's stages and layers and what they held (the latest step's, or the plan's), then memory."""
    config, plan = shown(snap, cfg, plan)
    if config is None:
        return []
    if snap is not None and snap.latest is not None:
        step = snap.latest
        blocks = step_blocks(config, step, len(step.replicas))
        caption = t("pp.stages.caption", step=step.step, loss=f"{step.loss:.6g}")
    elif plan is not None:
        step = planned_step(config, plan)[0]
        blocks = [[] for _ in step.replicas]
        rows = count("view.count.row", step.input_shape[0])
        caption = t("pp.stages.planned", rows=rows, m=config.microbatches)
    else:
        return []
    labels = tuple(r.device for r in step.replicas)
    value = step_value(config, labels, blocks)  # before a run, what each stage will hold
    split = Section(
        "pp_stages",
        title=t("pp.stages.title"),
        tables=(stage_table(value),),
        text_columns=(t("view.col.rank"), t("pp.col.stages")),
        notes=(caption, t("pp.stages.note", layers=config.layers, stages=value["stages"])),
    )
    measured = _memory(snap.extra if snap is not None else None)
    k = len(labels)
    planned = [layout.planned_memory(config, r, k) for r in range(k)]
    return [split, ranks_memory(labels, measured, planned, t("pp.memory.note"))]


def parallelism(cfg: FitConfig, started: RunStarted) -> str:
    """ "Pipeline parallel, 2 ranks, 1f1b, gloo"."""
    backend = "nccl" if cfg.devices.startswith("cuda") else "gloo"
    return t("pp.parallelism", ranks=count("cli.count.rank", len(started.devices)), schedule=cfg.schedule,
             backend=backend)  # fmt: skip


def percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def holds_lines(value: dict) -> list[str]:
    """Detail('pp'): the stages on each rank, the bubble measured and by formula, what each stage held."""
    ranks = count("cli.count.rank", value["world_size"])
    lines = [t("pp.console.layout", ranks=ranks, layers=value["layers"],
               stages=value["stages"], schedule=value["schedule"], m=value["microbatches"],
               rows=value["microbatch_rows"])]  # fmt: skip
    memory = {m["rank"]: m for m in value.get("per_rank_memory", [])}
    for r in value["ranks"]:
        held = held_text(r["held"])
        line = t("pp.console.rank", rank=r["rank"], stages=", ".join(map(str, r["stages"])), held=held)
        if r["rank"] in memory:
            m = memory[r["rank"]]
            line += t(
                "pp.console.memory",
                parameters=format_bytes(m["parameters"]),
                gradients=format_bytes(m["gradients"]),
                optimizer=format_bytes(m["optimizer_state"]),
            )
        lines.append(line)
    if any(r["blocks"] for r in value["ranks"]):
        lines.append(t("pp.console.bubble", measured=percent(value["bubble_measured"]),
                       formula=percent(value["bubble_formula"]), text=value["bubble_formula_text"],
                       bytes=format_bytes(value["bytes_between_stages"])))  # fmt: skip
    return lines


def console_frame(snap: Snapshot) -> tuple[list[str], list[str]]:
    """The process group and the stages first; the ranks' final parameters once it ends."""
    return rank_view.console_frame(snap, NAME, holds_lines)


def markdown(cfg: FitConfig | None = None) -> str:
    """Its explanation for the page (its record's `markdown`), its example on the run's sizes."""
    return t("explain.pp", example=example(cfg))


def example(cfg: FitConfig | None) -> str:
    """The explanation's example on cfg's sizes: "4 layers in 2 stages on 2 ranks, 4 microbatches of 50"."""
    cfg = cfg if cfg is not None else FitConfig(strategy=NAME)
    p = cfg.workers
    return t("explain.pp.example", layers=cfg.layers, stages=layout.n_stages(cfg.schedule, p),
             ranks=count("cli.count.rank", p), m=cfg.microbatches,
             rows=min(cfg.batch_size, cfg.data_size) // max(1, cfg.microbatches),
             formula=layout.formula_text(cfg.schedule),
             bubble=percent(layout.formula_bubble(cfg.schedule, p, cfg.microbatches)))  # fmt: skip
