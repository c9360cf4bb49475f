"""One server, many students: the pool's cap, queue, owners and reaping under races; faults inside runs;
the classroom limits; and a table of bad input for the command line."""

from __future__ import annotations

import collections
import dataclasses
import gc
import importlib
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tomllib
import torch

import fitcore.cli as cli
from fitcore.core.config import ConfigError, FitConfig, validate
from fitcore.core.errors import Text
from fitcore.core.events import RunEnded, Status
from fitcore.runs.pool import CLASSROOM_LIMITS, PoolSettings, RunNotFound, RunPool
from fitcore.runs.runner import Run, Snapshot
from fitcore.view.status import status_line
from tests.helpers import PauseWatch, wait_for

FAILED, FINISHED, STOPPED = Status.FAILED, Status.FINISHED, Status.STOPPED

ROOT = Path(__file__).resolve().parents[1]
# the module, not the function that fitcore/__init__.py exports under the same name
train_mod = importlib.import_module("fitcore.strategies.dataparallel.train")
TOL = 2e-2  # learned parameters vs torch.linalg.lstsq after a tiny full-batch Adam run


# -- helpers ---------------------------------------------------------------------------------------------
def tiny(**kw) -> FitConfig:
    """A run of a fraction of a second that ends near the least-squares answer."""
    base = dict(data_size=64, batch_size=64, epochs=200, lr=0.5)
    return FitConfig(**{**base, **kw})


def long_run(**kw) -> FitConfig:
    """A run that only ends when it is stopped (or hits a limit)."""
    return tiny(epochs=10_000, **kw)


def child_pids() -> set[int]:
    """Processes whose parent is this one (a run must not leave one behind)."""
    me, kids = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # the name in parentheses may hold spaces: the parent pid is 2 fields after the ')'
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == me:
                kids.add(int(entry))
    return kids


@pytest.fixture(autouse=True)
def leaves_nothing_behind():
    """Every test here must end with no new fitcore thread alive and no new child process."""
    threads_before, kids_before = set(threading.enumerate()), child_pids()
    yield
    new = [t for t in threading.enumerate() if t not in threads_before and t.name.startswith("fitcore-")]
    for t in new:
        t.join(10)
    alive = [t.name for t in new if t.is_alive()]
    assert alive == [], f"threads left running: {alive}"
    assert child_pids() - kids_before == set()


@pytest.fixture
def make_pool():
    pools = []

    def make(**kw) -> RunPool:
        pool = RunPool(**kw)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.shutdown()


class Gauge:
    """Counts trainers inside their loop at this moment, and the most there ever were."""

    def __init__(self):
        self.lock = threading.Condition()
        self.now = self.most = self.calls = 0

    def trainer(self, steps: int, hold_until: int = 0):
        """A trainer of `steps` short steps; first it waits until `hold_until` trainers are inside at once."""

        def fake_train(cfg, on_event, control, plan=None) -> RunEnded:
            with self.lock:
                self.now += 1
                self.calls += 1
                self.most = max(self.most, self.now)
                self.lock.notify_all()
                # `most`, not `now`: by the time a held trainer wakes, another may have finished already
                self.lock.wait_for(lambda: self.most >= hold_until, timeout=30)
            status, message, done = FINISHED, "finished", 0
            try:
                while done < steps:
                    if not control.wait():
                        status, message = STOPPED, control.stop_reason
                        break
                    time.sleep(0.0005)
                    done += 1
            finally:
                with self.lock:
                    self.now -= 1
                    self.lock.notify_all()
            ended = RunEnded(status, message, done, (0.0,), 0.0, None, 0.0)
            on_event(ended)
            return ended

        return fake_train


def assert_near_lstsq(snap) -> None:
    assert snap.status == FINISHED, snap.message
    assert snap.step == snap.total_steps
    for w, ref in zip(snap.weights, snap.lstsq_weights, strict=True):
        assert abs(w - ref) < TOL
    assert abs(snap.bias - snap.lstsq_bias) < TOL


def run_of(pool: RunPool, owner: str, run_id: str) -> Run:
    return pool._get(owner, run_id)


