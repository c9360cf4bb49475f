"""A run in a background thread: its snapshots, bounded history, pause / resume / stop, and failures."""

from __future__ import annotations

import dataclasses
import importlib
import threading

import pytest

from fitcore.core.config import FitConfig, validate
from fitcore.core.events import RunEnded, RunStarted, Step
from fitcore.runs.runner import History, Run, Snapshot
from fitcore.strategies.dataparallel.train import train
from tests.helpers import PauseWatch, wait_for

train_mod = importlib.import_module("fitcore.strategies.dataparallel.train")  # the module, not its function

pytestmark = pytest.mark.usefixtures("no_leftover_threads")


def make_run(**kwargs) -> Run:
    cfg = validate(FitConfig(**kwargs.pop("cfg", {})), gpus=[])
    return Run(cfg, **kwargs)


def finish(run: Run) -> Snapshot:
    assert run.wait(60), "the run did not end"
    run.thread.join(10)
    assert not run.thread.is_alive()
    return run.snapshot()


# -- History --------------------------------------------------------------------------------------------


def test_history_keeps_everything_below_its_bound():
    h = History(max_points=100)
    for s in range(1, 100):
        h.add(s, (float(s),))
    assert [p[0] for p in h.points()] == list(range(1, 100)) and h.stride == 1


def test_history_of_a_million_points_stays_bounded():
    h = History(max_points=100)
    for s in range(1, 1_000_001):
        h.add(s, (s * 0.5,))
    points = h.points()
    steps = [p[0] for p in points]
    assert len(points) <= 101
    assert steps[0] == 1 and steps[-1] == 1_000_000
    assert points[-1] == (1_000_000, (500_000.0,))
    assert steps == sorted(set(steps))
    # every kept point but the latest sits on the stride, a power of two
    assert h.stride & (h.stride - 1) == 0 and h.stride >= 1_000_000 // 100
    assert all((s - 1) % h.stride == 0 for s in steps[:-1])


@pytest.mark.parametrize("max_points, n", [(2, 10), (10, 1000), (7, 50), (200, 20_000)])
def test_history_bound_table(max_points, n):
    h = History(max_points=max_points)
    for s in range(1, n + 1):
        h.add(s, (0.0,))
    steps = [p[0] for p in h.points()]
    assert len(steps) <= max_points + 1 and steps[0] == 1 and steps[-1] == n


# -- a real run -----------------------------------------------------------------------------------------


def test_a_run_finishes_and_its_snapshot_says_what_it_learned():
    run = make_run(cfg={"devices": "virtual:3", "epochs": 200}).start()
    snap = finish(run)
    assert snap.status == "finished" and not snap.active
    assert (snap.step, snap.total_steps, snap.epoch, snap.progress) == (200, 200, 200, 1.0)
    assert snap.devices == tuple(f"virtual:{i} (emulated on CPU)" for i in range(3))
    assert snap.emulated and not snap.data_parallel and snap.header.startswith("Emulating 3 devices")
    assert max(abs(a - b) for a, b in zip(snap.weights, snap.lstsq_weights)) < 1e-3
    assert abs(snap.bias - snap.lstsq_bias) < 1e-3
    assert snap.final_loss == snap.latest.loss and snap.final_loss < 1e-3
    assert [r.rows for r in snap.latest.replicas] == [67, 67, 66]
    assert [s.step for s in snap.recent] == [196, 197, 198, 199, 200]
    assert snap.loss_history[0][0] == 1 and snap.loss_history[-1] == (200, snap.final_loss)
    assert snap.param_history[-1] == (200, snap.weights + (snap.bias,))
    assert snap.steps_per_second > 0 and str(snap.message).startswith("finished 200 steps")
    assert run.done and run.wait(0)


def test_snapshot_before_start():
    run = make_run()
    snap = run.snapshot()
    assert (snap.status, str(snap.message), snap.step, snap.weights, snap.bias) == (
        "queued",
        "waiting to start",
        0,
        (),
        None,
    )
    assert snap.active and snap.progress == 0.0 and snap.total_steps == 200
    run.stop()


