"""Record a run's events as versioned JSON lines, and replay them through the same events and Control.

A recording is data only (JSON, never pickle): a header line, then one line per event in the order the run
emitted them:

    {"format": "fitcore-recording", "version": 3, "recorded": "2025-01-31T09:12:00Z", "machine": {...}}
    {"event": "started", "config": {...}, "devices": [...], ...}       fitcore.core.events.RunStarted
    {"event": "detail", "key": "ddp", "value": {...}, "text": "..."}   Detail
    {"event": "step", "step": 1, ..., "replicas": [...], "phases": {"specs": [...], "times": [...]}}
    {"event": "ended", "status": "finished", "message": {"key": ..., "fields": {...}}, ...}    RunEnded, last

The run's message is its catalog key and fields (fitcore.core.errors.Text), so that a replay says it in the
language of the page or the command line that replays it. Version 1 wrote the message as English text: such
a recording still reads, its message shown as written.

The machine is described without its host name: Python, torch, CUDA and the device names. Replaying calls
the recorded events back through on_event, one Step per Control.wait(), so pause, Step, stop and the pace act
on a replay exactly as on a live run, and a Run (fitcore.runs.runner) plays one like any other trainer.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import stat
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from fitcore.core.config import FitConfig, check
from fitcore.core.devices import DevicePlan
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.events import Detail, Event, RunEnded, RunStarted, Status, Step
from fitcore.core.i18n import t
from fitcore.core.outfiles import Pending
from fitcore.core.schema import SchemaError, dumps, shown
from fitcore.core.uploads import shown_path
from fitcore.runs.recording_shape import GROUP, HEADER, READERS, VERSION  # noqa: F401 (GROUP: its callers import it here)

if TYPE_CHECKING:  # torch: a replay imports it only when it plays
    from fitcore.core.train import Trainer

FORMAT = "fitcore-recording"
# the versions read: 1 held the run's message as English text, 2 as a key and its fields; before 3 the
# process group's Detail was keyed by DDP's name whatever the strategy, since 3 GROUP
READABLE = (1, 2, 3)
MAX_BYTES = 256 * 2**20  # the largest recording a replay reads (256 MiB)
MAX_STEPS = 100_000  # the most steps a run may record: about 150 MB at 8 devices


class RecordingError(ConfigError):
    """A recording that cannot be replayed: the message names the file, the line and the problem."""

    def __init__(self, path: str, problem: Text, line: int | None = None, framed: bool = True):
        key = "recording.frame.line" if line is not None else "recording.frame"
        versions = Listed(READABLE)  # "1 or 2 or 3"
        allowed = Text(key, format=FORMAT, version=versions, line=line, problem=problem)
        allowed = allowed if framed else problem
        super().__init__("recording", shown_path(path), allowed)  # as given; an upload by its own name
        self.line = line


# ---------------------------------------------------------------------------------------------------------
# The machine a run was recorded on.


def machine() -> dict[str, Any]:
    """What ran the run: Python, torch, the CUDA runtime and every device's name; no host name."""
    import torch

    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if (torch.cuda.is_available())
        else []
    )
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": gpus,
        "cpu": platform.machine() or "unknown",
        "os": platform.system(),
    }


SHOWN_GPUS = 3  # the most GPU names a label spells out; the rest are counted ("and 29,997 more")


