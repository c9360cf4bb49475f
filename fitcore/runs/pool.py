"""Every run on one server: a cap on runs training at once, a queue, owners, and reaping of abandoned runs."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from fitcore.core.config import MAX_FEATURES, Checked, ConfigError, FitConfig, Limits, check, parse_number
from fitcore.core.errors import Text
from fitcore.core.train import warm_up
from fitcore.runs.runner import Run, Snapshot, trainer_for

# Bounds for a server that many students share; the command line has none but memory.
CLASSROOM_LIMITS = Limits(
    max_data_size=1_000_000, max_epochs=10_000, max_steps=1_000_000, max_seconds=600,
    max_paused_seconds=3600,  # an hour's lesson on one paused step; a closed page frees its run sooner
)  # fmt: skip


def _listened(trainer: Callable, listener: Callable) -> Callable:
    """`trainer` with `listener` called on every event before the run's own consumer."""

    def train(cfg, on_event, control, **kwargs):
        def both(event):
            listener(event)
            on_event(event)

        return trainer(cfg, both, control, **kwargs)

    return train


class RunNotFound(KeyError):
    """No run with that id belongs to that owner (another owner's runs are not even acknowledged)."""


@dataclass(frozen=True)
class PoolSettings:
    """How a server shares its machine; read from FITCORE_* environment variables by from_env()."""

    max_active: int = 4  # runs training at once; the rest wait in a queue
    idle_timeout: float = 60.0  # seconds without a snapshot read before a run is stopped and freed
    # seconds a run waits for a page to read it again after its page said goodbye (closed, or reloading)
    closed_grace: float = 5.0
    limits: Limits = CLASSROOM_LIMITS

    @classmethod
    def from_env(cls, env: dict | None = None) -> "PoolSettings":
        env = os.environ if env is None else env

        def number(name, default, kind, most=None):
            raw = env.get(name)
            if raw in (None, ""):
                return default
            allowed = f"a positive {kind.__name__}" + (f" up to {most}" if most is not None else "")
            try:  # ASCII digits only, as every number fitcore reads (int() would also take "١٢")
                value = parse_number(name, raw, kind)
            except ConfigError:
                raise ConfigError(name, raw, allowed) from None
            if not value > 0 or (most is not None and value > most):
                raise ConfigError(name, raw, allowed)
            return value

        base = cls()
        limits = dataclasses.replace(
            base.limits,
            max_features=number("FITCORE_MAX_FEATURES", base.limits.max_features, int, MAX_FEATURES),
            max_data_size=number("FITCORE_MAX_DATA_SIZE", base.limits.max_data_size, int),
            max_epochs=number("FITCORE_MAX_EPOCHS", base.limits.max_epochs, int),
            max_steps=number("FITCORE_MAX_STEPS", base.limits.max_steps, int),
            max_seconds=number("FITCORE_MAX_SECONDS", base.limits.max_seconds, float),
            max_paused_seconds=number("FITCORE_MAX_PAUSED_SECONDS", base.limits.max_paused_seconds, float),
        )
        return cls(
            max_active=number("FITCORE_MAX_ACTIVE_RUNS", base.max_active, int),
            idle_timeout=number("FITCORE_IDLE_TIMEOUT", base.idle_timeout, float),
            closed_grace=number("FITCORE_CLOSED_GRACE", base.closed_grace, float),
            limits=limits,
        )


RESET_KEPT = 256  # runs remembered as reset, every owner together


