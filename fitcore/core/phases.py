"""What happens in one training step: its phases, their times per device and the bytes each one moves.

One vocabulary for every strategy (docs: the live view's payload): the phases a rank's step has whatever
the strategy (load, forward, loss, backward, optimizer) and the time slots they start and stop at; each
strategy adds its own (DDP's allreduce, in fitcore.strategies.ddp.phases; FSDP's and TP's in their layouts).
DataParallel's phases (scatter, replicate, parallel_apply, gather, loss, backward, reduce, optimizer), their
bytes and specs are its package's (fitcore.strategies.dataparallel.phases), beside its wrappers.

Recording is split in two so that a step costs little: the static part of a step's phases (names, devices,
bytes, and which time slots they start and stop at) is a tuple of PhaseSpecs built once per split of the
batch, and each step only writes times into a flat list of slots. `StepPhases.phases()` joins the two into
Phase tuples when a consumer wants them.

Who marks which slot: DataParallel's wrapper (or a rank's loop) marks START and the other slots of its
forward; the training loop marks LOSS_END, BACKWARD_END and OPTIMIZER_END after its own calls, then takes the
step with PhaseRecorder.take().
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Sequence

from fitcore.protocols import registry

# The words of more than one strategy's step: DataParallel scatters and gathers, and so does FSDP (its shards,
# all-gathered and reduce-scattered); every strategy has a loss, a backward and an optimizer step, and
# DataParallel's reduce and the ranks' all-reduce sum gradients
SCATTER, GATHER = "scatter", "gather"
LOSS, BACKWARD, REDUCE, OPTIMIZER = "loss", "backward", "reduce", "optimizer"
# A rank's own phases, whatever its strategy (loss, backward and optimizer are the same words)
LOAD, FORWARD = "load", "forward"
# On a 2-D mesh (dp x tp), the all-reduce of the partial outputs inside a `tp` group, which ends forward:
# DDP's and FSDP's word for it, apart from their own collectives of the gradients inside a `dp` group
TP_ALLREDUCE = "tp_allreduce"


def ring_bytes(k: int, nbytes: int) -> int:
    """What one of k ranks sends in a ring all-reduce of a buffer of `nbytes`: 2(k-1)/k of it, rounded to
    whole bytes where k does not divide 2(k-1)·nbytes; 0 for a single rank. Every ring of fitcore's ranks
    (DDP's gradients, TP's and a 2-D mesh's activations) is counted by it."""
    return round(2 * (k - 1) * nbytes / k)

# Time slots every layout has: the step's start, and the three the training loop marks after its own calls
START, LOSS_END, BACKWARD_END, OPTIMIZER_END = 0, 1, 2, 3
# A rank's loop marks these two after reading its rows and after its forward (a strategy numbers its own
# slots from 6 on: fitcore.strategies.ddp.phases' all-reduce, FSDP's collectives)
LOADED, FORWARD_END = 4, 5


class Phase(NamedTuple):
    """One phase of one step on one device."""

    name: str
    device: str  # a device label; "" when the phase is not device-specific
    start: float  # seconds from the step's start
    duration: float  # seconds
    bytes: int  # moved between devices by this phase on this device


class PhaseSpec(NamedTuple):
    """The part of a Phase that repeats while the batch's split does: all but the two times."""

    name: str
    device: str
    bytes: int
    start: int  # the time slot the phase starts at
    stop: int  # the time slot it ends at


class StepPhases(NamedTuple):
    """One step's phases as recorded: the shared specs and the step's times (seconds, any origin)."""

    specs: tuple[PhaseSpec, ...]
    times: tuple[float, ...]  # slot -> time; times[START] is the step's start

    def phases(self) -> tuple[Phase, ...]:
        """The Phases, with start times from the step's start."""
        return assemble(self.specs, self.times)

    @property
    def bytes(self) -> int:
        """Everything this step moved between devices (or would move, for the emulation)."""
        return sum(spec.bytes for spec in self.specs)


def assemble(specs: Sequence[PhaseSpec], times: Sequence[float]) -> tuple[Phase, ...]:
    """Join static specs and one step's slot times into Phases; times count from times[START]."""
    t0 = times[START]
    return tuple(
        Phase(s.name, s.device, times[s.start] - t0, times[s.stop] - times[s.start], s.bytes) for s in specs
    )


# ---------------------------------------------------------------------------------------------------------
# Bytes moved between devices. d features, so a row of X is d numbers, an output 1, the parameters d + 1.


def scatter_bytes(rows: int, d: int, itemsize: int, first: bool) -> int:
    """A busy device's chunk of X, (rows, d), copied from the first device, which keeps its own."""
    return 0 if first else rows * d * itemsize


def gather_bytes(rows: int, itemsize: int, first: bool) -> int:
    """A busy device's output, (rows, 1), copied to the first device."""
    return 0 if first else rows * itemsize


def reduce_bytes(d: int, itemsize: int, first: bool) -> int:
    """A replica's gradients of W and b, d + 1 numbers, summed onto the first device."""
    return 0 if first else (d + 1) * itemsize


def step_bytes(rows: int, k: int, d: int, itemsize: int, cfg=None) -> dict[str, int]:
    """One step's bytes under every strategy, side by side, by strategy name: batch `rows` on k devices, d
    features. Each strategy's package gives its own formula (`bytes_of_step`); cfg, where given, holds the
    options a strategy reads (FSDP's resharding)."""
    return {s.name: s.bytes_of_step(rows, k, d, itemsize, cfg) for s in registry.STRATEGIES.values()}


# ---------------------------------------------------------------------------------------------------------
# Layouts: the specs of a step, and which slots they read.

def used_slots(specs: Sequence[PhaseSpec]) -> tuple[int, ...]:
    """The slots the specs read, START first."""
    return tuple(sorted({START} | {s.start for s in specs} | {s.stop for s in specs}))


# ---------------------------------------------------------------------------------------------------------
# Clocks: the same two calls, mark(slot) during the step and resolve(slots) once after it.


class HostClock:
    """time.perf_counter marks: on the CPU the work is done when the call that does it returns.

    Marks from several threads are safe: each writes its own slot of the list.
    """

    def __init__(self, slots: int):
        self.times = [0.0] * slots

    def mark(self, slot: int, at: float | None = None) -> None:
        """The slot marked now, or `at` a perf_counter time already read (a pipeline's shared zero)."""
        self.times[slot] = time.perf_counter() if at is None else at

    def resolve(self, slots: Sequence[int]) -> tuple[float, ...]:
        return tuple(self.times)


class CudaClock:
    """CUDA events, one per slot, recorded on the current stream of the slot's device; read after the step.

    A GPU runs the work the host queued later than the host queues it, so the host's clock would time the
    queueing. Events time the work itself. Two events on different devices cannot be compared, so each
    device's times count from its own first slot (its step start), all of which are taken as the step's start.

    Args:
        devices: the CUDA device index of each slot; None for a slot nothing marks.
        event: makes one timing event (torch.cuda.Event(enable_timing=True)); an input so tests can fake it.
        stream: the current stream of a device index (torch.cuda.current_stream).
    """

    def __init__(
        self, devices: Sequence[int | None], event: Callable | None = None, stream: Callable | None = None
    ):
        import torch  # only where the GPU path is taken

        self._devices = tuple(devices)
        self._event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self._stream = stream or torch.cuda.current_stream
        self._events: list = [None] * len(self._devices)  # made at first use: no CUDA is needed before
        anchors: dict[int, int] = {}
        for slot, device in enumerate(self._devices):
            if device is not None:
                anchors.setdefault(device, slot)
        self._anchor = tuple(anchors.get(device, START) for device in self._devices)

    def mark(self, slot: int, at: float | None = None) -> None:
        if at is not None:  # an event times the device's queue from when it is recorded: it has no past
            raise ValueError("a CUDA clock marks a slot now, not at a host time")
        event = self._events[slot]
        if event is None:
            event = self._events[slot] = self._event()
        event.record(self._stream(self._devices[slot]))

    def resolve(self, slots: Sequence[int]) -> tuple[float, ...]:
        """Wait for the step's events, once, and give each used slot its seconds from its device's start."""
        events = self._events
        for slot in slots:
            events[slot].synchronize()
        times = [0.0] * len(events)
        for slot in slots:
            times[slot] = events[self._anchor[slot]].elapsed_time(events[slot]) / 1000  # ms -> s
        return tuple(times)


class PhaseRecorder:
    """The phases of the step under way: the specs of the batch's split and the clock its slots are marked on.

    The wrapper picks the specs in its forward (`use`); the wrapper and the training loop call `mark`;
    the loop calls `take` once the step is done. Specs are built once per split and reused.
    """

    def __init__(self, clock: HostClock | CudaClock):
        self._clock = clock
        self.mark = clock.mark  # bound once: the loop calls it three times a step
        self._built: dict = {}  # split key -> (specs, used slots)
        self._current: tuple | None = None

    def use(self, key, build: Callable[..., tuple[PhaseSpec, ...]], *args) -> None:
        """Make the specs for `key` (built by `build(*args)` the first time it is seen) this step's."""
        current = self._built.get(key)
        if current is None:
            specs = build(*args)
            current = self._built[key] = (specs, used_slots(specs))
        self._current = current

    def take(self) -> StepPhases | None:
        """This step's phases; None if no forward picked specs since the last take."""
        current, self._current = self._current, None
        if current is None:
            return None
        specs, slots = current
        return StepPhases(specs, self._clock.resolve(slots))