def machine_label(header: dict[str, Any], detail: bool = True) -> str:
    """What a replay is labelled with: "recorded on 2 x NVIDIA H100 (CUDA 12.4, torch 2.13.0) on ...", or with
    detail=False the page's short form, "recorded on 2 x NVIDIA H100 on ...", which fits its status line.
    `header` is read (its machine checked by HEADER's shape) or this machine's own."""
    m = header.get("machine") or {}
    date = str(header.get("recorded", ""))[:10] or t("recording.no_date")
    torch = m.get("torch", "?")
    if m.get("gpus"):
        counted = Counter(m["gpus"])  # one pass: 30,000 names cost what 30,000 do, not their square
        names = sorted(counted)
        where = ", ".join(f"{counted[n]} x {n}" for n in names[:SHOWN_GPUS])
        if len(names) > SHOWN_GPUS:
            where = t("recording.more_gpus", gpus=where, more=len(names) - SHOWN_GPUS)
        if not detail:
            return t("recording.on.gpus_short", gpus=where, date=date)
        return t("recording.on.gpus", gpus=where, cuda=m.get("cuda"), torch=torch, date=date)
    if m:
        if not detail:
            return t("recording.on.cpu_short", date=date)
        return t("recording.on.cpu", cpu=m.get("cpu", "?"), os=m.get("os", "?"), torch=torch, date=date)
    return t("recording.on.unknown", date=date)


# ---------------------------------------------------------------------------------------------------------
# Events as JSON and back.


def _config_dict(cfg: FitConfig) -> dict[str, Any]:
    """The config as recorded: a CSV file by its name only, so that a shared recording shows no paths."""
    d = cfg.to_dict()
    d["data"] = os.path.basename(d["data"])
    return d


def event_dict(event: Event) -> dict[str, Any]:
    """One event as plain JSON data."""
    if isinstance(event, Step):
        phases = event.phases
        return {
            "event": "step",
            "step": event.step,
            "epoch": event.epoch,
            "batch": event.batch,
            "loss": event.loss,
            "input_shape": list(event.input_shape),
            "output_shape": list(event.output_shape),
            "replicas": [
                [r.device, r.start, r.stop, list(r.input_shape), list(r.output_shape), r.loss, list(r.ids),
                 None if r.columns is None else list(r.columns)]
                for r in event.replicas
            ],
            "weights": list(event.weights),
            "bias": event.bias,
            "elapsed": event.elapsed,
            "phases": None
            if phases is None
            else {
                "specs": [list(s) for s in phases.specs],
                "times": list(phases.times),
            },
        }
    if isinstance(event, RunStarted):
        return {
            "event": "started",
            "config": _config_dict(event.config),
            "devices": list(event.devices),
            "emulated": event.emulated,
            "data_parallel": event.data_parallel,
            "header": event.header,
            "total_steps": event.total_steps,
            "batches_per_epoch": event.batches_per_epoch,
            "lstsq_weights": list(event.lstsq_weights),
            "lstsq_bias": event.lstsq_bias,
        }
    if isinstance(event, Detail):
        return {"event": "detail", "key": event.key, "value": event.value, "text": event.text}
    if isinstance(event, RunEnded):
        return {
            "event": "ended",
            "status": str(event.status),
            "message": event.message.data(),
            "steps": event.steps,
            "weights": list(event.weights),
            "bias": event.bias,
            "final_loss": event.final_loss,
            "elapsed": event.elapsed,
        }
    raise TypeError(f"not a fitcore event: {type(event).__name__}")




# ---------------------------------------------------------------------------------------------------------
# Writing.


