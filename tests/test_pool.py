"""RunPool: the cap on active runs, the FIFO queue, owners, reaping, server limits; PoolSettings.from_env."""

from __future__ import annotations

import threading

import pytest

import fitcore.runs.pool as pool_mod
from fitcore.core.config import ConfigError, FitConfig, Limits
from fitcore.core.events import RunEnded
from fitcore.runs.pool import CLASSROOM_LIMITS, PoolSettings, RunNotFound, RunPool
from fitcore.runs.runner import Run
from tests.helpers import wait_for

FAR = 3600.0  # a reaper interval or idle timeout that never comes during a test


@pytest.fixture
def make_pool(no_leftover_threads):
    """RunPools that are shut down after the test, whose threads must all have ended."""
    pools = []

    def make(max_active=2, idle_timeout=FAR, limits=CLASSROOM_LIMITS, **kwargs) -> RunPool:
        settings = PoolSettings(max_active=max_active, idle_timeout=idle_timeout, limits=limits)
        pool = RunPool(settings, reap_interval=kwargs.pop("reap_interval", FAR), **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.shutdown()
        assert pool.counts()["queued"] == 0


class Gates:
    """A trainer that holds each run (named by its seed) until released or stopped: order without timing."""

    def __init__(self):
        self.started: list[int] = []
        self.runs: list[Run] = []
        self._gates: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def gate(self, seed: int) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(seed, threading.Event())

    def release(self, seed: int) -> None:
        self.gate(seed).set()

    def trainer(self, cfg, on_event, control, plan=None) -> RunEnded:
        with self._lock:
            self.started.append(cfg.seed)
        gate = self.gate(cfg.seed)
        while not gate.wait(0.01):
            if control.stopped:
                ended = RunEnded("stopped", control.stop_reason, 0, (), 0.0, None, 0.0)
                break
        else:
            ended = RunEnded("finished", "released", 1, (1.0, 2.0), 3.0, 0.0, 0.1)
        on_event(ended)
        return ended

    def factory(self, cfg, **kwargs) -> Run:
        run = Run(cfg, trainer=self.trainer, **kwargs)
        self.runs.append(run)
        return run


def small(seed: int, **kwargs) -> FitConfig:
    return FitConfig(
        **{"data_size": 20, "batch_size": 20, "epochs": 20, "devices": "cpu", "seed": seed, **kwargs}
    )


def test_at_most_max_active_real_runs_train_at_once(make_pool):
    pool = make_pool(max_active=2)
    # 20 steps at 100 steps/s: each run lasts about 0.2 s, long enough for all five to be queued meanwhile
    snaps = [pool.submit("alice", small(seed), pace=100) for seed in range(5)]
    assert [s.queue_position for s in snaps] == [None, None, 1, 2, 3]
    assert [s.status for s in snaps] == ["running", "running", "queued", "queued", "queued"]
    active_seen = []

    def all_ended():
        # a run's snapshot says it has ended a moment before its done callback frees its slot: both
        counts = pool.counts()
        active_seen.append(counts["active"])
        return not any(pool.snapshot("alice", s.run_id).active for s in snaps) and counts["active"] == 0

    wait_for(all_ended, timeout=60)
    assert max(active_seen) <= 2
    assert pool.counts() == {"active": 0, "queued": 0, "kept": 5, "max_active_seen": 2}
    finals = [pool.snapshot("alice", s.run_id) for s in snaps]
    assert [(f.status, f.step) for f in finals] == [("finished", 20)] * 5


def test_queue_is_first_come_first_served(make_pool):
    gates = Gates()
    pool = make_pool(max_active=2, run_factory=gates.factory)
    ids = [pool.submit(f"owner-{seed}", small(seed)).run_id for seed in range(1, 6)]
    owners = [f"owner-{seed}" for seed in range(1, 6)]

    def positions():
        return [pool.snapshot(o, i).queue_position for o, i in zip(owners, ids)]

    def started():
        # runs 1 and 2 start together, and their threads reach the trainer in either order; after them
        # one slot frees at a time, so the order of the rest is the queue's
        return sorted(gates.started[:2]) + gates.started[2:]

    wait_for(lambda: started() == [1, 2])
    assert positions() == [None, None, 1, 2, 3]
    third = pool.snapshot(owners[2], ids[2])
    assert third.status == "queued"
    assert str(third.message) == "waiting: 1 run ahead, counting this one; 2 train at once"
    assert str(pool.snapshot(owners[4], ids[4]).message).startswith("waiting: 3 runs ahead")

    gates.release(1)
    wait_for(lambda: started() == [1, 2, 3])
    assert positions() == [None, None, None, 1, 2]
    gates.release(3)
    wait_for(lambda: started() == [1, 2, 3, 4])
    assert positions() == [None, None, None, None, 1]
    for seed in (2, 4, 5):
        gates.release(seed)
    wait_for(lambda: pool.counts()["active"] == 0)
    assert started() == [1, 2, 3, 4, 5]
    assert [pool.snapshot(o, i).status for o, i in zip(owners, ids)] == ["finished"] * 5
    assert pool.counts()["max_active_seen"] == 2


def test_runs_get_the_servers_time_limit(make_pool):
    gates = Gates()
    pool = make_pool(limits=Limits(max_seconds=42.0), run_factory=gates.factory)
    pool.submit("alice", small(1))
    assert gates.runs[0].control.max_seconds == 42.0
    gates.release(1)


def test_other_owners_cannot_see_or_touch_a_run(make_pool):
    gates = Gates()
    pool = make_pool(run_factory=gates.factory)
    run_id = pool.submit("alice", small(1)).run_id
    for call in (
        lambda: pool.snapshot("bob", run_id),
        lambda: pool.stop("bob", run_id),
        lambda: pool.pause("bob", run_id),
        lambda: pool.resume("bob", run_id),
        lambda: pool.set_pace("bob", run_id, 1.0),
        lambda: pool.forget("bob", run_id),
        lambda: pool.snapshot("alice", "run-does-not-exist"),
    ):
        with pytest.raises(RunNotFound):
            call()
    assert pool.snapshot("alice", run_id).status == "running"  # untouched
    assert pool.counts()["kept"] == 1
    gates.release(1)


def test_pause_resume_and_pace_through_the_pool(make_pool):
    gates = Gates()
    pool = make_pool(run_factory=gates.factory)
    run_id = pool.submit("alice", small(1), pace=3.0).run_id
    wait_for(lambda: gates.started == [1])
    pool.pause("alice", run_id)
    assert pool.snapshot("alice", run_id).status == "paused"
    pool.resume("alice", run_id)
    pool.set_pace("alice", run_id, 7.0)
    snap = pool.snapshot("alice", run_id)
    assert (snap.status, snap.pace) == ("running", 7.0)
    gates.release(1)
    wait_for(lambda: pool.snapshot("alice", run_id).status == "finished")


def test_runs_nobody_reads_are_reaped(make_pool, fake_clock):
    gates = Gates()
    pool = make_pool(max_active=1, idle_timeout=60, clock=fake_clock, run_factory=gates.factory)
    kept = pool.submit("alice", small(1)).run_id  # running
    dropped = pool.submit("bob", small(2)).run_id  # queued behind it
    wait_for(lambda: gates.started == [1])
    fake_clock.advance(30)
    pool.snapshot("alice", kept)  # alice's page is still open
    fake_clock.advance(31)
    assert pool.reap() == [dropped]
    with pytest.raises(RunNotFound):
        pool.snapshot("bob", dropped)
    assert pool.counts() == {"active": 1, "queued": 0, "kept": 1, "max_active_seen": 1}
    bobs = gates.runs[1]
    assert bobs.done and bobs.thread is None  # stopped before it ever started
    message = str(bobs.snapshot().message)
    assert message == "stopped: its page was closed (not read for 60 s) before it started"

    fake_clock.advance(60.5)
    assert pool.reap() == [kept]
    alices = gates.runs[0]
    assert alices.wait(30)
    assert alices.snapshot().status == "stopped"
    assert str(alices.snapshot().message) == "stopped: its page was closed (not read for 60 s)"
    assert pool.counts()["kept"] == 0 and gates.started == [1]  # bob's reaped run never started
    assert pool.reap() == []


def test_the_reaper_thread_reaps_on_its_own(make_pool, fake_clock):
    gates = Gates()
    pool = make_pool(idle_timeout=5, clock=fake_clock, run_factory=gates.factory, reap_interval=0.02)
    run_id = pool.submit("alice", small(1)).run_id
    fake_clock.advance(6)
    wait_for(lambda: pool.counts()["kept"] == 0)
    assert gates.runs[0].wait(30)
    with pytest.raises(RunNotFound):
        pool.snapshot("alice", run_id)


def test_stop_a_queued_run(make_pool):
    gates = Gates()
    pool = make_pool(max_active=1, run_factory=gates.factory)
    first = pool.submit("alice", small(1)).run_id
    second = pool.submit("alice", small(2)).run_id
    assert pool.snapshot("alice", second).queue_position == 1
    pool.stop("alice", second)
    snap = pool.snapshot("alice", second)
    assert (snap.status, snap.queue_position) == ("stopped", None)
    assert str(snap.message) == "stopped by the user before it started"
    assert pool.counts()["queued"] == 0
    gates.release(1)
    wait_for(lambda: pool.snapshot("alice", first).status == "finished")
    assert gates.started == [1] and gates.runs[1].thread is None


def test_forget_drops_the_run(make_pool):
    gates = Gates()
    pool = make_pool(run_factory=gates.factory)
    run_id = pool.submit("alice", small(1)).run_id
    pool.forget("alice", run_id)
    with pytest.raises(RunNotFound):
        pool.snapshot("alice", run_id)
    assert gates.runs[0].wait(30) and str(gates.runs[0].snapshot().message).startswith("reset by the user")
    wait_for(lambda: pool.counts() == {"active": 0, "queued": 0, "kept": 0, "max_active_seen": 1})


# (override, field, text in allowed): checked against CLASSROOM_LIMITS before any run exists
SERVER_REJECTS = [
    ({"data_size": 1_000_001, "batch_size": 1000}, "data_size", "from 1 to 1000000"),
    ({"epochs": 10_001}, "epochs", "from 1 to 10000"),
    (
        {"batch_size": 1, "epochs": 10_000},
        "epochs",
        "at most 1000000 steps in all; 10000 epochs x 200 batches",
    ),
    ({"lr": float("nan")}, "lr", "greater than 0"),
    ({"devices": "gpu"}, "devices", "virtual:K"),
    ({"weights": (1.0,) * 17}, "weights", "1 to 16 numbers"),
]


@pytest.mark.parametrize("override, field, allowed", SERVER_REJECTS)
def test_server_limits_reject_before_a_run_exists(make_pool, override, field, allowed):
    gates = Gates()
    pool = make_pool(run_factory=gates.factory)
    with pytest.raises(ConfigError) as info:
        pool.submit("alice", FitConfig(**override))
    assert info.value.field == field and allowed in info.value.allowed
    assert gates.runs == []
    assert pool.counts() == {"active": 0, "queued": 0, "kept": 0, "max_active_seen": 0}


def test_shutdown_stops_running_and_queued_runs(no_leftover_threads):
    gates = Gates()
    pool = RunPool(PoolSettings(max_active=1), reap_interval=FAR, run_factory=gates.factory)
    running = pool.submit("alice", small(1)).run_id
    queued = pool.submit("bob", small(2)).run_id
    wait_for(lambda: gates.started == [1])
    pool.shutdown()
    first, second = gates.runs
    assert first.done and second.done
    snap = first.snapshot()
    assert (snap.status, str(snap.message)) == ("stopped", "the server is shutting down")
    assert str(second.snapshot().message) == "the server is shutting down before it started"
    assert gates.started == [1]  # the queued run was not started by the running one's end
    assert pool.counts()["queued"] == 0
    assert (pool.snapshot("alice", running).status, pool.snapshot("bob", queued).status) == ("stopped",) * 2


class Lingering:
    """A trainer that runs until stopped, then holds its thread until let go: a run still ending."""

    def __init__(self):
        self.stopped, self.let_go = threading.Event(), threading.Event()
        self.runs: list[Run] = []

    def trainer(self, cfg, on_event, control, plan=None) -> RunEnded:
        wait_for(lambda: control.stopped, what="the run to be stopped")
        self.stopped.set()
        assert self.let_go.wait(60), "the test never let the run end"
        ended = RunEnded("stopped", control.stop_reason, 0, (), 0.0, None, 0.0)
        on_event(ended)
        return ended

    def factory(self, cfg, **kwargs) -> Run:
        run = Run(cfg, trainer=self.trainer, **kwargs)
        self.runs.append(run)
        return run


def reset(pool, clock, run_id):
    pool.forget("alice", run_id)


def reaped(pool, clock, run_id):
    clock.advance(61)
    assert pool.reap() == [run_id]


@pytest.mark.parametrize("leave", [reset, reaped])
def test_shutdown_waits_for_a_run_that_left_the_pool_while_its_thread_still_ends(
    no_leftover_threads, fake_clock, leave
):
    lingering = Lingering()
    settings = PoolSettings(max_active=1, idle_timeout=60)
    pool = RunPool(settings, clock=fake_clock, reap_interval=FAR, run_factory=lingering.factory)
    run_id = pool.submit("alice", small(1)).run_id
    leave(pool, fake_clock, run_id)
    with pytest.raises(RunNotFound):
        pool.snapshot("alice", run_id)
    assert lingering.stopped.wait(30)
    [run] = lingering.runs
    # its thread cannot end yet: shutdown must say so rather than return as if the server were quiet
    assert pool.shutdown(timeout=0.05) is False
    assert not run.done and run.thread.is_alive()
    lingering.let_go.set()
    assert pool.shutdown() is True
    assert run.done and not run.thread.is_alive()


def test_a_run_submitted_after_shutdown_never_starts(no_leftover_threads):
    gates = Gates()
    pool = RunPool(PoolSettings(max_active=1), reap_interval=FAR, run_factory=gates.factory)
    assert pool.shutdown() is True
    snap = pool.submit("alice", small(1))
    assert (snap.status, snap.queue_position) == ("stopped", None)
    assert str(snap.message) == "the server is shutting down before it started"
    [run] = gates.runs
    assert run.done and run.thread is None and gates.started == []
    assert pool.counts() == {"active": 0, "queued": 0, "kept": 1, "max_active_seen": 0}


# -- PoolSettings.from_env ------------------------------------------------------------------------------


def test_from_env_defaults():
    assert PoolSettings.from_env({}) == PoolSettings()
    blank = {name: "" for name in ("FITCORE_MAX_ACTIVE_RUNS", "FITCORE_IDLE_TIMEOUT", "FITCORE_MAX_STEPS")}
    assert PoolSettings.from_env(blank) == PoolSettings()
    assert PoolSettings().limits == CLASSROOM_LIMITS


def test_from_env_reads_every_variable():
    env = {
        "FITCORE_MAX_ACTIVE_RUNS": "3",
        "FITCORE_IDLE_TIMEOUT": "2.5",
        "FITCORE_MAX_DATA_SIZE": "5000",
        "FITCORE_MAX_EPOCHS": "7",
        "FITCORE_MAX_STEPS": "100",
        "FITCORE_MAX_SECONDS": "30",
    }
    settings = PoolSettings.from_env(env)
    assert (settings.max_active, settings.idle_timeout) == (3, 2.5)
    limits = settings.limits
    assert (limits.max_data_size, limits.max_epochs, limits.max_steps, limits.max_seconds) == (
        5000,
        7,
        100,
        30.0,
    )
    assert limits.max_features == CLASSROOM_LIMITS.max_features


def test_from_env_reads_os_environ(monkeypatch):
    monkeypatch.setenv("FITCORE_MAX_ACTIVE_RUNS", "9")
    assert PoolSettings.from_env().max_active == 9


@pytest.mark.parametrize(
    "name, raw, kind",
    [
        ("FITCORE_MAX_ACTIVE_RUNS", "abc", "int"),
        ("FITCORE_MAX_ACTIVE_RUNS", "0", "int"),
        ("FITCORE_MAX_ACTIVE_RUNS", "-2", "int"),
        ("FITCORE_MAX_ACTIVE_RUNS", "1.5", "int"),
        ("FITCORE_MAX_DATA_SIZE", "1e6", "int"),
        ("FITCORE_MAX_EPOCHS", "ten", "int"),
        ("FITCORE_MAX_STEPS", "0", "int"),
        ("FITCORE_IDLE_TIMEOUT", "soon", "float"),
        ("FITCORE_IDLE_TIMEOUT", "0", "float"),
        ("FITCORE_IDLE_TIMEOUT", "nan", "float"),
        ("FITCORE_MAX_SECONDS", "-1", "float"),
    ],
)
def test_from_env_errors_name_the_variable(name, raw, kind):
    with pytest.raises(ConfigError) as info:
        PoolSettings.from_env({name: raw})
    err = info.value
    assert (err.field, err.value) == (name, raw)
    assert err.allowed.startswith(f"a positive {kind}")
    assert str(err).startswith(f"{name}: got {raw!r}; allowed: a positive {kind}")


def test_server_pool_is_one_per_process_until_closed(monkeypatch):
    monkeypatch.setenv("FITCORE_MAX_ACTIVE_RUNS", "3")
    pool_mod.close_server_pool()
    first = pool_mod.server_pool()
    try:
        assert pool_mod.server_pool() is first and first.settings.max_active == 3
        monkeypatch.setenv("FITCORE_MAX_ACTIVE_RUNS", "2")
        assert pool_mod.server_pool().settings.max_active == 3  # read once, on first use
    finally:
        pool_mod.close_server_pool()
    assert first.closed
    again = pool_mod.server_pool()
    try:
        assert again is not first and again.settings.max_active == 2
    finally:
        pool_mod.close_server_pool()