def test_snapshots_are_frozen_copies():
    run = make_run(cfg={"epochs": 3000, "data_size": 20, "batch_size": 20, "devices": "cpu"}, pace=500)
    run.start()
    wait_for(lambda: run.snapshot().step >= 10)
    first = run.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.status = "finished"
    first.extra["mine"] = 1  # a caller's dict, not the run's
    kept = (first.step, first.loss_history, first.param_history, first.recent)
    wait_for(lambda: run.snapshot().step >= first.step + 10)
    second = run.snapshot()
    assert second is not first and "mine" not in second.extra
    assert (first.step, first.loss_history, first.param_history, first.recent) == kept
    assert isinstance(first.loss_history, tuple) and isinstance(first.recent, tuple)
    assert second.step > first.step and len(second.loss_history) > len(first.loss_history)
    run.stop()
    assert finish(run).status == "stopped"


def _step(n: int, d: int = 2) -> Step:
    return Step(n, 1, n, 1.0 / n, (4, d), (4, 1), (), (0.5,) * d, 0.25, n * 1e-4)


def test_snapshot_histories_of_a_long_run_are_bounded():
    total = 20_000

    def trainer(cfg, on_event, control, plan=None):
        on_event(
            RunStarted(cfg, ("cpu",), False, False, "Using the CPU (1 device).", total, 1, (5.2, 9.6), 3.4)
        )
        for n in range(1, total + 1):
            on_event(_step(n))
        ended = RunEnded("finished", "done", total, (0.5, 0.5), 0.25, 1.0 / total, 2.0)
        on_event(ended)
        return ended

    run = make_run(cfg={"epochs": total}, history_points=200, trainer=trainer).start()
    snap = finish(run)
    assert snap.status == "finished" and snap.step == total
    loss_steps = [s for s, _ in snap.loss_history]
    param_steps = [s for s, _ in snap.param_history]
    assert len(loss_steps) <= 201 and len(param_steps) <= 101
    assert loss_steps[0] == param_steps[0] == 1 and loss_steps[-1] == param_steps[-1] == total
    assert snap.loss_history[-1] == (total, 1.0 / total)
    assert [s.step for s in snap.recent] == list(range(total - 4, total + 1))
    assert snap.steps_per_second == total / 2.0  # from RunEnded: steps / elapsed


def test_the_message_of_a_running_snapshot_names_its_latest_step():
    started, emitted, go_on, finish_now = (threading.Event() for _ in range(4))

    def trainer(cfg, on_event, control, plan=None):
        on_event(RunStarted(cfg, ("cpu",), False, False, "Using the CPU (1 device).", 9, 3, (5.2, 9.6), 3.4))
        started.set()
        go_on.wait(30)
        for n in (1, 2, 3, 4):  # 3 batches an epoch: step 4 is the first of epoch 2
            epoch, batch = divmod(n - 1, 3)
            on_event(Step(n, epoch + 1, batch + 1, 1.0, (4, 2), (4, 1), (), (0.5, 0.5), 0.2, 0.1))
        emitted.set()
        finish_now.wait(30)
        ended = RunEnded("stopped", "stopped by the user", 4, (0.5, 0.5), 0.2, 1.0, 0.1)
        on_event(ended)
        return ended

    run = make_run(cfg={"epochs": 3}, trainer=trainer).start()
    assert started.wait(30)
    assert (run.snapshot().status, str(run.snapshot().message)) == ("running", "training")
    go_on.set()
    assert emitted.wait(30)
    assert (run.snapshot().status, str(run.snapshot().message)) == ("running", "epoch 2, step 4")
    run.pause()
    assert str(run.snapshot().message) == "paused between steps"
    finish_now.set()
    assert str(finish(run).message) == "stopped by the user"


def test_a_real_run_of_3000_steps_keeps_at_most_history_points():
    run = make_run(cfg={"data_size": 10, "batch_size": 1, "epochs": 300, "devices": "cpu"}, history_points=50)
    snap = finish(run.start())
    assert snap.step == 3000
    assert len(snap.loss_history) <= 51 and len(snap.param_history) <= 26
    assert snap.loss_history[0][0] == 1 and snap.loss_history[-1][0] == 3000