def wait_ended(pool: RunPool, owner: str, run_id: str, timeout: float = 20.0):
    """Wait for the run to end, reading it like a page would; return its last snapshot."""
    run = run_of(pool, owner, run_id)
    assert run.wait(timeout), f"{run_id} did not end within {timeout} s"
    return pool.snapshot(owner, run_id)


def open_fds() -> collections.Counter:
    """This process's open file descriptors, by kind: files, pipes, sockets, anon_inode:[eventpoll]..."""
    kinds: collections.Counter = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        kinds["file" if target.startswith("/") else target.split(":[")[0].split("[")[0]] += 1
    return kinds


@pytest.fixture(scope="module")
def rank_servers():
    """The forkserver that starts ranks, and multiprocessing's resource tracker: started once per server
    process and kept (module-scoped, so that leaves_nothing_behind counts them as there before)."""
    from multiprocessing import resource_tracker

    from fitcore.engine import warmstart

    warmstart.context()
    resource_tracker.ensure_running()


@pytest.mark.slow  # 20 runs of 2 spawned ranks: about 15 s on 2 cores
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_ranked_runs_leave_no_file_descriptor_open_in_the_server(rank_servers, make_pool, strategy):
    """The pool's process is the server's: 10 runs of a ranked strategy leave its descriptors as they were
    after the first (which starts the warm-start server once)."""
    pool = make_pool()
    cfg = tiny(strategy=strategy, devices="cpu", workers=2, epochs=3, data_size=20, batch_size=10)
    counts = []
    for _ in range(10):
        snap = pool.submit("teacher", cfg, pace=None)
        assert wait_ended(pool, "teacher", snap.run_id, timeout=60).status == FINISHED
        gc.collect()
        counts.append(open_fds())
    assert counts[-1] == counts[0], counts


# -- 1. concurrency ---------------------------------------------------------------------------------
WARM_UP = 1000  # seeds from here on are the warm-up's; the sessions draw theirs below it


def test_many_threads_racing_never_train_beyond_the_cap(make_pool, fake_clock):
    """12 sessions race submit / read / pause / resume / stop / reset / reap while the reaper runs."""
    cap, gauge, clock, made = 3, Gauge(), fake_clock, []
    lock = threading.Lock()

    def factory(cfg, **kw):
        hold = cap if cfg.seed >= WARM_UP else 0
        run = Run(cfg, trainer=gauge.trainer(steps=5 + cfg.seed % 25, hold_until=hold), **kw)
        with lock:
            made.append(run)
        return run

    pool = make_pool(
        settings=PoolSettings(max_active=cap, idle_timeout=5.0),
        clock=clock,
        reap_interval=0.002,
        run_factory=factory,
    )
    # first the cap is reached on purpose, whatever the scheduler does: cap runs whose trainers wait until
    # all cap train at once (the race alone reaches it only by luck)
    for k in range(cap):
        pool.submit("warm-up", tiny(seed=WARM_UP + k))
    assert all([run.wait(30) for run in made]) and gauge.most == cap
    start, errors, ids_by_owner = threading.Barrier(12), [], {}

    def session(i: int) -> None:
        rng, owner, mine = random.Random(i), f"student-{i}", []
        ids_by_owner[owner] = mine
        start.wait()
        try:
            for _ in range(60):
                op = rng.choice(["submit"] * 3 + ["read"] * 3 + ["pause", "resume", "stop", "forget", "reap"])
                if op == "submit" or not mine:
                    mine.append(pool.submit(owner, tiny(seed=rng.randrange(1000))).run_id)
                elif op == "reap":
                    pool.reap()
                    clock.advance(rng.choice([0.0, 1.0, 3.0]))
                else:
                    run_id = rng.choice(mine)
                    try:
                        if op == "read":
                            assert pool.snapshot(owner, run_id).run_id == run_id
                        else:
                            getattr(pool, op)(owner, run_id)
                    except RunNotFound:
                        pass  # reaped or reset meanwhile: the page shows its last snapshot
                # another session's run is never acknowledged
                other = ids_by_owner.get(f"student-{(i + 1) % 12}")
                if other:
                    with pytest.raises(RunNotFound):
                        pool.snapshot(owner, other[0])
                c = pool.counts()
                assert c["active"] <= cap and c["max_active_seen"] <= cap
                assert c["queued"] <= c["kept"]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert pool.shutdown()  # every run's thread ended, those reset or reaped a moment ago too

    assert all(run.done and run.ended for run in made)
    assert gauge.now == 0
    assert gauge.most == cap  # the cap was reached, and never passed
    assert pool.counts()["max_active_seen"] == cap
    assert pool.counts()["active"] == 0 and pool.counts()["queued"] == 0
    started = [run for run in made if run.thread is not None]
    assert gauge.calls == len(started)  # a run trains only through the pool's start
    for run in made:
        if run.thread is None:  # stopped, reset or reaped while it waited
            snap = run.snapshot()
            assert snap.status == STOPPED and str(snap.message).endswith("before it started"), snap.message


