"""DataParallel's phases, in the order of a step, their bytes and the specs of its step.

scatter, replicate, parallel_apply and gather are its forward's (torch/nn/parallel/data_parallel.py); loss,
backward, reduce and optimizer follow on the first device. fitcore.core.phases holds what every strategy's
step shares: the words, the slots, the specs and the clocks.
"""

from __future__ import annotations

from typing import Callable, Sequence

from fitcore.core.chunks import chunk_sizes
from fitcore.core.phases import (
    BACKWARD,
    BACKWARD_END,
    GATHER,
    LOSS,
    LOSS_END,
    OPTIMIZER,
    OPTIMIZER_END,
    REDUCE,
    SCATTER,
    PhaseSpec,
    gather_bytes,
    reduce_bytes,
    scatter_bytes,
)

REPLICATE, PARALLEL_APPLY = "replicate", "parallel_apply"
DATAPARALLEL_PHASES = (SCATTER, REPLICATE, PARALLEL_APPLY, GATHER, LOSS, BACKWARD, REDUCE, OPTIMIZER)


def replicate_bytes(d: int, itemsize: int, first: bool) -> int:
    """W and b, d + 1 numbers, broadcast from the first device to each other busy device."""
    return 0 if first else (d + 1) * itemsize


def backward_bytes(sizes: Sequence[int], itemsize: int) -> int:
    """The output gradients scattered back from the first device: (rows, 1) to each other busy device."""
    return sum(sizes[1:]) * itemsize


def dataparallel_bytes(sizes: Sequence[int], d: int, itemsize: int) -> int:
    """A whole DataParallel step's bytes, for the busy devices' chunk sizes."""
    per_device = sum(
        scatter_bytes(rows, d, itemsize, i == 0)
        + replicate_bytes(d, itemsize, i == 0)
        + gather_bytes(rows, itemsize, i == 0)
        + reduce_bytes(d, itemsize, i == 0)
        for i, rows in enumerate(sizes)
    )
    return per_device + backward_bytes(sizes, itemsize)


def bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg: object = None) -> int:
    """One step's bytes on k devices (its record's `bytes_of_step`): the batch's rows chunked by
    torch.chunk's rule."""
    return dataparallel_bytes(chunk_sizes(rows, k), d, itemsize)


# Slots of one busy device i in a DataParallel step:
# (start, scattered, replicated, apply_start, applied, gather_start); GATHERED is the gathered output's.
Bounds = Callable[[int], tuple[int, int, int, int, int, int]]


def dataparallel_specs(
    labels: Sequence[str], sizes: Sequence[int], d: int, itemsize: int, bounds: Bounds, gathered: int
) -> tuple[PhaseSpec, ...]:
    """A DataParallel step's specs for the busy devices (labels[:len(sizes)]), in the order of the step.

    Args:
        sizes: rows per busy device (chunk_sizes).
        bounds: the slots of busy device i's per-device phases (the emulation shares some of them).
        gathered: the slot of the end of gather, where the loss starts.
    """
    scatter, replicate, apply, gather, reduce = [], [], [], [], []
    for i, rows in enumerate(sizes):
        dev, first = labels[i], i == 0
        start, scattered, replicated, apply_start, applied, gather_start = bounds(i)
        scatter.append(PhaseSpec(SCATTER, dev, scatter_bytes(rows, d, itemsize, first), start, scattered))
        replicate.append(
            PhaseSpec(REPLICATE, dev, replicate_bytes(d, itemsize, first), scattered, replicated)
        )
        apply.append(PhaseSpec(PARALLEL_APPLY, dev, 0, apply_start, applied))
        gather.append(PhaseSpec(GATHER, dev, gather_bytes(rows, itemsize, first), gather_start, gathered))
        # autograd sums the replicas' gradients at the end of backward: its time is inside backward's
        reduce.append(PhaseSpec(REDUCE, dev, reduce_bytes(d, itemsize, first), BACKWARD_END, BACKWARD_END))
    return (
        *scatter,
        *replicate,
        *apply,
        *gather,
        PhaseSpec(LOSS, labels[0], 0, gathered, LOSS_END),
        PhaseSpec(BACKWARD, labels[0], backward_bytes(sizes, itemsize), LOSS_END, BACKWARD_END),
        *reduce,
        PhaseSpec(OPTIMIZER, labels[0], 0, BACKWARD_END, OPTIMIZER_END),
    )
