"""A run's steps as a Chrome trace (the Trace Event Format), for ui.perfetto.dev and chrome://tracing.

{"traceEvents": [...], "displayTimeUnit": "ms"}: one process per run (pid), one thread per device or rank
(tid), named by metadata events ("ph": "M", "process_name" / "thread_name"), and each phase of each step a
complete event ("ph": "X") with ts and dur in microseconds, taken from the run's measured times, and args
holding the step, the rows on that device and the bytes the phase moved.

A step's phases are timed from the step's own start (fitcore.core.phases); the step is placed on the run's
timeline so that it ends at Step.elapsed, the run's clock when the step was emitted. A step without phase
records (one device) is one "step" event, from the previous step's end to its own.

A strategy whose ranks send each other tensors inside a step (the pipeline's activations and their
gradients) gives its sends (`flows`): each is a flow arrow ("ph": "s" on the sender's block, "ph": "f" on the
receiver's), which Perfetto draws from one rank's track to the other's.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from fitcore.core.events import Event, RunStarted, Step
from fitcore.core.outfiles import Pending

MAX_STEPS = 100_000  # the most steps a trace holds (as recording.MAX_STEPS); later ones are left out
PID = 1
SHARED = "host"  # the track of phases that belong to no one device
# a send in a step: the sender's device and when it sends, the receiver's device and when it receives, in
# seconds from the step's start (each inside a block of that device, where the viewer binds the arrow)
Flow = tuple[str, float, str, float]
FlowsOf = Callable[[Any, Step], Sequence[Flow]]  # (the run's config, a step) -> its sends


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


class TraceBuilder:
    """An on_event consumer that keeps what the trace needs; trace() gives the Chrome trace object.

    Args:
        name: the process's name in the viewer ("fitcore run", "replay: recorded on ...").
        flows: the run's strategy's sends in a step (fitcore.protocols.registry.flows), drawn as flow arrows.
    """

    def __init__(self, name: str = "fitcore run", flows: FlowsOf | None = None):
        self.name = name
        self.flows = flows
        self.config: Any = None  # the run's, from its RunStarted
        self.arrows = 0  # flow arrows so far: the next one's id
        self.tracks: dict[str, int] = {}  # device label -> tid, in order of first appearance
        self.events: list[dict[str, Any]] = []
        self.steps = 0
        self._previous_end = 0.0

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            for label in event.devices:
                self._tid(label)
            cfg = self.config = event.config
            self.name = f"{self.name}: {cfg.strategy} on {cfg.devices}"
        elif isinstance(event, Step) and self.steps < MAX_STEPS:
            self.steps += 1
            self._step(event)

    def _tid(self, label: str) -> int:
        return self.tracks.setdefault(label or SHARED, len(self.tracks) + 1)

    def _step(self, step: Step) -> None:
        rows = {r.device: r.rows for r in step.replicas}
        base = {"step": step.step, "epoch": step.epoch, "batch": step.batch}
        if step.phases is None:
            device = step.replicas[0].device if step.replicas else SHARED
            start = min(self._previous_end, step.elapsed)
            self.events.append(
                self._complete(
                    "step",
                    device,
                    start,
                    step.elapsed - start,
                    {**base, "rows": step.input_shape[0], "bytes": 0},
                )
            )
            self._previous_end = step.elapsed
            return
        phases = step.phases.phases()
        span = max((p.start + p.duration for p in phases), default=0.0)
        origin = step.elapsed - span  # the step's start on the run's clock
        for p in phases:
            args = {**base, "rows": rows.get(p.device, step.input_shape[0]), "bytes": p.bytes}
            self.events.append(self._complete(p.name, p.device, origin + p.start, p.duration, args))
        if self.flows is not None and self.config is not None:
            for sender, sent, receiver, received in self.flows(self.config, step):
                self._flow(sender, origin + sent, receiver, origin + received)
        self._previous_end = step.elapsed

    def _flow(self, sender: str, sent: float, receiver: str, received: float) -> None:
        """One arrow, from the sender's block at `sent` to the receiver's at `received` (run's seconds)."""
        self.arrows += 1
        n = self.arrows
        for ph, device, at in (("s", sender, sent), ("f", receiver, received)):
            event = {"name": "send", "cat": "send", "ph": ph, "id": n, "ts": _us(max(0.0, at)), "pid": PID,
                     "tid": self._tid(device)}  # fmt: skip
            if ph == "f":
                event["bp"] = "e"  # bound to the receiver's block that encloses it, not the next one
            self.events.append(event)

    def _complete(self, name: str, device: str, start: float, duration: float, args: dict) -> dict:
        return {
            "name": name,
            "cat": "phase",
            "ph": "X",
            "ts": _us(max(0.0, start)),
            "dur": _us(max(0.0, duration)),
            "pid": PID,
            "tid": self._tid(device),
            "args": args,
        }

    def trace(self) -> dict[str, Any]:
        meta = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0, "args": {"name": self.name}}
        ]
        for label, tid in self.tracks.items():
            meta.append(
                {"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": tid, "args": {"name": label}}
            )
            meta.append(
                {
                    "name": "thread_sort_index",
                    "ph": "M",
                    "ts": 0,
                    "pid": PID,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return {"traceEvents": meta + self.events, "displayTimeUnit": "ms"}

    def write(self, path: str | Pending) -> None:
        """Write the trace whole to `path` (or a Pending made before the run): never half a file there."""
        pending = path if isinstance(path, Pending) else Pending(path, "trace")
        try:
            json.dump(self.trace(), pending.file, separators=(",", ":"))
        except BaseException:
            pending.discard()
            raise
        pending.commit()


def trace_of(events, name: str = "fitcore run", flows: FlowsOf | None = None) -> dict[str, Any]:
    """The Chrome trace of a sequence of events (a recording's, say)."""
    builder = TraceBuilder(name, flows)
    for event in events:
        builder(event)
    return builder.trace()


def consumers(*fns: Callable[[Event], None] | None) -> Callable[[Event], None]:
    """One on_event that calls each of fns (None ones left out) in order."""
    chosen = [f for f in fns if f is not None]

    def on_event(event: Event) -> None:
        for f in chosen:
            f(event)

    return on_event