# -- pause, resume, stop --------------------------------------------------------------------------------


def pausing_at(n: int):
    """The real trainer, paused from inside the event of step n, so that no step is in flight after it.

    `reached` is set once it has paused; `watches` then holds the PauseWatch on its Control.
    """
    reached, watches = threading.Event(), []

    def trainer(cfg, on_event, control, plan=None):
        def on_step(event):
            on_event(event)
            if isinstance(event, Step) and event.step == n:
                watches.append(PauseWatch(control))
                control.pause()
                reached.set()

        return train(cfg, on_step, control, plan=plan)

    return trainer, reached, watches


def test_a_pause_during_a_step_says_paused_once_that_step_has_ended():
    # the status is the run's: Pause came while step 3 was under way, so the run says it is running until
    # step 3 has ended and it holds; then it says paused, at step 3, and takes no step more
    inside, finish_step = threading.Event(), threading.Event()

    def trainer(cfg, on_event, control, plan=None):
        def on_step(event):
            on_event(event)
            if isinstance(event, Step) and event.step == 3:
                inside.set()
                finish_step.wait(30)  # step 3 is still under way: its event is out, its end is not

        return train(cfg, on_step, control, plan=plan)

    run = make_run(cfg={"epochs": 60, "devices": "virtual:2"}, trainer=trainer).start()
    assert inside.wait(30)
    watch = PauseWatch(run.control)
    run.pause()
    snap = run.snapshot()
    assert (snap.status, snap.step) == ("running", 3)  # paused in the middle of step 3: not held yet
    assert run.control.paused and not run.control.holding
    finish_step.set()
    assert watch.held(2)
    snap = run.snapshot()
    assert (snap.status, str(snap.message), snap.step) == ("paused", "paused between steps", 3)
    run.stop()
    assert finish(run).step == 3


def test_pause_holds_the_step_and_resume_finishes():
    trainer, reached, watches = pausing_at(5)
    run = make_run(cfg={"epochs": 60, "devices": "virtual:2"}, trainer=trainer).start()
    assert reached.wait(30)
    assert watches[0].held(3), "the paused run did not poll its pause"  # held for 3 polls (0.15 s)
    snap = run.snapshot()
    assert (snap.status, str(snap.message), snap.step) == ("paused", "paused between steps", 5)
    assert snap.active and run.thread.is_alive()
    run.resume()
    snap = finish(run)
    assert (snap.status, snap.step) == ("finished", 60)


def test_steps_per_second_counts_running_time_only(fake_clock):
    """10 steps of 0.1 s, a pause of 60 s, 10 more: 10 steps/s during the run and after it, not 20 / 62 s."""
    paused_at, watches = set(), []

    def trainer(cfg, on_event, control, plan=None):
        def on_step(event):
            if isinstance(event, Step):
                fake_clock.advance(0.1)  # each step takes 0.1 s of the run's clock
            on_event(event)
            if isinstance(event, Step) and event.step in (10, 15):
                watches.append(PauseWatch(control))
                control.pause()
                paused_at.add(event.step)

        return train(cfg, on_step, control, clock=fake_clock, plan=plan)

    cfg = {"epochs": 20, "data_size": 10, "batch_size": 10, "devices": "cpu"}
    run = make_run(cfg=cfg, clock=fake_clock, trainer=trainer).start()
    wait_for(lambda: 10 in paused_at and watches[0].held(1))  # inside the pause: its start is on the clock
    fake_clock.advance(60)
    run.resume()
    wait_for(lambda: 15 in paused_at and watches[1].held(1))
    snap = run.snapshot()
    assert (snap.step, snap.status) == (15, "paused")
    assert snap.steps_per_second == pytest.approx(10.0)  # steps 1..15 over 1.4 s of running, not 61.4 s
    run.resume()
    snap = finish(run)
    assert snap.steps_per_second == pytest.approx(10.0)  # 20 steps over 62 s, 60 of them paused
    assert str(snap.message) == "finished 20 steps in 62.00 s (60.0 s of it paused)"


