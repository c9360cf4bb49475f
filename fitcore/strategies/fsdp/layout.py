"""How FSDP2's `fully_shard` cuts W (d, 1) and b (1,) over K ranks, the bytes of its collectives, its phases.

fully_shard shards every parameter on dim 0 with `torch.chunk`'s rule: chunks of c = ceil(n / K) rows, so a
rank can get fewer rows or none; each rank's shard is padded to c rows, and one all-gather moves every
parameter's padded shard at once. With W laid out (d, 1) and b (1,), every rank's all-gather input is
ceil(d / K) + 1 numbers (b's one number lives on rank 0; the others hold only its padding).
"""

from __future__ import annotations

import math
from typing import Sequence

from fitcore.core.config import FitConfig
from fitcore.core.memory import optimizer_state
from fitcore.core.phases import (
    BACKWARD,
    BACKWARD_END,
    FORWARD,
    FORWARD_END,
    LOAD,
    LOADED,
    LOSS,
    LOSS_END,
    OPTIMIZER,
    OPTIMIZER_END,
    START,
    TP_ALLREDUCE,
    PhaseSpec,
    ring_bytes,
)
from fitcore.protocols.mesh import DP, TP

ALL_GATHER, REDUCE_SCATTER = "all_gather", "reduce_scatter"
FSDP_PHASES = (LOAD, ALL_GATHER, FORWARD, LOSS, BACKWARD, REDUCE_SCATTER, OPTIMIZER)
# FSDP's slots after those every layout has (START ... OPTIMIZER_END) and DDP's LOADED, FORWARD_END: the
# forward's all-gather, backward's (ZeRO-3 only: the parameters were freed after forward) and the
# reduce-scatter, each marked by the collective itself (fitcore.strategies.fsdp.rank.TimedAllGather)
AG_START, AG_END, AG_BACK_START, AG_BACK_END, RS_START, RS_END = 6, 7, 8, 9, 10, 11
# a 2-D mesh's (dp x tp): the partial output done, the all-reduce of the partial outputs inside the `tp`
# group arrived (fitcore.engine.rowwise's hooks)
TP_PARTIAL_END, TP_ALLREDUCE_END = 12, 13
FSDP_SLOTS = 14
GATHERS = ((AG_START, AG_END), (AG_BACK_START, AG_BACK_END))  # the n-th all-gather of a step marks these


def shard_rows(n: int, k: int) -> tuple[tuple[int, int], ...]:
    """Each of k ranks' rows [start, stop) of a parameter with n rows on dim 0 (torch.chunk, then empty)."""
    c = math.ceil(n / k)
    return tuple((min(r * c, n), min((r + 1) * c, n)) for r in range(k))


def padded_rows(n: int, k: int) -> int:
    """Rows every rank's shard of an n-row parameter is padded to: ceil(n / k)."""
    return math.ceil(n / k)


def shard_numel(d: int, k: int) -> int:
    """Numbers in each rank's all-gather input (and reduce-scatter output): W's and b's padded shards."""
    return padded_rows(d, k) + padded_rows(1, k)


def shards_value(d: int, k: int, labels: Sequence[str], reshard_after_forward: bool) -> dict:
    """Detail('fsdp').value before a run: who holds which rows of W and b, padded to what."""
    w_rows, b_rows = shard_rows(d, k), shard_rows(1, k)
    return {
        "world_size": k,
        "reshard_after_forward": reshard_after_forward,
        "zero": 3 if reshard_after_forward else 2,
        "padded_numel": shard_numel(d, k),
        "ranks": [
            {
                "rank": r,
                "device": labels[r],
                "weight_rows": list(w_rows[r]),  # W[start:stop] of the seed's W (d, 1)
                "bias": b_rows[r][1] > b_rows[r][0],
                "numel": (w_rows[r][1] - w_rows[r][0]) + (b_rows[r][1] - b_rows[r][0]),
            }
            for r in range(k)
        ],
    }


def planned_memory(cfg, rank: int, k: int, itemsize: int = 4) -> dict:
    """The bytes rank `rank` of k will hold, before a run measures them: its padded shards of W and b and of
    their gradients (fully_shard pads every shard to ceil(n / k) rows), and Adam's two moments of its real
    rows with one 4-byte step count per parameter (SGD without momentum holds no state)."""
    padded = shard_numel(cfg.n_features, k) * itemsize
    w, b = shard_rows(cfg.n_features, k)[rank], shard_rows(1, k)[rank]
    real = (w[1] - w[0]) + (b[1] - b[0])
    return {"rank": rank, "parameters": padded, "gradients": padded,
            "optimizer_state": optimizer_state(cfg, real, itemsize)}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Bytes. One rank's traffic in the ring algorithms, as DDP's allreduce_bytes counts it.


def all_gather_bytes(k: int, input_bytes: int) -> int:
    """What one rank sends in a ring all-gather of its `input_bytes`: its shard to each of k - 1 others."""
    return (k - 1) * input_bytes


def reduce_scatter_bytes(k: int, output_bytes: int) -> int:
    """What one rank sends in a ring reduce-scatter whose output (its shard) is `output_bytes`: k - 1 of the
    k chunks of its input, each a shard's size."""
    return (k - 1) * output_bytes


