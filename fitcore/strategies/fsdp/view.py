"""FSDP's part of the page: which rows of W and b each rank holds, the bytes each rank holds, its planned
step, how it ran and its console lines. The data shards are DDP's (DistributedSampler), so its panels of
shards and ranks are DDP's view's, with FSDP's own panel of parameter shards and memory beside them.
It exposes the names every strategy's view module does (see fitcore.strategies.dataparallel.view), and
`picture_part` (the strategy's `picture` hook) and `layout_lines` (the console's lines of Detail('fsdp'))."""

from __future__ import annotations

from typing import Any

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import RunStarted, Step
from fitcore.core.i18n import count, t
from fitcore.core.memory import memory_part
from fitcore.core.shards import padded_part
from fitcore.core.text import format_bytes
from fitcore.runs.runner import Snapshot
from fitcore.strategies.fsdp.layout import planned_memory, shard_rows, shards_value
from fitcore.strategies.fsdp.name import NAME
from fitcore.view import ranks as rank_view
from fitcore.view.common import Section, allocated_cell, allocated_note, fitted_names, shown

CONSOLE_HINT = "view.console_hint.fsdp"
planned_step = rank_view.planned_step  # the same rows per rank: DistributedSampler's shards


def zero_stage(cfg: FitConfig) -> int:
    """3 where fully_shard frees the gathered parameters after forward, 2 where it keeps them to backward."""
    return 3 if cfg.reshard_after_forward else 2


def shard_names(cfg: FitConfig, k: int) -> list[list[str]]:
    """Each rank's parameters by name: 3 features on 2 ranks, [["w1", "w2", "b"], ["w3"]]."""
    names = fitted_names(cfg)  # w1 ... wd, b (a CSV file's columns by name)
    w, b = shard_rows(cfg.n_features, k), shard_rows(1, k)
    return [names[w[r][0] : w[r][1]] + (["b"] if b[r][1] > b[r][0] else []) for r in range(k)]


def _memory(extra: dict | None) -> list[dict] | None:
    value = (extra or {}).get(NAME)
    return value.get("per_rank_memory") if isinstance(value, dict) else None


def picture_part(cfg: FitConfig, step: Step, devices: list[dict], extra: dict) -> dict:
    """The live picture's FSDP part: on each rank, its rows of W and b (names and values after the step)
    and the bytes it holds once measured; DDP's padding rows. Changes `devices` in place."""
    padded_part(cfg, step, devices)
    k = len(devices)
    w_rows = shard_rows(cfg.n_features, k)
    for device, (lo, hi), names in zip(devices, w_rows, shard_names(cfg, k)):
        values = list(step.weights[lo:hi]) if len(step.weights) == cfg.n_features else []
        if "b" in names and values:
            values.append(step.bias)
        device["shard"] = {"names": names, "values": values, "rows": [lo, hi]}
    measured = memory_part(devices, _memory(extra))
    return {"zero": zero_stage(cfg), "param_names": fitted_names(cfg), "memory_measured": measured}


# ---------------------------------------------------------------------------------------------------------
# The page's panels.


def holdings_rows(cfg: FitConfig, labels, memory: list[dict] | None) -> list[dict[str, Any]]:
    """One row per rank: the parameters it holds, and the bytes of its parameters, gradients and Adam
    state (measured by the rank where a run has reported them; before that the planned bytes)."""
    names = shard_names(cfg, len(labels))
    rows = []
    for rank, label in enumerate(labels):
        held = memory[rank] if memory and rank < len(memory) else planned_memory(cfg, rank, len(labels))
        rows.append({
            t("view.col.rank"): rank,
            t("view.col.device"): label,
            t("fsdp.col.holds"): ", ".join(names[rank]) or t("fsdp.none"),
            t("fsdp.col.parameters"): format_bytes(held["parameters"]),
            t("fsdp.col.gradients"): format_bytes(held["gradients"]),
            t("fsdp.col.optimizer_state"): format_bytes(held["optimizer_state"]),
            **allocated_cell(held),
        })  # fmt: skip
    return rows