def test_real_runs_queue_behind_the_cap_and_all_reach_lstsq(make_pool):
    pool = make_pool(settings=PoolSettings(max_active=2))
    snaps = [pool.submit(f"student-{i}", tiny(seed=i, noise=0.1)) for i in range(6)]
    assert [s.queue_position for s in snaps] == [None, None, 1, 2, 3, 4]
    assert "waiting: 4 runs ahead" in str(snaps[-1].message) and "2 train at once" in str(snaps[-1].message)
    for i, s in enumerate(snaps):
        assert_near_lstsq(wait_ended(pool, f"student-{i}", s.run_id))
    assert pool.counts() == {"active": 0, "queued": 0, "kept": 6, "max_active_seen": 2}


def test_one_session_cannot_see_or_touch_another_sessions_run(make_pool):
    pool = make_pool(settings=PoolSettings(max_active=2))
    mine = pool.submit("alice", long_run(), pace=50).run_id
    for call in ("snapshot", "pause", "resume", "stop", "forget"):
        with pytest.raises(RunNotFound):
            getattr(pool, call)("bob", mine)
    with pytest.raises(RunNotFound):
        pool.set_pace("bob", mine, None)
    snap = pool.snapshot("alice", mine)
    assert snap.status == "running" and pool.counts()["kept"] == 1
    pool.stop("alice", mine)
    assert wait_ended(pool, "alice", mine).status == STOPPED


def test_reaping_frees_what_nobody_reads_and_keeps_what_is_read(make_pool, fake_clock):
    clock, gauge = fake_clock, Gauge()
    pool = make_pool(
        settings=PoolSettings(max_active=1, idle_timeout=60.0),
        clock=clock,
        reap_interval=3600,  # the test reaps by hand
        run_factory=lambda cfg, **kw: Run(cfg, trainer=gauge.trainer(steps=10**9), **kw),
    )
    a = pool.submit("alice", tiny()).run_id  # trains
    b = pool.submit("bob", tiny()).run_id  # waits behind it
    run_a = run_of(pool, "alice", a)
    wait_for(lambda: gauge.now == 1, timeout=10, what="alice's run to train")

    clock.advance(30)
    assert pool.reap() == []
    pool.snapshot("alice", a)  # alice's tab is open; bob's was closed
    clock.advance(40)
    assert pool.reap() == [b]
    with pytest.raises(RunNotFound):
        pool.snapshot("bob", b)
    assert pool.counts() == {"active": 1, "queued": 0, "kept": 1, "max_active_seen": 1}

    clock.advance(61)
    assert pool.reap() == [a]
    assert run_a.wait(10)
    run_a.thread.join(10)
    assert not run_a.thread.is_alive()
    snap = run_a.snapshot()
    assert snap.status == STOPPED
    assert str(snap.message) == "stopped: its page was closed (not read for 60 s)"
    assert pool.counts() == {"active": 0, "queued": 0, "kept": 0, "max_active_seen": 1}


