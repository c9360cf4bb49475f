"""What a run is doing, in words: the status line, its colour, how the controls differ from the run, and the
console panel's latest lines."""

from __future__ import annotations

import math
from typing import Any, Mapping

from fitcore.core.config import FitConfig
from fitcore.core.events import Status
from fitcore.core.i18n import count, t
from fitcore.protocols import registry
from fitcore.runs.runner import Snapshot
from fitcore.view.common import data_words
from fitcore.view.controls import field_label, rate_text, used_fields


def diverged_at(snap: Snapshot | None) -> int | None:
    """The step at which the run diverged, or None: the one definition every mark on the page draws from.

    "Diverged" means the first step whose loss is not a finite number (float32 overflowed to inf, or NaN).
    The loop stops there, before that step's update, so the last step drawn (the picture's, the charts'
    last point) is the one before it; the run's message names this same step ("the loss became inf at
    step N"), for DataParallel, DDP and a replay alike.
    """
    if snap is None or snap.status != Status.DIVERGED:
        return None
    return snap.step + 1


def status_line(snap: Snapshot | None, cfg: FitConfig | None = None) -> str:
    """The status line: status, epoch, `step <n> / <total>`, speed, and the message where it helps.

    Always contains `step <n> / <total>` ("步数 <n> / <total>" in Chinese) once there is a run or a valid
    config (tests and benchmarks parse it). Before any run (snap None) it is the Ready line, with cfg's
    steps when the controls are valid.
    """
    if snap is None:
        if cfg is None:
            return t("view.status.ready_invalid")
        return t("view.status.ready", total=cfg.total_steps)
    status = snap.status
    # a replay says first what it replays, a CSV run what it fits ("houses.csv: price from area, rooms, age")
    parts = [t(f"view.status.{status}"), snap.source_label, data_words(snap.config)]
    if status == Status.QUEUED and snap.queue_position is not None:
        parts.append(t("view.status.position", n=snap.queue_position))
    if snap.epoch:
        parts.append(t("view.status.epoch", n=snap.epoch, total=snap.config.epochs))
    parts.append(t("view.status.step", n=snap.step, total=snap.total_steps))
    if status in (Status.RUNNING, Status.FINISHED) and snap.steps_per_second > 0:
        parts.append(rate_text(snap.steps_per_second))
    if status not in (Status.RUNNING, Status.PAUSED):
        parts.append(str(snap.message))  # a Text: in the page's language, whichever thread made it
    if registry.of(snap).processes and snap.active and snap.step == 0:
        parts.append(t("view.status.starting", processes=count("view.count.process", snap.config.workers)))
    if snap.limit is not None and snap.limit[2] <= LIMIT_WARNING_S:  # a minute before a limit stops the run
        kind, total, left = snap.limit
        parts.append(t(f"view.status.limit.{kind}", left=max(0, math.ceil(left)), total=f"{total:g}"))
    return " · ".join(p for p in parts if p)


LIMIT_WARNING_S = 60.0  # the status line says this long before a time limit stops the run


SYNTHETIC_FIELDS = ("weights", "bias", "noise", "data_size")  # the synthetic data's own settings

_STATUS_KINDS = {
    Status.FINISHED: "success",
    Status.STOPPED: "warning",
    Status.DIVERGED: "warning",
    Status.FAILED: "error",
}


def status_kind(snap: Snapshot) -> str:
    """How the page colours the status: info, success, warning or error."""
    return _STATUS_KINDS.get(snap.status, "info")


def config_differences(values: Mapping[str, Any], running: FitConfig) -> list[str]:
    """The controls that differ from a run's frozen config, as 'label: run value -> control value'."""
    out = []
    either = (values.get("strategy"), running.strategy)
    workers = next((s for s in either if registry.strategy(s).processes), running.strategy)
    for name in used_fields(workers):
        if name in SYNTHETIC_FIELDS and (running.data or values.get("data")):
            continue  # a file decides them: its rows and its least-squares answer
        ours, theirs = values.get(name), getattr(running, name)
        if name == "weights" and ours is not None:
            ours = tuple(float(w) for w in ours)
        if ours != theirs:
            out.append(t("view.differs", label=field_label(name), run=_show(theirs), controls=_show(ours)))
    return out


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def console_text(snap: Snapshot, max_lines: int = 16) -> str:
    """The printed lines for the latest steps that fit in max_lines, between the run's header and tail.

    The strategy's view module adds what the command line prints around the steps (`console_frame`): for
    DDP, the process group, and once the run has ended every rank's final parameters.
    """
    head, tail = registry.of(snap).view_module.console_frame(snap)
    lines = ([snap.header] if snap.header else []) + head
    steps = list(snap.recent)
    per_step = len(steps[-1].replicas) + 1 if steps else 1
    keep = max(1, (max_lines - len(lines) - len(tail)) // per_step)
    for step in steps[-keep:]:
        lines.extend(registry.of(snap).step_lines(step))
    return "\n".join(lines + tail)