def _holdings_section(cfg: FitConfig, labels, extra: dict | None) -> Section:
    memory = _memory(extra)
    note = t("fsdp.memory.measured") if memory else t("fsdp.memory.planned")
    return Section(
        "fsdp_holdings",
        title=t("fsdp.holdings.title", zero=zero_stage(cfg)),
        tables=(holdings_rows(cfg, labels, memory),),
        text_columns=(t("view.col.rank"),),
        notes=(note, t(f"fsdp.holdings.zero{zero_stage(cfg)}"), *allocated_note(memory)),
    )


def sections(snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None) -> list[Section]:
    """Who holds which parameters and how many bytes, then DDP's panels of each rank's rows."""
    config, shown_plan = shown(snap, cfg, plan)
    if snap is not None and snap.devices:
        labels = tuple(snap.devices)
    elif config is not None and shown_plan is not None:
        labels = planned_step(config, shown_plan)[1]
    else:
        return []
    own = _holdings_section(config, labels, snap.extra if snap is not None else None)
    return [own, *rank_view.rank_sections(snap, cfg, plan, FSDP_WORDS)]


# FSDP's ranks take DDP's rows; what they do with them is FSDP's own
FSDP_WORDS = rank_view.RankWords(caption="fsdp.ranks.caption", pale="fsdp.shards.pale")


def parallelism(cfg: FitConfig, started: RunStarted) -> str:
    """ "FSDP (ZeRO-3), 2 ranks, gloo": gloo on the CPU, nccl with one GPU per rank."""
    return f"FSDP (ZeRO-{zero_stage(cfg)}), {rank_view.ranks_words(cfg, started)}"


def layout_lines(value: dict) -> list[str]:
    """Detail('fsdp'): who holds which rows of W and b, and what each rank holds, in bytes."""
    lines = [t("fsdp.console.layout", zero=value["zero"], ranks=count("cli.count.rank", value["world_size"]),
               numel=count("fsdp.count.number", value["padded_numel"]))]  # fmt: skip
    memory = {m["rank"]: m for m in value.get("per_rank_memory", [])}
    for r in value["ranks"]:
        lo, hi = r["weight_rows"]
        rows = f"W[{lo}:{hi}]" if hi > lo else t("fsdp.none")
        line = t("fsdp.console.rank", rank=r["rank"], rows=rows, bias=" + b" if r["bias"] else "")
        if r["rank"] in memory:
            m = memory[r["rank"]]
            line += t(
                "fsdp.console.memory",
                parameters=format_bytes(m["parameters"]),
                gradients=format_bytes(m["gradients"]),
                optimizer=format_bytes(m["optimizer_state"]),
            )
        lines.append(line)
    return lines


def console_frame(snap: Snapshot) -> tuple[list[str], list[str]]:
    """The process group and the shards' layout first; every rank's final parameters once the run ends."""
    return rank_view.console_frame(snap, NAME, layout_lines)


def markdown(cfg: FitConfig | None = None) -> str:
    """Its explanation for the page (its record's `markdown`), its example on the run's sizes."""
    return t("explain.fsdp", example=layout_example(cfg))


def layout_example(cfg: FitConfig | None) -> str:
    """The explanation's example, on cfg's weights and ranks (3 weights on 2 ranks without one): "with 3
    weights on 3 ranks, rank 0 holds w1 and b, rank 1 holds w2, rank 2 holds w3"."""
    cfg = cfg if cfg is not None else FitConfig(weights=(1.0, 1.0, 1.0), workers=2)
    holds = ""
    for rank, names in enumerate(shard_names(cfg, cfg.workers)):
        if len(names) > 1:  # "`w1, w2` and `b`": code names in one span, as the console writes W[0:2]
            said = t("explain.fsdp.both", first=f"`{', '.join(names[:-1])}`", last=f"`{names[-1]}`")
        else:
            said = f"`{names[0]}`" if names else t("fsdp.none")
        holds += t("explain.fsdp.rank.next" if rank else "explain.fsdp.rank", rank=rank, names=said)
    weights, ranks = count("fsdp.count.weight", cfg.n_features), count("cli.count.rank", cfg.workers)
    return t("explain.fsdp.example", weights=weights, ranks=ranks, holds=holds)


def planned_value(cfg: FitConfig, labels) -> dict:
    """Detail('fsdp').value before a run: the layout alone."""
    return shards_value(cfg.n_features, len(labels), labels, cfg.reshard_after_forward)