def test_the_reaper_thread_stops_a_closed_tab_within_its_timeout(make_pool):
    pool = make_pool(settings=PoolSettings(max_active=4, idle_timeout=0.3), reap_interval=0.05)
    closed = pool.submit("closed-tab", long_run(), pace=100).run_id
    run_closed = run_of(pool, "closed-tab", closed)
    open_tab = pool.submit("open-tab", long_run(), pace=100).run_id

    def closed_tab_reaped() -> bool:
        assert pool.snapshot("open-tab", open_tab).active  # read every 50 ms: kept alive
        return run_closed.done

    wait_for(closed_tab_reaped, timeout=10, interval=0.05, what="the closed tab's run to be stopped")
    assert "its page was closed (not read for 0.3 s)" in str(run_closed.snapshot().message)
    assert pool.snapshot("open-tab", open_tab).status == "running"
    assert pool.counts()["kept"] == 1


# -- 2. limits ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cfg, field, bound, server_only",
    [
        (FitConfig(data_size=1_000_001, batch_size=1000, epochs=1), "data_size", "1000000", True),
        (FitConfig(epochs=10_001), "epochs", "10000", True),
        (FitConfig(data_size=1000, batch_size=1, epochs=1001), "epochs", "at most 1000000 steps", False),
        (FitConfig(weights=(1.0,) * 17), "weights", "1 to 16 numbers", False),
    ],
    ids=["data_size", "epochs", "steps", "features"],
)
def test_classroom_limits_refuse_before_any_tensor(make_pool, monkeypatch, cfg, field, bound, server_only):
    made = []
    monkeypatch.setattr(train_mod, "make_data", lambda *a, **k: made.append("tensor") or 1 / 0)
    pool = make_pool(run_factory=lambda *a, **k: made.append("run") or 1 / 0)
    with pytest.raises(ConfigError) as err:
        pool.submit("student", cfg)
    assert err.value.field == field and bound in str(err.value)
    assert made == [] and pool.counts()["kept"] == 0
    if server_only:
        validate(cfg)  # the same config passes without the classroom's bounds (memory allowing)


def test_environment_sets_the_bounds(make_pool):
    env = {
        "FITCORE_MAX_ACTIVE_RUNS": "2",
        "FITCORE_IDLE_TIMEOUT": "10",
        "FITCORE_MAX_DATA_SIZE": "100",
        "FITCORE_MAX_EPOCHS": "50",
        "FITCORE_MAX_STEPS": "60",
        "FITCORE_MAX_SECONDS": "1.5",
        "FITCORE_MAX_FEATURES": "3",
    }
    s = PoolSettings.from_env(env)
    assert (s.max_active, s.idle_timeout) == (2, 10.0)
    assert (s.limits.max_data_size, s.limits.max_epochs, s.limits.max_steps) == (100, 50, 60)
    assert (s.limits.max_seconds, s.limits.max_features) == (1.5, 3)
    assert PoolSettings.from_env({}) == PoolSettings()
    pool = make_pool(settings=s)
    for cfg, field, text in [
        (FitConfig(data_size=101, batch_size=101), "data_size", "from 1 to 100"),
        (FitConfig(data_size=100, batch_size=100, epochs=51), "epochs", "from 1 to 50"),
        (FitConfig(data_size=100, batch_size=50, epochs=31), "epochs", "at most 60 steps"),
        (FitConfig(weights=(1, 2, 3, 4), data_size=100, batch_size=100, epochs=5), "weights", "1 to 3"),
    ]:
        with pytest.raises(ConfigError) as err:
            pool.submit("student", cfg)
        assert err.value.field == field and text in str(err.value)
    assert pool.counts()["kept"] == 0


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "nan", "1.5e", " ", "١٢", "１", "1_000"])
@pytest.mark.parametrize("name", ["FITCORE_MAX_ACTIVE_RUNS", "FITCORE_IDLE_TIMEOUT", "FITCORE_MAX_DATA_SIZE"])
def test_bad_environment_names_the_variable(name, raw):
    with pytest.raises(ConfigError) as err:
        PoolSettings.from_env({name: raw})
    assert str(err.value).startswith(f"{name}: got {raw!r}; allowed: a positive ")


def test_max_features_from_the_environment_stays_within_what_the_model_takes():
    with pytest.raises(ConfigError, match="FITCORE_MAX_FEATURES: got '17'; allowed: a positive int up to 16"):
        PoolSettings.from_env({"FITCORE_MAX_FEATURES": "17"})