def test_stop_while_paused():
    trainer, reached, _ = pausing_at(2)
    run = make_run(cfg={"epochs": 1000, "devices": "virtual:2"}, trainer=trainer).start()
    assert reached.wait(30)
    run.stop()
    snap = finish(run)
    assert (snap.status, str(snap.message), snap.step) == ("stopped", "stopped by the user", 2)


def test_set_pace_is_shown_and_applied():
    run = make_run(cfg={"epochs": 100000, "data_size": 10, "batch_size": 10, "devices": "cpu"}, pace=1000)
    run.start()
    run.set_pace(5.0)
    assert run.snapshot().pace == 5.0
    run.set_pace(None)
    assert run.snapshot().pace is None
    run.stop("done here")
    assert str(finish(run).message) == "done here"


def test_stop_a_run_that_never_started():
    done = []
    run = make_run(on_done=done.append)
    run.stop()
    assert run.done and run.wait(0) and run.thread is None and done == [run]
    snap = run.snapshot()
    message = str(snap.message)
    assert (snap.status, message, snap.step) == ("stopped", "stopped by the user before it started", 0)
    run.start()  # too late: nothing starts
    assert run.thread is None and run.snapshot().status == "stopped"


def test_a_run_whose_thread_cannot_start_fails_and_ends(monkeypatch):
    def no_thread(self):
        raise RuntimeError("can't start new thread")

    done = []
    run = make_run(on_done=done.append)
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    run.start()
    monkeypatch.undo()
    assert run.done and run.ended and run.join(0) and run.thread is None and done == [run]
    snap = run.snapshot()
    message = str(snap.message)
    assert (snap.status, message) == ("failed", "could not start its thread: can't start new thread")


def test_join_waits_for_the_thread_after_done():
    """done comes before its thread's end (on_done, which may start another run): join waits for both."""
    in_on_done, let_go = threading.Event(), threading.Event()

    def on_done(run):
        in_on_done.set()
        assert let_go.wait(30)

    run = make_run(cfg={"epochs": 1}, on_done=on_done).start()
    assert in_on_done.wait(60)
    assert run.done and not run.ended and run.join(0.01) is False
    let_go.set()
    assert run.join(30) and run.ended and not run.thread.is_alive()


def test_time_limit_through_run(fake_clock):
    run = make_run(
        cfg={"epochs": 100000, "devices": "cpu"}, pace=200, max_seconds=10, clock=fake_clock
    ).start()
    wait_for(lambda: run.snapshot().step >= 1)
    fake_clock.advance(11)
    snap = finish(run)
    said = "stopped at the time limit of 10 s of training (pauses not counted)"
    assert (snap.status, str(snap.message)) == ("stopped", said)


# -- failures -------------------------------------------------------------------------------------------


def test_a_trainer_that_raises_fails_the_run():
    def trainer(cfg, on_event, control, plan=None):
        raise RuntimeError("the trainer broke")

    done = []
    run = make_run(trainer=trainer, on_done=done.append).start()
    snap = finish(run)
    assert (snap.status, str(snap.message)) == ("failed", "RuntimeError: the trainer broke")
    assert done == [run] and not snap.active


def test_a_failure_inside_train_fails_the_run(monkeypatch):
    def broken(cfg, device="cpu"):
        raise OSError("disk on fire")

    monkeypatch.setattr(train_mod, "make_data", broken)
    snap = finish(make_run().start())
    assert (snap.status, str(snap.message), snap.step) == ("failed", "OSError: disk on fire", 0)


def test_a_failure_mid_run_keeps_the_steps(monkeypatch):
    real = train_mod.make_optimizer

    def make_optimizer(cfg, params):
        optimizer = real(cfg, params)
        step, calls = optimizer.step, []

        def failing_step():
            calls.append(1)
            if len(calls) == 4:
                raise ValueError("bad step")
            step()

        optimizer.step = failing_step
        return optimizer

    monkeypatch.setattr(train_mod, "make_optimizer", make_optimizer)
    snap = finish(make_run(cfg={"epochs": 10}).start())
    assert (snap.status, str(snap.message), snap.step) == ("failed", "ValueError: bad step", 3)
    assert snap.weights == snap.latest.weights and snap.final_loss == snap.latest.loss
