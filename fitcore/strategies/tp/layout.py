"""Who holds which columns of X and rows of W, the bytes of a step's all-reduce, and one rank's phases.

Tensor parallelism of the linear layer y = X·W + b splits the features: rank r holds W's rows (the features)
cols[r] = [lo, hi), by torch.chunk's rule (RowwiseParallel's Shard(1) of nn.Linear's weight [1, d]), takes
the whole batch but only X[:, lo:hi], and computes a partial output X[:, lo:hi]·W[lo:hi], (B, 1). One
all-reduce of the partial outputs in forward makes every rank's output the whole X·W; b is added once, after
it (every rank holds b). In backward, each rank's gradient of its W rows is X[:, lo:hi]ᵀ·∂L/∂y: no
communication. So TP's traffic grows with the batch (B numbers per all-reduce), where DDP's grows with the
model (d + 1 numbers).
"""

from __future__ import annotations

import math
from typing import Sequence

from fitcore.core.chunks import columns, ranks_allowed
from fitcore.core.config import MAX_WORKERS, FitConfig
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.phases import (
    BACKWARD_END,
    LOSS_END,
    OPTIMIZER_END,
    START,
    PhaseSpec,
    ring_bytes,
)

# One rank's step, in order: load its columns of the batch, its partial product, the all-reduce of the
# partial outputs, the loss on the whole output, backward (no communication), its optimizer step
LOAD, FORWARD, ALLREDUCE, LOSS, BACKWARD, OPTIMIZER = (
    "load",
    "forward",
    "allreduce",
    "loss",
    "backward",
    "optimizer",
)
TP_PHASES = (LOAD, FORWARD, ALLREDUCE, LOSS, BACKWARD, OPTIMIZER)

# Time slots after those every layout has (START ... OPTIMIZER_END): the columns loaded, the partial output
# computed (a hook before RowwiseParallel's output hook), the all-reduce waited for (a hook after it)
LOADED, PARTIAL_END, ALLREDUCE_END = 4, 5, 6
TP_SLOTS = 7


def allreduce_bytes(k: int, rows: int, itemsize: int) -> int:
    """What one of k ranks sends in a ring all-reduce of its partial output, (rows, 1): 2(k-1)/k of it.

    The buffer is rows·itemsize bytes (N·4 for float32): TP's traffic grows with the batch. (A rank passes
    its buffer's bytes as `rows` with itemsize 1.)"""
    return ring_bytes(k, rows * itemsize)


def tp_step_bytes(rows: int, k: int, itemsize: int) -> int:
    """A whole TP step's bytes on k ranks: each rank's forward all-reduce of the batch's partial outputs."""
    return k * allreduce_bytes(k, rows, itemsize)


def tp_specs(label: str, sent: int) -> tuple[PhaseSpec, ...]:
    """One rank's step specs over the TP slots; `sent`: its bytes in the forward all-reduce."""
    return (
        PhaseSpec(LOAD, label, 0, START, LOADED),
        PhaseSpec(FORWARD, label, 0, LOADED, PARTIAL_END),
        PhaseSpec(ALLREDUCE, label, sent, PARTIAL_END, ALLREDUCE_END),
        PhaseSpec(LOSS, label, 0, ALLREDUCE_END, LOSS_END),
        PhaseSpec(BACKWARD, label, 0, LOSS_END, BACKWARD_END),
        PhaseSpec(OPTIMIZER, label, 0, BACKWARD_END, OPTIMIZER_END),
    )


def ranks_tp_specs(labels: Sequence[str], d: int, itemsize: int, reports, mesh=None) -> tuple[PhaseSpec, ...]:
    """Every rank's specs, rank r's over slots r*TP_SLOTS ...; the all-reduce's bytes as each rank measured
    its buffer (its StepReport's `sent`), or, where the lead rank has only the shared table (torchrun), by
    the formula on the step's rows."""
    k = len(labels)
    sent = [r.sent[0] if r.sent else allreduce_bytes(k, r.input_shape[0], itemsize) for r in reports]
    return tuple(
        spec._replace(start=spec.start + r * TP_SLOTS, stop=spec.stop + r * TP_SLOTS)
        for r, label in enumerate(labels)
        for spec in tp_specs(label, sent[r])
    )


def steps_per_epoch(data_size: int, batch_size: int) -> int:
    """Every rank takes the whole batch: one device's steps, ceil(N / B)."""
    return math.ceil(data_size / batch_size)


def planned_memory(cfg, rank: int, k: int, itemsize: int = 4) -> dict:
    """The bytes rank `rank` of k will hold: its rows of W and b (every rank holds b), their gradients, and
    their optimizer state. DTensor keeps each rank's shard of W in a buffer of ceil(d / K) numbers (an uneven
    last shard is a view of a padded one, as measured), while the gradients and Adam's moments are made to
    the shard's own size."""
    from fitcore.core.memory import optimizer_state

    lo, hi = columns(cfg.n_features, k)[rank]
    numbers = (hi - lo) + 1
    return {
        "rank": rank,
        "parameters": (math.ceil(cfg.n_features / k) + 1) * itemsize,
        "gradients": numbers * itemsize,
        "optimizer_state": optimizer_state(cfg, numbers, itemsize),
    }


def bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg: object = None) -> int:
    """One step's bytes on k ranks (its record's `bytes_of_step`): the batch's partial outputs, which grow
    with the rows."""
    return tp_step_bytes(rows, k, itemsize)


def rules(cfg: FitConfig, plan: object) -> None:
    """Its own config rule (its record's `rules`): a rank count that torch.chunk gives columns each (4
    features on 3 ranks: 2, 2 and none, refused)."""
    allowed = ranks_allowed(cfg.n_features, MAX_WORKERS)
    if cfg.workers not in allowed:
        raise ConfigError(
            "workers",
            cfg.workers,
            Text("config.tp_workers", features=cfg.n_features, allowed=Listed(allowed)),
        )