class Recorder:
    """An on_event consumer that writes every event to `path` as it comes, after the header line.

    Args:
        path: the file to write (replaced if it exists).
        clock: wall-clock time for the header's date; an input so tests can fix it.
    """

    def __init__(self, path: str, clock: Callable[[], float] = time.time, extra: dict | None = None):
        self.path = str(path)
        self.complete = False  # True once the run's end is written: the file is a whole recording
        # written beside `path` and renamed over it at the run's end: a run that dies leaves no half file
        self._pending: Pending | None = Pending(self.path, "record")
        when = _dt.datetime.fromtimestamp(clock(), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        header = {
            "format": FORMAT,
            "version": VERSION,
            "recorded": when,
            "machine": machine(),
            **(extra or {}),
        }
        self._write(header)

    def _write(self, data: dict) -> None:
        # strict JSON, as every reader expects: a value that is no longer finite is written as null
        self._pending.file.write(dumps(data, separators=(",", ":")) + "\n")

    def __call__(self, event: Event) -> None:
        if self._pending is None:
            return
        self._write(event_dict(event))
        if isinstance(event, RunEnded):
            self._pending.commit()
            self._pending = None
            self.complete = True

    def close(self) -> None:
        """Stop writing; a recording without its run's end is not kept (the file at `path` stays as it
        was)."""
        if self._pending is not None:
            self._pending.discard()
            self._pending = None


def check_recordable(cfg: FitConfig, path: str) -> None:
    """Refuse, before the run, a run too long to record (MAX_STEPS)."""
    if cfg.total_steps > MAX_STEPS:
        raise ConfigError(
            "record", shown_path(path), Text("recording.too_long", most=MAX_STEPS, steps=cfg.total_steps)
        )


# ---------------------------------------------------------------------------------------------------------
# Reading.


class Recording(NamedTuple):
    """A recording read back: its header, and its events in order (the last is the RunEnded)."""

    header: dict[str, Any]
    events: tuple[Event, ...]

    @property
    def started(self) -> RunStarted | None:
        return next((e for e in self.events if isinstance(e, RunStarted)), None)

    @property
    def ended(self) -> RunEnded:
        return self.events[-1]

    @property
    def config(self) -> FitConfig:
        started = self.started
        return started.config if started else FitConfig()

    @property
    def label(self) -> str:
        return machine_label(self.header)

    @property
    def short_label(self) -> str:
        """The label without the versions: the page's status line and run label."""
        return machine_label(self.header, detail=False)

    @property
    def plan(self) -> DevicePlan:
        """Its devices as the machine that recorded it had them: its config checked as recorded there (its
        GPUs taken as that machine's), the plan a replay's panels draw."""
        return check(self.config, recorded=True).plan


def _json(path: str, number: int, line: str) -> Any:
    """One line's JSON; RecordingError for a line that is not JSON, or nested too deep to read (a line of
    100,000 "[" would exhaust the parser's recursion: a recording nests a few levels)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        problem = Text("recording.not_json", msg=exc.msg, column=exc.colno)
    except ValueError:  # an integer of more than 4,300 digits (Python's int conversion limit)
        problem = Text("recording.huge_number")
    except RecursionError:
        problem = Text("recording.nested")
    raise RecordingError(path, problem, number)



def _header(path: str, line: str) -> dict[str, Any]:
    try:
        header = _json(path, 1, line)
    except RecordingError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordingError(path, Text("recording.no_header", expected=f'{{"format": "{FORMAT}", ...}}'), 1)
    version = header.get("version")
    if type(version) is not int or version not in READABLE:  # true and 1.0 equal 1 but are no version
        raise RecordingError(path, Text("recording.version", version=shown(header.get("version"))), 1)
    try:
        return HEADER(header, "header")
    except SchemaError as exc:
        raise RecordingError(path, Text("recording.bad_header", what=exc), 1) from None


def _event(path: str, number: int, line: str, version: int = VERSION) -> Event:
    data = _json(path, number, line)
    kind = data.get("event") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in READERS:  # a list or a dict cannot even be looked up
        raise RecordingError(
            path, Text("recording.unknown_event", kind=shown(kind), known=", ".join(READERS)), number
        )
    try:
        if kind in ("ended", "detail"):
            return READERS[kind](data, version)
        return READERS[kind](data)
    except (KeyError, TypeError, ValueError, ConfigError) as exc:
        what = Text("recording.missing", key=str(exc)) if isinstance(exc, KeyError) else exc
        raise RecordingError(path, Text("recording.bad_event", kind=kind, what=what), number) from None


def read(path: str) -> Recording:
    """Read and check a recording; raise RecordingError naming the line and the problem. Never writes."""
    path = str(path)
    try:
        info = os.stat(path)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):  # /dev/zero, a pipe: no end
            raise RecordingError(path, Text("recording.not_regular"))
        size = info.st_size
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RecordingError(path, Text("recording.readable", why=exc.strerror or exc)) from None
    if max(size, len(raw)) > MAX_BYTES:
        raise RecordingError(path, Text("recording.too_big", most=MAX_BYTES, size=size))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = Text("recording.not_utf8", format=FORMAT, at=exc.start)
        raise RecordingError(path, problem, framed=False) from None  # one sentence: no line to name
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise RecordingError(path, Text("recording.empty"), 1)
    header = _header(path, lines[0])
    events: list[Event] = []
    total = steps = 0  # the run's steps, as its start says (and its config agrees); the steps read
    for number, line in enumerate(lines[1:], 2):
        if isinstance(events[-1] if events else None, RunEnded):
            raise RecordingError(path, Text("recording.after_end"), number)
        event = _event(path, number, line, header["version"])
        problem = _disagrees(event, bool(events), steps, total)
        if problem is not None:
            raise RecordingError(path, problem, number)
        total = event.total_steps if isinstance(event, RunStarted) else total
        steps += isinstance(event, Step)
        events.append(event)
    if not events or not isinstance(events[-1], RunEnded):
        raise RecordingError(path, Text("recording.truncated"), len(lines) + 1)
    return Recording(header, tuple(events))


def _disagrees(event: Event, started: bool, steps: int, total: int) -> Text | None:
    """Why `event` cannot come next in one run's recording (after a start when `started`, after `steps`
    steps of the start's `total`), or None: the start comes first and once,
    its step count is its config's (and at most MAX_STEPS), the steps count 1, 2, ... up to it, and the end
    counts the steps the file holds (all of them for a finished run)."""
    if not started or isinstance(event, RunStarted):
        if not isinstance(event, RunStarted) or started:
            return Text("recording.start_first", kind=event_dict(event)["event"])
        expected = event.config.total_steps
        if event.total_steps != expected or event.batches_per_epoch * event.config.epochs != expected:
            return Text(
                "recording.total_steps", found=event.total_steps, batches=event.batches_per_epoch,
                epochs=event.config.epochs, expected=expected,
            )  # fmt: skip
        if expected > MAX_STEPS:
            return Text("recording.too_many_steps", most=MAX_STEPS, found=expected)
    elif isinstance(event, Step):
        if event.step != steps + 1:
            return Text("recording.step_order", next=steps + 1, found=event.step)
        if event.step > total:
            return Text("recording.step_beyond", total=total, found=event.step)
    elif isinstance(event, RunEnded):
        if event.steps != steps:
            return Text("recording.end_steps", found=event.steps, steps=steps)
        if event.status == Status.FINISHED and steps != total:
            return Text("recording.finished_short", total=total, steps=steps)
    return None


# ---------------------------------------------------------------------------------------------------------
# Replaying.


def replayer(recording: Recording) -> Trainer:
    """A trainer that emits `recording`'s events, one Step per Control.wait(): fitcore.runs.runner.Run(config,
    trainer=replayer(recording)) plays it like a live run (pause, Step, stop, pace)."""

    def replay(
        cfg=None, on_event: Callable[[Event], None] = lambda e: None, control=None, clock=None, plan=None
    ) -> RunEnded:
        from fitcore.core.train import Control

        control = control or Control()
        last: Step | None = None
        for event in recording.events:
            if isinstance(event, Step):
                if not control.wait():
                    ended = _stopped(control.stop_reason, last)
                    on_event(ended)
                    return ended
                last = event
            on_event(event)
        return recording.ended

    return replay


def _stopped(reason: Text, last: Step | None) -> RunEnded:
    if last is None:
        return RunEnded(Status.STOPPED, reason, 0, (), math.nan, None, 0.0)
    return RunEnded(Status.STOPPED, reason, last.step, last.weights, last.bias, last.loss, last.elapsed)
