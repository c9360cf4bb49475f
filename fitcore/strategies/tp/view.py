"""TP's part of the page: each rank's columns of X and rows of W, each rank's shapes in a step, what each
rank holds (measured once a run reports it), its picture part, how it ran and its console lines.

It exposes the names every strategy's view module does (fitcore.protocols.registry.StrategyView).
"""

from __future__ import annotations

import math
from typing import Any

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import Replica, RunStarted, Step
from fitcore.core.i18n import count, t
from fitcore.core.memory import memory_part
from fitcore.engine.rank import rank_labels
from fitcore.runs.runner import Snapshot
from fitcore.strategies.tp.layout import planned_memory
from fitcore.strategies.tp.name import NAME
from fitcore.view import ranks as rank_view
from fitcore.view.common import Section, fitted_names, ranks_memory, shape_text, shown

CONSOLE_HINT = "view.console_hint.tp"


def column_names(cfg: FitConfig, k: int) -> list[list[str]]:
    """Each rank's weights by name: 3 features on 2 ranks, [["w1", "w2"], ["w3"]] (b is on every rank)."""
    names = fitted_names(cfg)[:-1]  # w1 ... wd (a CSV file's columns by name)
    return [names[lo:hi] for lo, hi in columns(cfg.n_features, k)]


def column_replicas(labels, rows: int, d: int, losses=None, ids=None) -> tuple[Replica, ...]:
    """A Replica per rank: the whole batch's rows [0, rows) and its own columns [lo, hi) of X."""
    return tuple(
        Replica(
            label,
            0,
            rows,
            (rows, hi - lo),
            (rows, 1),
            losses[r] if losses else None,
            tuple(ids[r]) if ids else (),
            (lo, hi),
        )
        for r, (label, (lo, hi)) in enumerate(zip(labels, columns(d, len(labels))))
    )


def planned_step(cfg: FitConfig, plan: DevicePlan) -> tuple[Step, tuple[str, ...]]:
    """(a tp run's first step before any run: every rank the whole batch, its own columns; the ranks)."""
    labels = rank_labels(cfg, plan)
    rows, d = min(cfg.batch_size, cfg.data_size), cfg.n_features
    replicas = column_replicas(labels, rows, d)
    return Step(1, 1, 1, math.nan, (rows, d), (rows, 1), replicas, (), 0.0, 0.0), labels


def _memory(extra: dict | None) -> list[dict] | None:
    value = (extra or {}).get(NAME)
    return value.get("per_rank_memory") if isinstance(value, dict) else None


def picture_part(cfg: FitConfig, step: Step, devices: list[dict], extra: dict) -> dict:
    """The live picture's TP part: on each rank its rows of W (names, values after the step; its columns of
    X come with every rank's replica, fitcore.kit.live), and the bytes it holds once measured. Changes
    `devices` in place."""
    k = len(devices)
    for device, (lo, hi), names in zip(devices, columns(cfg.n_features, k), column_names(cfg, k)):
        values = list(step.weights[lo:hi]) if len(step.weights) == cfg.n_features else []
        device["shard"] = {"names": names, "values": values, "rows": [lo, hi]}
    measured = memory_part(devices, _memory(extra))
    return {"features": cfg.n_features, "param_names": fitted_names(cfg), "memory_measured": measured}


# ---------------------------------------------------------------------------------------------------------
# The page's panels.


def column_table(step: Step, cfg: FitConfig) -> list[dict[str, Any]]:
    """Each rank's columns of X, its rows of W, its input and output shape; the last row: the whole layer."""
    names = column_names(cfg, len(step.replicas))
    rank_, device, cols = t("view.col.rank"), t("view.col.device"), t("tp.col.columns")
    holds, inp, out = t("tp.col.holds"), t("view.col.input_shape"), t("view.col.output_shape")
    rows = []
    for r, replica in enumerate(step.replicas):
        lo, hi = replica.columns or (0, cfg.n_features)
        rows.append(
            {
                rank_: r,
                device: replica.device,
                cols: f"X[:, {lo}:{hi}]",
                holds: ", ".join(names[r]) + ", b",
                inp: shape_text(replica.input_shape),
                out: shape_text(replica.output_shape),
            }
        )
    rows.append(
        {
            rank_: t("view.ranks.all"),
            device: t("tp.ranks.together"),
            cols: f"X[:, 0:{cfg.n_features}]",
            holds: "W, b",
            inp: shape_text(step.input_shape),
            out: shape_text(step.output_shape),
        }
    )
    return rows


