"""A run in a background thread, and the immutable snapshot of it that a UI reads."""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan, parse_devices
from fitcore.core.errors import Text
from fitcore.core.events import ACTIVE, Detail, Event, RunEnded, RunStarted, Status, Step
from fitcore.core.train import Control, Trainer, describe_failure
from fitcore.protocols import registry

_ids = itertools.count(1)


def _name_os_thread(name: str) -> None:
    """Give the calling thread `name` in ps, top and /proc/<pid>/task/*/comm (15 bytes at most).

    Python sets the OS thread name itself only from 3.14, so a server's training threads could not be
    told apart from outside; elsewhere than Linux this does nothing.
    """
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass


class History:
    """A bounded series: every point until `max_points`, then every other one, and so on.

    The first point stays, the stride doubles each time the series fills up, and the latest point is
    always included, so a million steps cost no more memory than a few thousand.
    """

    def __init__(self, max_points: int = 2000):
        self.max_points = max(2, max_points)
        self.stride = 1
        self._points: list[tuple[int, tuple[float, ...]]] = []
        self._last: tuple[int, tuple[float, ...]] | None = None

    def add(self, step: int, values: tuple[float, ...]) -> None:
        self._last = (step, values)
        if (step - 1) % self.stride == 0:
            self._points.append((step, values))
            if len(self._points) >= self.max_points:
                self._points = self._points[::2]
                self.stride *= 2

    def points(self) -> tuple[tuple[int, tuple[float, ...]], ...]:
        if self._last is not None and (not self._points or self._points[-1][0] != self._last[0]):
            return tuple(self._points) + (self._last,)
        return tuple(self._points)


@dataclass(frozen=True)
class Snapshot:
    """Everything a UI shows about one run, copied under the run's lock: safe to keep and to read."""

    run_id: str
    status: Status  # queued, running, paused, finished, stopped, diverged or failed
    message: Text  # what it is doing or why it ended; str(message) says it in the current language
    config: FitConfig
    plan: DevicePlan | None = None  # its devices as its start checked them (what its panels draw)
    pace: float | None = None  # steps per second, None for as fast as possible
    devices: tuple[str, ...] = ()
    emulated: bool = False
    data_parallel: bool = False
    header: str = ""
    step: int = 0
    total_steps: int = 0
    epoch: int = 0
    elapsed: float = 0.0
    steps_per_second: float = 0.0
    loss_history: tuple[tuple[int, float], ...] = ()  # (step, loss)
    param_history: tuple[tuple[int, tuple[float, ...]], ...] = ()  # (step, (w1, ..., wd, b))
    first: Step | None = None  # the first step's split
    latest: Step | None = None  # the latest split
    latest_time: float | None = None  # time.time() when the latest step arrived: how late a page shows it
    recent: tuple[Step, ...] = ()  # the last few steps, for the console panel
    weights: tuple[float, ...] = ()  # learned so far
    bias: float | None = None
    final_loss: float | None = None
    lstsq_weights: tuple[float, ...] | None = None
    lstsq_bias: float | None = None
    queue_position: int | None = None  # 1 = next to start; None when not queued
    extra: dict = field(default_factory=dict)  # strategy-specific details (DDP shards)
    started: RunStarted | None = None  # the run's RunStarted, once it came
    source_label: str = ""  # a replay's "recorded on <machine> on <date>"; "" for a live run
    limit: tuple[str, float, float] | None = None  # the next time limit: (kind, its seconds, seconds left)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else 0.0


def trainer_for(cfg: FitConfig) -> Trainer:
    """The training function for cfg.strategy; each emits the same events."""
    return registry.strategy(cfg.strategy).train