def test_the_time_limit_counts_training_only_and_a_pause_has_a_longer_one_of_its_own(make_pool):
    """A teacher who pauses to explain longer than the time limit finds the run still there; a forgotten
    pause ends at its own limit and frees the slot."""
    limits = dataclasses.replace(CLASSROOM_LIMITS, max_seconds=0.3, max_paused_seconds=1.2)
    pool = make_pool(settings=PoolSettings(limits=limits))
    running = pool.submit("a", long_run(), pace=50).run_id
    paused = pool.submit("b", long_run(), pace=50).run_id
    wait_for(lambda: pool.snapshot("b", paused).step >= 2, 10, what="b's first steps")
    pool.pause("b", paused)
    snap = wait_ended(pool, "a", running)
    assert snap.status == STOPPED and 0 < snap.step < snap.total_steps
    assert str(snap.message) == "stopped at the time limit of 0.3 s of training (pauses not counted)"
    time.sleep(0.6)  # b: paused past the run's limit of training time, which a pause does not use up
    held = pool.snapshot("b", paused)
    assert held.status == Status.PAUSED and held.limit[0] == "pause" and 0 < held.limit[2] < 1.2
    pool.resume("b", paused)  # and it trains on after the pause
    wait_for(lambda: pool.snapshot("b", paused).step > held.step, 10, what="b to train after its pause")
    pool.pause("b", paused)
    snap = wait_ended(pool, "b", paused)
    assert snap.status == STOPPED and snap.step < snap.total_steps
    assert str(snap.message) in (
        "stopped after a pause of 1.2 s, the longest the server keeps a paused run",
        "stopped at the time limit of 0.3 s of training (pauses not counted)",  # b trained its 0.3 s first
    )
    assert pool.counts()["active"] == 0


@pytest.mark.parametrize(
    "limit, said",
    [
        (("run", 600.0, 59.2), "stops in 60 s: the server lets a run train 600 s"),
        (("pause", 3600.0, 12.0), "stops in 12 s: the server keeps a paused run 3600 s"),
        (("run", 600.0, 61.0), None),  # more than a minute left: nothing said yet
    ],
)
def test_the_status_line_says_a_minute_before_a_time_limit_stops_the_run(limit, said):
    snap = Snapshot(run_id="run-1", status=Status.RUNNING, message=Text("run.message.starting"),
                    config=FitConfig(), step=3, total_steps=200, limit=limit)  # fmt: skip
    line = status_line(snap)
    assert (said in line) if said else "stops in" not in line


def test_server_config_keeps_xsrf_on_and_usage_statistics_off():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["enableXsrfProtection"] is True
    assert config["browser"]["gatherUsageStats"] is False
    assert config["server"]["headless"] is True
    assert config["client"]["showErrorDetails"] == "type"  # a page error names no server path


# -- 3. faults --------------------------------------------------------------------------------------
@pytest.fixture
def faults(monkeypatch):
    """Inject failures into chosen runs only: by seed (make_data) or by feature count (inside the loop)."""
    real_make_data, real_step = train_mod.make_data, train_mod.Step
    seen_steps: dict[int, int] = {}

    def make_data(cfg, device="cpu"):
        if cfg.seed == 13:
            raise RuntimeError("injected failure while making the data")
        return real_make_data(cfg, device)

    def step(*fields):  # Step(step, epoch, batch, loss, input_shape, ...), made once a step
        d = fields[4][1]
        if d in (3, 4):
            seen_steps[d] = seen_steps.get(d, 0) + 1
            if seen_steps[d] == 3:  # the third step of the loop
                if d == 3:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
                raise MemoryError()
        return real_step(*fields)

    monkeypatch.setattr(train_mod, "make_data", make_data)
    monkeypatch.setattr(train_mod, "Step", step)