def fsdp_step_bytes(k: int, d: int, itemsize: int, reshard_after_forward: bool = True) -> int:
    """A whole FSDP step's bytes on k ranks: each rank's all-gathers (two under ZeRO-3: forward and
    backward) and its reduce-scatter. ZeRO-2's is a ring all-reduce of the k * shard_numel padded numbers:
    more than DDP's d + 1, since W and b are each padded to k equal shards (b's one number to k)."""
    shard = shard_numel(d, k) * itemsize
    gathers = 2 if reshard_after_forward else 1
    return k * (gathers * all_gather_bytes(k, shard) + reduce_scatter_bytes(k, shard))


def bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg: FitConfig | None = None) -> int:
    """One step's bytes on k ranks (its record's `bytes_of_step`), as the config reshards (ZeRO-3 without
    one); the same whatever the rows."""
    return fsdp_step_bytes(k, d, itemsize, True if cfg is None else cfg.reshard_after_forward)


# ---------------------------------------------------------------------------------------------------------
# Phases: one rank's specs over the FSDP slots; every rank's over slots r*FSDP_SLOTS ...


def fsdp_specs(label: str, sent: Sequence[int], tp_sent: int | None = None) -> tuple[PhaseSpec, ...]:
    """One rank's step specs. `sent`: the bytes it sent in each collective of the step, as measured: the
    forward's all-gather, backward's all-gather under ZeRO-3 only, the reduce-scatter; `tp_sent`, on a 2-D
    mesh, its bytes in its `tp` group's all-reduce of the partial outputs, which ends forward.

    The collectives of backward lie inside backward's time, as DDP's all-reduce does.
    """
    forward_gather, *backward_gather, scatter = sent
    specs = [
        PhaseSpec(LOAD, label, 0, START, LOADED),
        PhaseSpec(ALL_GATHER, label, forward_gather, AG_START, AG_END),
    ]
    if tp_sent is None:
        specs += [
            PhaseSpec(FORWARD, label, 0, AG_END, FORWARD_END),
            PhaseSpec(LOSS, label, 0, FORWARD_END, LOSS_END),
        ]
    else:
        specs += [
            PhaseSpec(FORWARD, label, 0, AG_END, TP_PARTIAL_END),
            PhaseSpec(TP_ALLREDUCE, label, tp_sent, TP_PARTIAL_END, TP_ALLREDUCE_END),
            PhaseSpec(LOSS, label, 0, TP_ALLREDUCE_END, LOSS_END),
        ]
    specs += [PhaseSpec(BACKWARD, label, 0, LOSS_END, BACKWARD_END)]
    for sent_bytes in backward_gather:
        specs.append(PhaseSpec(ALL_GATHER, label, sent_bytes, AG_BACK_START, AG_BACK_END))
    specs += [
        PhaseSpec(REDUCE_SCATTER, label, scatter, RS_START, RS_END),
        PhaseSpec(OPTIMIZER, label, 0, BACKWARD_END, OPTIMIZER_END),
    ]
    return tuple(specs)


def planned_sent(k: int, d: int, itemsize: int, reshard_after_forward: bool) -> tuple[int, ...]:
    """One rank's bytes in each collective of a step, by the ring formulas: what a rank measures (tests)."""
    shard = shard_numel(d, k) * itemsize
    gathers = (all_gather_bytes(k, shard),) * (2 if reshard_after_forward else 1)
    return (*gathers, reduce_scatter_bytes(k, shard))


def planned_sent_2d(dp: int, cols: int, itemsize: int, reshard_after_forward: bool) -> tuple[int, ...]:
    """On a 2-D mesh: one rank's bytes in each collective of a step, by the ring formulas over its `dp`
    group. fully_shard cuts dim 0 of its [1, cols] block of W (one row, padded to ceil(1 / dp)) and of b."""
    shard = (padded_rows(1, dp) * cols + padded_rows(1, dp)) * itemsize
    gathers = (all_gather_bytes(dp, shard),) * (2 if reshard_after_forward else 1)
    return (*gathers, reduce_scatter_bytes(dp, shard))


def ranks_fsdp_specs(
    reshard_after_forward: bool, labels: Sequence[str], d: int, itemsize: int, reports, mesh=None
) -> tuple[PhaseSpec, ...]:
    """Every rank's specs from its StepReport's measured `sent` (the launcher's Engine.specs); with no
    reports (torchrun's lead rank hears only the shared table), from the ring formulas (planned_sent). On a
    2-D mesh each rank's `tp` all-reduce carries its rows' (b, 1) partial output."""
    k = len(labels)
    tp = mesh.size(TP) if mesh is not None and TP in mesh.names else None
    sent = [r.sent for r in reports]
    if (not sent or not all(sent)) and tp is not None:  # fully_shard over dp of each rank's [1, cols] W
        dp = mesh.size(DP)
        sent = [planned_sent_2d(dp, r.input_shape[1], itemsize, reshard_after_forward) for r in reports]
    elif not sent or not all(sent):
        sent = [planned_sent(k, d, itemsize, reshard_after_forward)] * k
    tp_sent = [None if tp is None else ring_bytes(tp, r.input_shape[0] * itemsize) for r in reports]
    return tuple(
        spec._replace(start=spec.start + r * FSDP_SLOTS, stop=spec.stop + r * FSDP_SLOTS)
        for r, label in enumerate(labels)
        for spec in fsdp_specs(label, sent[r], tp_sent[r] if r < len(tp_sent) else None)
    )