class RunPool:
    """Hands out runs to owners (browser sessions) and trains at most `max_active` of them at once.

    Runs are started first come, first served. A run is stopped and dropped once nobody has read it for
    `idle_timeout` seconds, so a closed tab leaves nothing running; a page keeps the final snapshot it
    read, so dropping an ended run loses nothing shown.
    """

    def __init__(
        self,
        settings: PoolSettings = PoolSettings(),
        clock: Callable[[], float] = time.monotonic,
        reap_interval: float = 1.0,
        run_factory: Callable[..., Run] = Run,
    ):
        self.settings = settings
        self.clock = clock
        self.reap_interval = reap_interval
        self._run_factory = run_factory
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[str, Run]] = {}  # run_id -> (owner, run)
        self._seen: dict[str, float] = {}  # run_id -> last read
        self._closed_at: dict[str, float] = {}  # run_id -> when its page said goodbye, until read again
        self._latest: dict[str, str] = {}  # owner -> its latest run's id: a reloaded page finds it again
        self._numbers: dict[str, int] = {}  # run_id -> 1, 2, ...: each owner numbers its own runs
        self._counts: dict[str, int] = {}  # owner -> runs it has submitted
        # (owner, run_id) of runs their owner reset lately: a page's poll that was on its way as Reset was
        # pressed is told the run is reset (not "gone", which says the server dropped it)
        self._reset: deque[tuple[str, str]] = deque(maxlen=RESET_KEPT)
        self._queue: deque[Run] = deque()
        self._active: set[str] = set()
        # every run until its thread has ended, kept or not: a run reset or reaped a moment ago may still be
        # ending in its thread, and shutdown must stop and wait for it too
        self._unended: set[Run] = set()
        self.max_active_seen = 0
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap_forever, name="fitcore-reaper", daemon=True)
        self._reaper.start()
        warm_up()  # so that a student's first Start shows a step within a second

    # -- owners' calls ----------------------------------------------------------------------------
    def submit(
        self,
        owner: str,
        cfg: FitConfig | Checked,
        pace: float | None = None,
        listener: Callable[[FitConfig], Callable] | None = None,
    ) -> Snapshot:
        """Validate cfg against the server's limits, queue a run and start it if a slot is free.

        Args:
            cfg: a config, or one checked already against this pool's limits (fitcore.core.config.check: the
                page checks its controls once per Start); its device plan goes to the run's trainer.
            listener: given the validated config, returns an on_event consumer that sees every event of
                the run besides the run itself (a page's Recorder); called only once cfg is valid.
        """
        checked = cfg  # checked here unless checked against these limits (a CSV source: its rows filled in)
        if not (isinstance(cfg, Checked) and cfg.limits == self.settings.limits):
            checked = check(getattr(cfg, "config", cfg), self.settings.limits)
        cfg = checked.config
        extra = {}
        if listener is not None:
            extra["trainer"] = _listened(trainer_for(cfg), listener(cfg))
        run = self._run_factory(
            cfg, pace=pace, max_seconds=self.settings.limits.max_seconds,
            max_paused_seconds=self.settings.limits.max_paused_seconds, on_done=self._done,
            plan=checked.plan, **extra,
        )  # fmt: skip
        return self._enqueue(owner, run)

    def submit_replay(self, owner: str, recording, pace: float | None = None) -> Snapshot:
        """Queue the replay of a fitcore.runs.recording.Recording like a run: same controls, pace and limits.

        Its config is the recorded one and is not validated here: it describes the machine that ran it
        (cuda:0,1 on a laptop, a CSV file that is not here), and a replay needs neither.
        """
        from fitcore.runs.recording import replayer

        run = self._run_factory(
            recording.config, pace=pace, max_seconds=self.settings.limits.max_seconds,
            max_paused_seconds=self.settings.limits.max_paused_seconds, on_done=self._done,
            trainer=replayer(recording), source_label=recording.short_label, plan=recording.plan,
        )  # fmt: skip
        return self._enqueue(owner, run)

    def _enqueue(self, owner: str, run: Run) -> Snapshot:
        with self._lock:
            self._runs[run.run_id] = (owner, run)
            self._seen[run.run_id] = self.clock()
            self._latest[owner] = run.run_id
            self._counts[owner] = self._numbers[run.run_id] = self._counts.get(owner, 0) + 1
            self._forget_ended()
            self._unended.add(run)
            closing = self._closed.is_set()  # under the lock: shutdown has taken its list of runs, or will
            if not closing:
                self._queue.append(run)
        if closing:
            run.stop(Text("run.message.shutdown"))  # never started: it ends here
        self._schedule()
        return self._read(run)  # not through _get: the reaper may already have dropped it

    def snapshot(self, owner: str, run_id: str, keep: bool = True) -> Snapshot:
        """The run's snapshot with its place in the queue; reading it keeps the run alive, unless `keep` is
        False (a room's students following it: only its owner's own page keeps it)."""
        return self._read(self._get(owner, run_id), keep)

    def _read(self, run: Run, keep: bool = True) -> Snapshot:
        snap = run.snapshot()
        with self._lock:
            if keep and run.run_id in self._runs:  # a run reaped meanwhile stays dropped
                self._seen[run.run_id] = self.clock()
                self._closed_at.pop(run.run_id, None)  # a page reads it again: the reload came back
            position = next((i for i, r in enumerate(self._queue, 1) if r is run), None)
        if position is not None:
            ahead = Text.count("count.run", position)
            message = Text("run.message.queued", ahead=ahead, most=self.settings.max_active)
            return dataclasses.replace(snap, queue_position=position, message=message)
        return snap

    def stamp(self, owner: str, run_id: str) -> tuple:
        """The run's Run.stamp() with its place in the queue: what a shared answer is keyed on. It does not
        keep the run alive (its owner's own page does)."""
        run = self._get(owner, run_id)
        with self._lock:
            position = next((i for i, r in enumerate(self._queue, 1) if r is run), None)
        return (*run.stamp(), position)

    def latest_run(self, owner: str) -> str | None:
        """The id of the owner's latest run while the pool keeps it: a reloaded page shows it again."""
        with self._lock:
            return self._latest.get(owner)

    def run_number(self, owner: str, run_id: str) -> int:
        """1 for the owner's first run, 2 for the next: each browser counts its own runs."""
        self._get(owner, run_id)
        with self._lock:
            return self._numbers.get(run_id, 0)

    def page_closed(self, owner: str, run_id: str) -> None:
        """The run's page went away (closed or reloading): free the run unless a page reads it again soon.

        A reload reads the run again within a second or two and so keeps it; a closed tab frees its slot
        after `closed_grace` seconds instead of the idle timeout. A page that is merely slow never says
        goodbye, so only the idle timeout applies to it.
        """
        self._get(owner, run_id)
        with self._lock:
            self._closed_at[run_id] = self.clock()

    def pause(self, owner: str, run_id: str) -> None:
        self._get(owner, run_id).pause()

    def resume(self, owner: str, run_id: str) -> None:
        self._get(owner, run_id).resume()

    def step_once(self, owner: str, run_id: str) -> None:
        self._get(owner, run_id).step_once()

    def set_pace(self, owner: str, run_id: str, pace: float | None) -> None:
        self._get(owner, run_id).set_pace(pace)

    def stop(self, owner: str, run_id: str, reason: Text = Text("run.message.stopped")) -> None:
        run = self._get(owner, run_id)
        with self._lock:
            if run in self._queue:
                self._queue.remove(run)
        run.stop(reason)

    def forget(self, owner: str, run_id: str) -> None:
        """Stop the run if needed and drop it (Reset)."""
        self.stop(owner, run_id, Text("run.message.reset"))
        with self._lock:
            self._drop(run_id)
            self._reset.append((owner, run_id))

    def was_reset(self, owner: str, run_id: str) -> bool:
        """Did `owner` reset this run lately? (Another owner's run is never one of its own.)"""
        with self._lock:
            return (owner, run_id) in self._reset

    # -- the server's view ------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Runs training, waiting and kept, and the most that ever trained at once."""
        with self._lock:
            return {
                "active": len(self._active),
                "queued": len(self._queue),
                "kept": len(self._runs),
                "max_active_seen": self.max_active_seen,
            }

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop every run and the reaper and wait for their threads; True if all ended within `timeout`.

        Every run means every run whose thread has not ended, kept or not: one reset or reaped a moment
        ago may still be finishing its step. A run submitted afterwards is stopped before it starts.
        """
        deadline = time.monotonic() + timeout
        self._closed.set()
        with self._lock:
            runs = list(self._unended)
            self._queue.clear()
        for run in runs:
            run.stop(Text("run.message.shutdown"))
        ended = all([run.join(max(0.0, deadline - time.monotonic())) for run in runs])
        self._reaper.join(max(0.0, deadline - time.monotonic()))
        return ended and not self._reaper.is_alive()

    # -- inside -----------------------------------------------------------------------------------
    def _get(self, owner: str, run_id: str) -> Run:
        with self._lock:
            entry = self._runs.get(run_id)
        if entry is None or entry[0] != owner:
            raise RunNotFound(run_id)
        return entry[1]

    def _schedule(self) -> None:
        """Start queued runs while slots are free."""
        to_start = []
        with self._lock:
            while not self._closed.is_set() and self._queue and len(self._active) < self.settings.max_active:
                run = self._queue.popleft()
                self._active.add(run.run_id)
                to_start.append(run)
            self.max_active_seen = max(self.max_active_seen, len(self._active))
        for run in to_start:
            run.start()

    def _done(self, run: Run) -> None:
        with self._lock:
            self._active.discard(run.run_id)
        self._schedule()

    def reap(self) -> list[str]:
        """Stop runs nobody has read for idle_timeout, and drop them; return their ids."""
        now, settings = self.clock(), self.settings
        with self._lock:
            idle = [rid for rid, seen in self._seen.items() if now - seen > settings.idle_timeout]
            closed = [
                rid for rid, at in self._closed_at.items()
                if now - at > settings.closed_grace and rid not in idle
            ]  # fmt: skip
            entries = [(rid, self._runs.get(rid)) for rid in idle + closed]
            for rid, _ in entries:
                self._drop(rid)
            self._forget_ended()  # a quiet server lets go of ended runs too, not only at the next submit
        for rid, entry in entries:
            if entry is None:
                continue
            run = entry[1]
            if rid in closed:
                run.stop(Text("run.message.closed_again", seconds=f"{settings.closed_grace:g}"))
            else:
                run.stop(Text("run.message.closed", seconds=f"{settings.idle_timeout:g}"))
        return idle + closed

    def _drop(self, run_id: str) -> None:
        """Forget a run (under the lock): its entry, its reads, its place in the queue, its number."""
        entry = self._runs.pop(run_id, None)
        self._seen.pop(run_id, None)
        self._closed_at.pop(run_id, None)
        self._numbers.pop(run_id, None)
        if entry is None:
            return
        owner, run = entry
        if self._latest.get(owner) == run_id:
            del self._latest[owner]  # nothing to find again: the map holds only runs the pool keeps
        if run in self._queue:
            self._queue.remove(run)

    def _forget_ended(self) -> None:
        """Let go of runs whose threads have ended (under the lock): shutdown has nothing left to wait for."""
        self._unended = {run for run in self._unended if not run.ended}

    def _reap_forever(self) -> None:
        while not self._closed.wait(self.reap_interval):
            self.reap()


_server_pool: RunPool | None = None
_server_pool_lock = threading.Lock()


def server_pool() -> RunPool:
    """The one pool of this process, built from FITCORE_* on first use: every session shares its cap.

    A module global, not st.cache_resource: Streamlit keys its cache on the cached function's source, so
    editing app.py under a running server would build a second pool beside the first, and the cap would
    hold for each of them but no longer for the server.
    """
    global _server_pool
    with _server_pool_lock:
        if _server_pool is None or _server_pool.closed:
            _server_pool = RunPool(PoolSettings.from_env())
        return _server_pool


def close_server_pool(timeout: float = 10.0) -> bool:
    """Shut the process's pool down and forget it; the next server_pool() reads FITCORE_* afresh.

    True if every run's thread ended within `timeout` (or there was no pool).
    """
    global _server_pool
    with _server_pool_lock:
        pool, _server_pool = _server_pool, None
    return pool is None or pool.shutdown(timeout)