def test_faults_end_their_runs_and_the_pool_keeps_serving_others(make_pool, faults):
    pool = make_pool(settings=PoolSettings(max_active=4))
    healthy = pool.submit("healthy", tiny(epochs=400, noise=0.2, seed=1)).run_id
    broken = pool.submit("broken", tiny(seed=13)).run_id
    oom = pool.submit("oom", tiny(weights=(1.0, 2.0, 3.0))).run_id
    no_ram = pool.submit("no-ram", tiny(weights=(1.0, 2.0, 3.0, 4.0))).run_id
    diverging = pool.submit("diverging", tiny(lr=1e4, optimizer="sgd", batch_size=16)).run_id
    paused = pool.submit("paused", long_run(), pace=50).run_id
    watch = PauseWatch(run_of(pool, "paused", paused).control)
    pool.pause("paused", paused)

    snap = wait_ended(pool, "broken", broken)
    message = str(snap.message)
    assert (snap.status, message) == (FAILED, "RuntimeError: injected failure while making the data")
    assert snap.step == 0

    snap = wait_ended(pool, "oom", oom)
    assert snap.status == FAILED and snap.step == 2
    message = str(snap.message)
    assert message.startswith("out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert message.endswith("Try a smaller data size or batch size.")

    snap = wait_ended(pool, "no-ram", no_ram)
    assert snap.status == FAILED and snap.step == 2
    message = str(snap.message)
    assert message.startswith("out of memory: MemoryError") and "smaller data size" in message

    snap = wait_ended(pool, "diverging", diverging)
    assert snap.status == "diverged" and snap.step < snap.total_steps
    assert "the learning rate 10000 is too high" in str(snap.message)

    wait_for(lambda: pool.snapshot("paused", paused).status == "paused", timeout=10, what="the pause")
    assert watch.held(1), "the paused run did not poll its pause"  # every step it was allowed is in
    held = pool.snapshot("paused", paused).step
    assert watch.held(2)  # two more polls (0.1 s) without a step
    assert pool.snapshot("paused", paused).step == held
    pool.stop("paused", paused)
    snap = wait_ended(pool, "paused", paused)
    assert (snap.status, str(snap.message), snap.step) == (STOPPED, "stopped by the user", held)

    assert_near_lstsq(wait_ended(pool, "healthy", healthy))
    # the slots were all given back: a new run starts at once and finishes
    after = pool.submit("latecomer", tiny(seed=2))
    assert after.queue_position is None
    assert_near_lstsq(wait_ended(pool, "latecomer", after.run_id))
    assert pool.counts()["active"] == 0


def test_a_trainer_that_raises_frees_its_slot_for_the_queue(make_pool):
    def broken_trainer(cfg, on_event, control, plan=None):
        raise ValueError("a bug in the trainer")

    pool = make_pool(
        settings=PoolSettings(max_active=1),
        run_factory=lambda cfg, **kw: Run(cfg, trainer=broken_trainer if cfg.seed == 99 else None, **kw),
    )
    bad = pool.submit("a", tiny(seed=99)).run_id
    good = pool.submit("b", tiny(seed=3))
    snap = wait_ended(pool, "a", bad)
    assert (snap.status, str(snap.message)) == (FAILED, "ValueError: a bug in the trainer")
    assert_near_lstsq(wait_ended(pool, "b", good.run_id))


# -- 4. bad input on the command line ---------------------------------------------------------------
# (flags, field named first in the message, fragment of what is allowed)
BAD_CLI = [
    (["--weights="], "weights", "1 to 16 numbers"),
    (["--weights=abc"], "weights", "1 to 16 numbers"),
    (["--weights=nan"], "weights", "finite numbers"),
    (["--weights", "1", "inf"], "weights", "finite numbers"),
    (["--weights=1e30"], "weights", "from -1000000 to 1000000"),
    (["--weights", *["1"] * 17], "weights", "1 to 16 numbers"),
    (["--bias="], "bias", "a number"),
    (["--bias=abc"], "bias", "a number"),
    (["--bias=nan"], "bias", "a finite number"),
    (["--bias=-inf"], "bias", "a finite number"),
    (["--bias=1e30"], "bias", "from -1000000 to 1000000"),
    (["--noise="], "noise", "a number"),
    (["--noise=-1"], "noise", "from 0 to 1000000"),
    (["--noise=nan"], "noise", "a finite number"),
    (["--noise=inf"], "noise", "a finite number"),
    (["--noise=1e30"], "noise", "from 0 to 1000000"),
    (["--data-size="], "data_size", "an integer"),
    (["--data-size=abc"], "data_size", "an integer"),
    (["--data-size=-1"], "data_size", "an integer 1 or more"),
    (["--data-size=0"], "data_size", "an integer 1 or more"),
    (["--data-size=1.5"], "data_size", "an integer"),
    (["--data-size=nan"], "data_size", "an integer"),
    (["--data-size=inf"], "data_size", "an integer"),
    (["--data-size=1e15", "--batch-size=10"], "data_size", "rows with 2 features here"),
    (["--batch-size="], "batch_size", "an integer"),
    (["--batch-size=abc"], "batch_size", "an integer"),
    (["--batch-size=-1"], "batch_size", "from 1 to 200 (the data size)"),
    (["--batch-size=0"], "batch_size", "from 1 to 200 (the data size)"),
    (["--batch-size=201"], "batch_size", "from 1 to 200 (the data size)"),
    (["--batch-size=1e30"], "batch_size", "from 1 to 200 (the data size)"),
    (["--batch-size=nan"], "batch_size", "an integer"),
    (["--epochs="], "epochs", "an integer"),
    (["--epochs=abc"], "epochs", "an integer"),
    (["--epochs=-1"], "epochs", "an integer 1 or more"),
    (["--epochs=0"], "epochs", "an integer 1 or more"),
    (["--epochs=2.5"], "epochs", "an integer"),
    (["--epochs=inf"], "epochs", "an integer"),
    (["--lr="], "lr", "a number"),
    (["--lr=abc"], "lr", "a number"),
    (["--lr=-1"], "lr", "greater than 0"),
    (["--lr=0"], "lr", "greater than 0"),
    (["--lr=nan"], "lr", "a finite number greater than 0"),
    (["--lr=inf"], "lr", "a finite number greater than 0"),
    (["--optimizer="], "optimizer", "adam or sgd"),
    (["--optimizer=adamw"], "optimizer", "adam or sgd"),
    (["--optimizer=0"], "optimizer", "adam or sgd"),
    (["--seed="], "seed", "an integer"),
    (["--seed=abc"], "seed", "an integer"),
    (["--seed=-1"], "seed", "from 0 to 9223372036854775807"),
    (["--seed=1.5"], "seed", "an integer"),
    (["--seed=nan"], "seed", "an integer"),
    (["--seed=1e30"], "seed", "from 0 to 9223372036854775807"),
    (["--seed=9223372036854775808"], "seed", "from 0 to 9223372036854775807"),
    (["--devices="], "devices", "cpu, virtual:K (K from 1 to 8)"),
    (["--devices=gpu"], "devices", "cpu, virtual:K (K from 1 to 8)"),
    (["--devices=virtual:0"], "devices", "K from 1 to 8"),
    (["--devices=virtual:-1"], "devices", "K from 1 to 8"),
    (["--devices=virtual:9"], "devices", "K from 1 to 8"),
    (["--devices=virtual:abc"], "devices", "K from 1 to 8"),
    (["--devices=virtual:nan"], "devices", "K from 1 to 8"),
    (["--devices=virtual:1e30"], "devices", "K from 1 to 8"),
    (["--devices=cuda:99"], "devices", "cpu, virtual:K"),
    (["--devices=cuda:-1"], "devices", "cpu, virtual:K"),
    (
        ["--devices=virtual:8", "--data-size=5", "--batch-size=5"],
        "devices",
        "as many devices as data rows (5)",
    ),
    (["--strategy="], "strategy", "dataparallel or ddp"),
    (["--strategy=nccl"], "strategy", "dataparallel or ddp"),
    (["--strategy=ddp", "--workers="], "workers", "an integer"),
    (["--strategy=ddp", "--workers=abc"], "workers", "an integer"),
    (["--strategy=ddp", "--workers=0"], "workers", "from 1 to 8"),
    (["--strategy=dataparallel", "--workers=0"], "workers", "from 1 to 8"),  # unused there, still a count
    (["--epochs=1e30"], "epochs", "at most 1000000 steps and 1000000000 rows through the model in all"),
    (["--strategy=ddp", "--workers=-1"], "workers", "from 1 to 8"),
    (["--strategy=ddp", "--workers=9"], "workers", "from 1 to 8"),
    (["--strategy=ddp", "--workers=nan"], "workers", "an integer"),
    (["--strategy=ddp", "--workers=1e30"], "workers", "from 1 to 8"),
    (["--strategy=ddp", "--workers=4", "--data-size=3", "--batch-size=3"], "workers", "from 1 to 3"),
    (["--print-every=0"], "print_every", "an integer 1 or more"),
    (["--print-every=abc"], "--print-every", "got 'abc'; allowed: an integer 1 or more"),
    (["--bias"], "--bias", "expected one argument"),
    (["--weights"], "--weights", "expected at least one argument"),
    (["--no-such-flag=1"], "--no-such-flag", "unrecognized arguments"),
]


@pytest.fixture
def no_training(monkeypatch):
    """Fail loudly if the command line gets as far as training."""
    started = []

    def trainer_for(cfg):
        started.append(cfg)
        raise AssertionError("bad input must not start a run")

    monkeypatch.setattr(cli, "trainer_for", trainer_for)
    return started


@pytest.mark.parametrize("argv, field, allowed", BAD_CLI, ids=[" ".join(row[0])[:60] for row in BAD_CLI])
def test_bad_cli_input_is_one_line_naming_the_field(capsys, no_training, argv, field, allowed):
    with pytest.raises(SystemExit) as exited:
        sys.exit(cli.main(argv))  # argparse's own errors exit from inside main
    out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert out == "" and no_training == []
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("fitcore: error: ")
    flag = field if field.startswith("--") else "--" + field.replace("_", "-")
    assert flag in err and allowed in err
    if not field.startswith("--"):  # a setting: the message starts with its flag and the value given
        assert err.startswith(f"fitcore: error: {flag}: got ")


# values that look odd but are fine on the command line (the server bounds some of them: see above)
GOOD_CLI = [
    (["--weights", "-1", "0"], "weights", (-1.0, 0.0)),
    (["--bias=-1"], "bias", -1.0),
    (["--bias=0"], "bias", 0.0),
    (["--noise=0"], "noise", 0.0),
    (["--seed=0"], "seed", 0),
    (["--lr=1e30"], "lr", 1e30),  # allowed, and ends as 'diverged' with a message naming the lr
    (["--data-size=1e3", "--batch-size=1e3"], "data_size", 1000),
]


@pytest.mark.parametrize("argv, field, value", GOOD_CLI, ids=[" ".join(row[0]) for row in GOOD_CLI])
def test_odd_but_valid_cli_input_is_accepted(argv, field, value):
    cfg = cli.config_from_args(cli.build_parser().parse_args(argv))
    assert getattr(cfg, field) == value


@pytest.mark.parametrize(
    "argv",
    [["--lr=nan"], ["--devices=virtual:8", "--data-size=5", "--batch-size=5"]],
    ids=["nan", "devices"],
)
def test_bad_cli_input_in_a_real_process(argv):
    proc = subprocess.run(
        [sys.executable, "-m", "fitcore", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("fitcore: error: ")


@pytest.mark.slow  # a real server: about 6 s
def test_sigterm_ends_the_server_as_ctrl_c_does_and_removes_the_uploads_folder(tmp_path):
    """A service manager stops the server with SIGTERM: the run recorded into the uploads folder is removed
    with it, as on Ctrl-C (streamlit_app stops its server with SIGTERM)."""
    import asyncio

    from benchmarks.browser import streamlit_app
    from benchmarks.session_client import Session, new_owner

    async def one_run(url: str) -> None:
        session = Session(url, "epochs=3&pace=max", owner=new_owner())
        await session.open()
        await session.click("Start training")  # the page records every run into the uploads folder
        await session.close()

    temp = tmp_path / "tmp"
    temp.mkdir()
    with streamlit_app(tmp_path / "server.log", env={"TMPDIR": str(temp)}) as app:
        asyncio.run(one_run(app.url))
        wait_for(lambda: list(temp.glob("fitcore-uploads-*/**/*.fitrec")), 30, what="the run's recording")
        assert len(list(temp.glob("fitcore-uploads-*"))) == 1
    assert list(temp.glob("fitcore-uploads-*")) == []  # (torch's own compile cache may stay there)
