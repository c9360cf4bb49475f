"""FSDP's Engine (`engine(cfg)`, its record's `ranks`), which the engine's launchers run (spawned ranks, or
one rank of a torchrun launch): what each rank runs (fully_shard, fitcore.strategies.fsdp.rank) and what
the parent emits.

Besides the launcher's events, FSDP's run emits Detail('fsdp') twice: after step 1, with each rank's rows of
W and b and the bytes it holds (parameters, gradients and Adam state exist from the first optimizer step on),
and at the end, with each rank's final shard and its first step's collective buffers as well.
"""

from __future__ import annotations

from functools import partial

from fitcore.core.config import FitConfig
from fitcore.core.events import Detail
from fitcore.engine.contract import Engine, joined_parts, memory_details, memory_on_step_one
from fitcore.strategies.fsdp.layout import FSDP_SLOTS, ranks_fsdp_specs, shards_value
from fitcore.strategies.fsdp.name import NAME
from fitcore.strategies.fsdp.rank import final_params, full_params, holds_memory, rank_part, shard_params
from fitcore.strategies.fsdp.view import layout_lines


def fsdp_value(cfg: FitConfig, labels, finals, reshard_after_forward: bool) -> dict:
    """Detail('fsdp').value at the end: the layout, each rank's shard and memory as it measured them."""
    value = shards_value(cfg.n_features, len(labels), labels, reshard_after_forward)
    for row, final in zip(value["ranks"], finals):
        row["shard"] = final.extra.get("shard")
        row["collectives"] = final.extra.get("collectives", [])
    value["per_rank_memory"] = [final.extra["memory"] for final in finals if "memory" in final.extra]
    return value


def _details(reshard_after_forward: bool, cfg, labels, finals) -> list[Detail]:
    if len(cfg.mesh_dims) > 1:  # a 2-D mesh: its ranks' shards are 2-D blocks, measured in per_rank_memory
        return memory_details(cfg, labels, finals)
    value = fsdp_value(cfg, labels, finals, reshard_after_forward)
    return [Detail(NAME, value), *memory_details(cfg, labels, finals)]  # printed after step 1 already


def _first_step_details(reshard_after_forward: bool, cfg, labels, reports) -> list[Detail]:
    """After step 1: who holds which rows and what each rank holds, as the ranks measured it."""
    if reports[0].extra is None:
        return []
    if len(cfg.mesh_dims) > 1:  # a 2-D mesh: each rank's block of W, as measured
        return [Detail("memory", [report.extra["memory"] for report in reports])]
    value = shards_value(cfg.n_features, len(labels), labels, reshard_after_forward)
    value["per_rank_memory"] = [report.extra["memory"] for report in reports]
    return [Detail(NAME, value, "\n".join(layout_lines(value))), Detail("memory", value["per_rank_memory"])]


def engine(cfg: FitConfig) -> Engine:
    """FSDP's Engine (its record's `ranks`): fully_shard ranks, their shards joined, their memory reported.
    cfg.reshard_after_forward True frees the gathered parameters after forward (ZeRO-3, two all-gathers a
    step), False keeps them until backward ends (ZeRO-2, one)."""
    reshard_after_forward = cfg.reshard_after_forward
    return Engine(
        part=rank_part(reshard_after_forward),
        step_params=shard_params,
        final=final_params,
        weights=joined_parts,
        specs=partial(ranks_fsdp_specs, reshard_after_forward),
        slots=FSDP_SLOTS,
        details=partial(_details, reshard_after_forward),
        step_extra=partial(memory_on_step_one, holds_memory),
        step_details=partial(_first_step_details, reshard_after_forward),
        words=NAME,
        joined=full_params,
    )
