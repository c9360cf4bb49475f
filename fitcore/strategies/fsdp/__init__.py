"""The fsdp strategy: PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`), one process per rank.

`train_fsdp` starts K = cfg.workers ranks exactly as DDP's launcher does (its launcher module: the store on
loopback, spawned ranks, the gate between steps), with FSDP's Engine:

  1. every rank builds the same data and initial parameters; W is laid out (d, 1), y = X @ W + b;
  2. fully_shard cuts W's rows and b over the ranks (torch.chunk's rule, padded: .layout), so no
     rank holds the whole model: 3 features on 2 ranks, rank 0 holds w1, w2 and b, rank 1 w3 alone;
  3. each rank takes DDP's rows (DistributedSampler, ceil(B / K) a step: fitcore.shards);
  4. a step: all-gather W and b (the whole model on every rank), forward, loss, backward (ZeRO-3 all-gathers
     again, the parameters having been freed after forward), reduce-scatter (each rank keeps the average
     gradient of its own shard), then each rank's optimizer steps its shard, Adam state included.

With a mean loss, equal rows per rank make the averaged gradient the gradient of the global mean loss, so
FSDP matches DDP and one process on the same rows.

The package, by responsibility:
  layout.py  who holds which rows, the bytes of each collective, one rank's phases;
  rank.py    one rank's loop, its timed collectives, what a rank reports;
  memory.py  the bytes each rank holds (and DDP's and DataParallel's counterparts).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

from fitcore.config import FitConfig
from fitcore.devices import DevicePlan
from fitcore.events import Detail, Event, RunEnded
from fitcore.strategies.ddp.launcher import Engine, train_ddp
from fitcore.strategies.fsdp.layout import (
    ALL_GATHER,
    FSDP_PHASES,
    REDUCE_SCATTER,
    fsdp_specs,
    fsdp_step_bytes,
    padded_rows,
    ranks_fsdp_specs,
    shard_numel,
    shard_rows,
    shards_value,
)
from fitcore.strategies.fsdp.memory import dataparallel_memory, ddp_memory, fsdp_memory, held, held_bytes
from fitcore.strategies.fsdp.rank import (
    ColumnLinear,
    final_params,
    joined_params,
    rank_loop,
    shard_params,
    train_fsdp_rank,
)
from fitcore.train import Control


def fsdp_value(cfg: FitConfig, labels, finals, reshard_after_forward: bool) -> dict:
    """Detail('fsdp').value at the end: the layout, each rank's shard and memory as it measured them."""
    value = shards_value(cfg.n_features, len(labels), labels, reshard_after_forward)
    for row, final in zip(value["ranks"], finals):
        row["shard"] = final.extra.get("shard")
        row["collectives"] = final.extra.get("collectives", [])
    value["per_rank_memory"] = [final.extra["memory"] for final in finals if "memory" in final.extra]
    return value


def _details(reshard_after_forward: bool, cfg, labels, finals) -> list[Detail]:
    return [Detail("fsdp", fsdp_value(cfg, labels, finals, reshard_after_forward))]


def engine(reshard_after_forward: bool = True) -> Engine:
    """The launcher's Engine for FSDP: fully_shard ranks, their shards joined, their memory reported."""
    return Engine(
        train=rank_loop(reshard_after_forward),
        step_params=shard_params,
        final=final_params,
        weights=joined_params,
        specs=ranks_fsdp_specs,
        details=partial(_details, reshard_after_forward),
    )


def train_fsdp(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
    reshard_after_forward: bool = True,
) -> RunEnded:
    """Fit y = X @ W + b with fully_shard on cfg.workers spawned ranks; emit train_ddp's events.

    The same events as the ddp package's train_ddp (Step's weights and bias are the ranks' shards joined), and
    Detail('fsdp') before Detail('final'): each rank's rows of W and b, its measured collective buffers and
    `per_rank_memory`. reshard_after_forward: True frees the gathered parameters after forward (ZeRO-3,
    two all-gathers a step), False keeps them until backward ends (ZeRO-2, one).
    """
    return train_ddp(cfg, on_event, control, clock, plan, engine(reshard_after_forward))


__all__ = [
    "ALL_GATHER",
    "FSDP_PHASES",
    "REDUCE_SCATTER",
    "ColumnLinear",
    "dataparallel_memory",
    "ddp_memory",
    "engine",
    "fsdp_memory",
    "fsdp_specs",
    "fsdp_step_bytes",
    "fsdp_value",
    "held",
    "held_bytes",
    "padded_rows",
    "shard_numel",
    "shard_rows",
    "shards_value",
    "train_fsdp",
    "train_fsdp_rank",
]