class Run:
    """One training run in a daemon thread. Control it from any thread; read it with snapshot().

    Args:
        cfg: a validated configuration.
        pace: steps per second (None: as fast as possible); set_pace changes it during the run.
        max_seconds: stop the run after it has trained this long, pauses not counted (None: no limit).
        max_paused_seconds: stop the run once one pause has lasted this long (None: no limit).
        history_points: the most points kept per series.
        on_done: called in the run's thread once it has ended (the pool uses it to start the next run).
    """

    def __init__(
        self,
        cfg: FitConfig,
        pace: float | None = None,
        max_seconds: float | None = None,
        max_paused_seconds: float | None = None,
        history_points: int = 2000,
        plan: DevicePlan | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_done: Callable[["Run"], None] | None = None,
        recent_steps: int = 5,
        trainer: Trainer | None = None,
        source_label: str = "",
    ):
        self.run_id = f"run-{next(_ids)}"
        self.config = cfg
        self.control = Control(pace, max_seconds, clock, max_paused_seconds)
        self.clock = clock
        # the device plan its start checked (the page's, the pool's, a recording's); a Run made from a bare
        # config, as a script or a test makes one, reads its devices here
        self.plan = plan or parse_devices(cfg.devices)
        self._trainer = trainer or trainer_for(cfg)
        self.source_label = source_label  # what a replay was recorded on, for every line that names the run
        self._on_done = on_done
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        # state below is written by the run's thread and read by snapshot(), both under the lock
        self._status, self._message = Status.QUEUED, Text("run.message.waiting")
        self._started: RunStarted | None = None
        self._first: Step | None = None
        self._latest: Step | None = None
        self._latest_time: float | None = None
        self._recent: deque[Step] = deque(maxlen=recent_steps)
        self._ended: RunEnded | None = None
        self._loss = History(history_points)
        self._params = History(max(2, history_points // 2))
        self._rate_window: deque[tuple[float, int]] = deque(maxlen=64)
        self._extra: dict = {}

    # -- control ------------------------------------------------------------------------------------
    def start(self) -> "Run":
        with self._lock:
            if self._thread is not None or self._status != Status.QUEUED:
                return self
            self._status, self._message = Status.RUNNING, Text("run.message.starting")
            self._thread = threading.Thread(target=self._work, name=f"fitcore-{self.run_id}", daemon=True)
        try:
            self._thread.start()
        except RuntimeError as exc:  # no thread to be had: the run must still end, or its slot stays taken
            with self._lock:
                self._thread = None
                self._status, self._message = Status.FAILED, Text("run.message.no_thread", error=str(exc))
            self._finish()
        return self

    def pause(self) -> None:
        self.control.pause()

    def resume(self) -> None:
        self.control.resume()

    def step_once(self) -> None:
        """While paused, run exactly one step and stay paused."""
        self.control.step_once()

    def set_pace(self, pace: float | None) -> None:
        self.control.pace = pace

    def stop(self, reason: Text = Text("run.message.stopped")) -> None:
        """Ask the run to end after its current step; a run that never started ends at once."""
        self.control.stop(reason)
        with self._lock:
            never_started = self._thread is None and self._status == Status.QUEUED
            if never_started:
                self._status, self._message = Status.STOPPED, Text("run.message.before_start", reason=reason)
        if never_started:
            self._finish()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has ended; True if it has."""
        return self._done.wait(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Block until the run has ended and its thread has exited too; True if both happened in time.

        The thread outlives `done` by a little: it still calls on_done, which may start the next run.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._done.wait(timeout):
            return False
        thread = self._thread  # done and a thread: that thread set done, so it was started
        if thread is not None and thread is not threading.current_thread():
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.ended

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def ended(self) -> bool:
        """Done, and its thread (if it had one) has exited: nothing of this run runs any more."""
        thread = self._thread
        return self._done.is_set() and (thread is None or not thread.is_alive())

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    # -- the run's thread ---------------------------------------------------------------------------
    def _work(self) -> None:
        _name_os_thread(self._thread.name)  # "fitcore-run-12": outside tools can count training threads
        try:
            self._trainer(self.config, self._on_event, self.control, plan=self.plan)
        except BaseException as exc:  # noqa: BLE001 - even a broken consumer must not leave a silent UI
            with self._lock:
                if self._ended is None:
                    self._status, self._message = Status.FAILED, describe_failure(exc)
        finally:
            # no longer training, though this thread may still start the next queued run in _finish
            _name_os_thread("fitcore-ended")
            self._finish()

    def _finish(self) -> None:
        self._done.set()
        if self._on_done is not None:
            self._on_done(self)

    def _on_event(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, Step):
                self._first = self._first or event
                self._latest, self._latest_time = event, time.time()
                self._recent.append(event)
                self._loss.add(event.step, (event.loss,))
                self._params.add(event.step, event.weights + (event.bias,))
                # running time only: a pause does not lower the speed shown after it
                self._rate_window.append((self.clock() - self.control.paused_seconds, event.step))
            elif isinstance(event, RunStarted):
                self._started = event
                self._message = Text("run.message.training")
            elif isinstance(event, RunEnded):
                self._ended = event
                self._status, self._message = event.status, event.message
            elif isinstance(event, Detail):
                self._extra[event.key] = event.value

    # -- reading ------------------------------------------------------------------------------------
    def _steps_per_second(self) -> float:
        if self._ended is not None:
            running = self._ended.elapsed - self.control.paused_seconds
            return self._ended.steps / running if running > 0 else 0.0
        if len(self._rate_window) < 2:
            return 0.0
        (t0, s0), (t1, s1) = self._rate_window[0], self._rate_window[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def _status_message(self, status: Status, latest: Step | None) -> Text:
        """The message beside the status; a running run's names its latest step."""
        if status == Status.PAUSED:
            return Text("run.message.paused")
        if status == Status.RUNNING and latest is not None:
            return Text("run.message.at_step", epoch=latest.epoch, step=latest.step)
        return self._message

    def stamp(self) -> tuple:
        """What changes whenever the run's snapshot does (its status, its latest step and when it came, its
        pace), read in microseconds: a page's shared answer is made again only when this moves."""
        with self._lock:
            status = self._status
            if status == Status.RUNNING and self.control.holding:  # paused, its last step ended
                status = Status.PAUSED
            return (status, self._latest.step if self._latest else 0, self._latest_time, self.control.pace,
                    self._ended is not None, len(self._extra))  # fmt: skip

    def snapshot(self) -> Snapshot:
        """An immutable copy of the run's state, made under the lock; callers never hold the lock."""
        with self._lock:
            started, latest, ended = self._started, self._latest, self._ended
            status = self._status
            if status == Status.RUNNING and self.control.holding:  # paused, its last step ended
                status = Status.PAUSED
            if ended is not None:
                weights, bias, elapsed = ended.weights, ended.bias, ended.elapsed
            elif latest is not None:
                weights, bias, elapsed = latest.weights, latest.bias, latest.elapsed
            else:
                weights, bias, elapsed = (), None, 0.0
            return Snapshot(
                run_id=self.run_id,
                status=status,
                message=self._status_message(status, latest),
                config=self.config,
                plan=self.plan,
                pace=self.control.pace,
                devices=started.devices if started else (),
                emulated=started.emulated if started else False,
                data_parallel=started.data_parallel if started else False,
                header=started.header if started else "",
                step=latest.step if latest else 0,
                total_steps=self.config.total_steps,
                epoch=latest.epoch if latest else 0,
                elapsed=elapsed,
                steps_per_second=self._steps_per_second(),
                loss_history=tuple((s, v[0]) for s, v in self._loss.points()),
                param_history=self._params.points(),
                first=self._first,
                latest=latest,
                latest_time=self._latest_time,
                recent=tuple(self._recent),
                weights=weights,
                bias=bias,
                final_loss=ended.final_loss if ended else (latest.loss if latest else None),
                lstsq_weights=started.lstsq_weights if started else None,
                lstsq_bias=started.lstsq_bias if started else None,
                extra=dict(self._extra),
                started=started,
                source_label=self.source_label,
                limit=self.control.limit_left() if status in (Status.RUNNING, Status.PAUSED) else None,
            )
