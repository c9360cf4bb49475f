"""DDP's phases of a step: load, forward, loss, backward, the all-reduce of the gradients (inside
backward, from DDP's communication hook) and the optimizer, over eight time slots, and their bytes."""

from __future__ import annotations

from fitcore.phases import (
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
    PhaseSpec,
)

ALLREDUCE = "allreduce"
DDP_PHASES = (LOAD, FORWARD, LOSS, BACKWARD, ALLREDUCE, OPTIMIZER)
# after the slots every rank marks (fitcore.phases), the all-reduce's two, from DDP's communication hook
ALLREDUCE_START, ALLREDUCE_END = 6, 7
DDP_SLOTS = 8


def load_bytes() -> int:
    """A DDP rank reads its own shard on its own device: nothing moves between devices."""
    return 0


def allreduce_bytes(k: int, d: int, itemsize: int) -> int:
    """What one of k ranks sends in a ring all-reduce of the d + 1 gradients: 2(k-1)/k of them.

    Rounded to whole bytes where k does not divide 2(k-1)(d+1)·itemsize; 0 for a single rank.
    """
    return round(2 * (k - 1) * (d + 1) * itemsize / k)


def ddp_bytes(k: int, d: int, itemsize: int) -> int:
    """A whole DDP step's bytes: every one of the k ranks takes part in the all-reduce."""
    return k * (load_bytes() + allreduce_bytes(k, d, itemsize))


def ddp_specs(label: str, k: int, d: int, itemsize: int) -> tuple[PhaseSpec, ...]:
    """One DDP rank's step specs, over the DDP slots (START ... OPTIMIZER_END, LOADED ... ALLREDUCE_END).

    DDP all-reduces during backward, so allreduce lies inside backward's time, not after it.
    """
    return (
        PhaseSpec(LOAD, label, load_bytes(), START, LOADED),
        PhaseSpec(FORWARD, label, 0, LOADED, FORWARD_END),
        PhaseSpec(LOSS, label, 0, FORWARD_END, LOSS_END),
        PhaseSpec(BACKWARD, label, 0, LOSS_END, BACKWARD_END),
        PhaseSpec(ALLREDUCE, label, allreduce_bytes(k, d, itemsize), ALLREDUCE_START, ALLREDUCE_END),
        PhaseSpec(OPTIMIZER, label, 0, BACKWARD_END, OPTIMIZER_END),
    )
