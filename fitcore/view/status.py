"""What a run is doing, in words: the status line, its colour, how the controls differ from the run, and the
console panel's latest lines."""

from __future__ import annotations

from typing import Any, Mapping

from fitcore import strategies
from fitcore.config import FitConfig
from fitcore.events import Status
from fitcore.runner import Snapshot
from fitcore.text import plural, rate
from fitcore.view.controls import FIELD_LABELS, used_fields


def status_line(snap: Snapshot | None, cfg: FitConfig | None = None) -> str:
    """The status line: status, epoch, `step <n> / <total>`, speed, and the message where it helps.

    Always contains `step <n> / <total>` once there is a run or a valid config (tests and benchmarks parse
    it). Before any run (snap None) it is the Ready line, with cfg's steps when the controls are valid.
    """
    if snap is None:
        total = f" · step 0 / {cfg.total_steps}" if cfg is not None else ""
        return f"Ready{total} · press Start training"
    status = snap.status
    parts = [status.capitalize(), snap.source_label]  # a replay says first what it replays, "recorded on ..."
    if status == Status.QUEUED and snap.queue_position is not None:
        parts.append(f"position {snap.queue_position} in the queue")
    if snap.epoch:
        parts.append(f"epoch {snap.epoch} / {snap.config.epochs}")
    parts.append(f"step {snap.step} / {snap.total_steps}")
    if status in (Status.RUNNING, Status.FINISHED) and snap.steps_per_second > 0:
        parts.append(rate(snap.steps_per_second))
    if status not in (Status.RUNNING, Status.PAUSED):
        parts.append(snap.message)
    if strategies.of(snap).processes and snap.active and snap.step == 0:
        k = snap.config.workers
        parts.append(f"starting {plural(k, 'process', 'processes')}: each imports torch and joins the group")
    return " · ".join(p for p in parts if p)


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
    workers = next((s for s in either if strategies.strategy(s).processes), running.strategy)
    for name in used_fields(workers):
        if name in SYNTHETIC_FIELDS and (running.data or values.get("data")):
            continue  # a file decides them: its rows and its least-squares answer
        ours, theirs = values.get(name), getattr(running, name)
        if name == "weights" and ours is not None:
            ours = tuple(float(w) for w in ours)
        if ours != theirs:
            out.append(f"{FIELD_LABELS[name]}: {_show(theirs)} in the run, {_show(ours)} in the controls")
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
    head, tail = strategies.of(snap).view_module.console_frame(snap)
    lines = ([snap.header] if snap.header else []) + head
    steps = list(snap.recent)
    per_step = len(steps[-1].replicas) + 1 if steps else 1
    keep = max(1, (max_lines - len(lines) - len(tail)) // per_step)
    for step in steps[-keep:]:
        lines.extend(strategies.of(snap).step_lines(step))
    return "\n".join(lines + tail)
