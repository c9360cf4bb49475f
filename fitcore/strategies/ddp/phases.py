"""DDP's phases of a step: load, forward, loss, backward, the all-reduce of the gradients (inside
backward, from DDP's communication hook) and the optimizer, over its time slots, and their bytes.

On a 2-D mesh (`dp` x `tp`) DDP runs the `dp` dimension over a model whose features RowwiseParallel cuts over
`tp`: forward then ends in a second all-reduce, of the partial outputs inside the rank's `tp` group
(`tp_allreduce`, activations), apart from DDP's of the gradients inside its `dp` group (`allreduce`)."""

from __future__ import annotations

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

ALLREDUCE = "allreduce"  # the gradients', inside a `dp` group
DDP_PHASES = (LOAD, FORWARD, LOSS, BACKWARD, ALLREDUCE, OPTIMIZER)
MESH_PHASES = (LOAD, FORWARD, TP_ALLREDUCE, LOSS, BACKWARD, ALLREDUCE, OPTIMIZER)  # on a dp x tp mesh
# after the slots every rank marks (fitcore.core.phases), the all-reduce's two, from DDP's communication hook;
# then a 2-D mesh's: the partial output done, the all-reduce of the partial outputs arrived
ALLREDUCE_START, ALLREDUCE_END = 6, 7
TP_PARTIAL_END, TP_ALLREDUCE_END = 8, 9
DDP_SLOTS = 10


def load_bytes() -> int:
    """A DDP rank reads its own shard on its own device: nothing moves between devices."""
    return 0


def allreduce_bytes(k: int, d: int, itemsize: int) -> int:
    """What one of k ranks sends in a ring all-reduce of the d + 1 gradients: 2(k-1)/k of them.

    Rounded to whole bytes where k does not divide 2(k-1)(d+1)·itemsize; 0 for a single rank.
    """
    return ring_bytes(k, (d + 1) * itemsize)


def ddp_bytes(k: int, d: int, itemsize: int) -> int:
    """A whole DDP step's bytes: every one of the k ranks takes part in the all-reduce."""
    return k * (load_bytes() + allreduce_bytes(k, d, itemsize))


def bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg: object = None) -> int:
    """One step's bytes on k ranks (its record's `bytes_of_step`): the same whatever the rows, as every rank
    all-reduces d + 1 numbers."""
    return ddp_bytes(k, d, itemsize)


def ddp_specs(label: str, k: int, d: int, itemsize: int, tp_sent: int | None = None) -> tuple[PhaseSpec, ...]:
    """One DDP rank's step specs, over the DDP slots (START ... OPTIMIZER_END, LOADED ... ALLREDUCE_END).

    DDP all-reduces during backward, so allreduce lies inside backward's time, not after it. k is the
    ranks of the gradients' all-reduce (its `dp` group), d the features of W this rank holds.

    Args:
        tp_sent: on a 2-D mesh, the bytes this rank sends in its `tp` group's all-reduce of the partial
            outputs, which ends forward; None on a 1-D one.
    """
    if tp_sent is not None:
        return (
            PhaseSpec(LOAD, label, load_bytes(), START, LOADED),
            PhaseSpec(FORWARD, label, 0, LOADED, TP_PARTIAL_END),
            PhaseSpec(TP_ALLREDUCE, label, tp_sent, TP_PARTIAL_END, TP_ALLREDUCE_END),
            PhaseSpec(LOSS, label, 0, TP_ALLREDUCE_END, LOSS_END),
            PhaseSpec(BACKWARD, label, 0, LOSS_END, BACKWARD_END),
            PhaseSpec(ALLREDUCE, label, allreduce_bytes(k, d, itemsize), ALLREDUCE_START, ALLREDUCE_END),
            PhaseSpec(OPTIMIZER, label, 0, BACKWARD_END, OPTIMIZER_END),
        )
    return (
        PhaseSpec(LOAD, label, load_bytes(), START, LOADED),
        PhaseSpec(FORWARD, label, 0, LOADED, FORWARD_END),
        PhaseSpec(LOSS, label, 0, FORWARD_END, LOSS_END),
        PhaseSpec(BACKWARD, label, 0, LOSS_END, BACKWARD_END),
        PhaseSpec(ALLREDUCE, label, allreduce_bytes(k, d, itemsize), ALLREDUCE_START, ALLREDUCE_END),
        PhaseSpec(OPTIMIZER, label, 0, BACKWARD_END, OPTIMIZER_END),
    )