def sections(snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None) -> list[Section]:
    """Each rank's columns and shapes (the latest step, or the planned one), then what each rank holds."""
    config, plan = shown(snap, cfg, plan)
    if config is None or (plan is None and (snap is None or snap.latest is None)):
        return []
    if snap is not None and snap.latest is not None:
        step, caption = (
            snap.latest,
            t("tp.ranks.caption", step=snap.latest.step, loss=f"{snap.latest.loss:.6g}"),
        )
    else:
        step = planned_step(config, plan)[0]
        caption = t("tp.ranks.planned", rows=count("view.count.row", step.input_shape[0]))
    labels = tuple(r.device for r in step.replicas)
    split = Section(
        "tp_columns",
        title=t("tp.columns.title"),
        tables=(column_table(step, config),),
        text_columns=(t("view.col.rank"),),
        notes=(caption,),
    )
    measured = _memory(snap.extra if snap is not None else None)
    k = len(labels)
    planned = [planned_memory(config, r, k) for r in range(k)]
    return [split, ranks_memory(labels, measured, planned, t("tp.memory.note"))]


def parallelism(cfg: FitConfig, started: RunStarted) -> str:
    """ "Tensor parallel, 2 ranks, gloo"."""
    backend = "nccl" if cfg.devices.startswith("cuda") else "gloo"
    return t("tp.parallelism", ranks=count("cli.count.rank", len(started.devices)), backend=backend)


def holds_lines(value: dict) -> list[str]:
    """Detail('tp'): each rank's columns of X, its rows of W, and what it holds, in bytes."""
    from fitcore.core.text import format_bytes

    lines = [
        t("tp.console.layout", ranks=count("cli.count.rank", value["world_size"]), features=value["features"])
    ]
    memory = {m["rank"]: m for m in value.get("per_rank_memory", [])}
    for r in value["ranks"]:
        lo, hi = r["columns"]
        line = t("tp.console.rank", rank=r["rank"], lo=lo, hi=hi)
        if r["rank"] in memory:
            m = memory[r["rank"]]
            line += t(
                "tp.console.memory",
                parameters=format_bytes(m["parameters"]),
                gradients=format_bytes(m["gradients"]),
                optimizer=format_bytes(m["optimizer_state"]),
            )
        lines.append(line)
    return lines


def console_frame(snap: Snapshot) -> tuple[list[str], list[str]]:
    """The process group and who holds which columns first; the ranks' final parameters once it ends."""
    return rank_view.console_frame(snap, NAME, holds_lines)


def markdown(cfg: FitConfig | None = None) -> str:
    """Its explanation for the page (its record's `markdown`), its example on the run's sizes."""
    return t("explain.tp", example=example(cfg))


def example(cfg: FitConfig | None) -> str:
    """The explanation's example on cfg's weights and ranks: "with 3 weights on 2 ranks, rank 0 holds w1
    and w2 and takes X[:, 0:2]; rank 1 holds w3 and takes X[:, 2:3]"."""
    cfg = cfg if cfg is not None else FitConfig(weights=(1.0, 1.0, 1.0), workers=2)
    k = min(cfg.workers, cfg.n_features)
    holds = ""
    for rank, ((lo, hi), names) in enumerate(zip(columns(cfg.n_features, k), column_names(cfg, k))):
        # the names in one code span, as the console writes W[0:2]
        key = "explain.tp.rank.next" if rank else "explain.tp.rank"
        holds += t(key, rank=rank, names=f"`{', '.join(names)}`", lo=lo, hi=hi)
    return t(
        "explain.tp.example",
        weights=count("tp.count.weight", cfg.n_features),
        ranks=count("cli.count.rank", k),
        holds=holds,
    )
