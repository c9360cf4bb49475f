"""The training loop: its events, the split it records, its answer against lstsq and single-device training,
and how it ends (divergence, stop, failure). Control's pause, stop, pace and time limit."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import threading

import pytest
import torch

from fitcore.core.config import FitConfig, validate
from fitcore.core.data import epoch_batches, make_data
from fitcore.core.devices import parse_devices
from fitcore.core.events import MAX_IDS, RunEnded, RunStarted, Step
from fitcore.core.parallel import LinearModel, chunk_sizes, init_parameters
from fitcore.core.train import Control, finished_message
from fitcore.strategies.dataparallel.train import train
from tests.helpers import wait_for

# the module: `import fitcore.core.train` names the function that fitcore/__init__.py re-exports
train_mod = importlib.import_module("fitcore.strategies.dataparallel.train")


def collect(cfg: FitConfig, control: Control | None = None, stop_at: int | None = None):
    """Run cfg; return (events, RunEnded). stop_at: call control.stop() from the Step with that number."""
    control = control or Control()
    events = []

    def on_event(event):
        events.append(event)
        if stop_at is not None and isinstance(event, Step) and event.step == stop_at:
            control.stop()

    ended = train(validate(cfg, gpus=[]), on_event, control)
    return events, ended


def lstsq_reference(cfg: FitConfig) -> tuple[float, ...]:
    """(w1, ..., wd, b) from torch.linalg.lstsq on [X, 1], computed here in float64."""
    X, y = make_data(cfg)
    A = torch.cat([X.double(), torch.ones(cfg.data_size, 1, dtype=torch.float64)], dim=1)  # (N, d + 1)
    return tuple(torch.linalg.lstsq(A, y.double()).solution.view(-1).tolist())


def params(ended: RunEnded) -> tuple[float, ...]:
    return ended.weights + (ended.bias,)


def max_diff(a, b) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


# -- events ---------------------------------------------------------------------------------------------


def test_event_counts_and_order():
    # 250 rows in batches of 100: 3 batches per epoch, the last of 50
    cfg = FitConfig(data_size=250, batch_size=100, epochs=4, devices="virtual:3")
    events, ended = collect(cfg)
    kinds = [type(e).__name__ for e in events]
    # what each device holds, measured after step 1 (the picture's chips from then on) and at the end
    assert kinds == ["RunStarted", "Step", "Detail"] + ["Step"] * 11 + ["Detail", "RunEnded"]
    assert events[-1] is ended
    # measured from the tensors: W (2) and b (1) in float32, their gradients; Adam's two moments of each and
    # a 4-byte step count per parameter (2 * 12 + 2 * 4), on device 0 only, which also gathers a full batch's
    # 100 outputs and the loss during a step
    held = [
        {"rank": 0, "parameters": 12, "gradients": 12, "optimizer_state": 32, "gathered": 101 * 4},
        {"rank": 1, "parameters": 12, "gradients": 12, "optimizer_state": 0},
        {"rank": 2, "parameters": 12, "gradients": 12, "optimizer_state": 0},
    ]
    assert [(e.key, e.value) for e in (events[2], events[-2])] == [("memory", held)] * 2
    steps = [e for e in events if type(e).__name__ == "Step"]
    assert [(s.step, s.epoch, s.batch) for s in steps] == [
        ((e - 1) * 3 + b, e, b) for e in range(1, 5) for b in range(1, 4)
    ]
    assert [s.input_shape[0] for s in steps] == [100, 100, 50] * 4
    assert (ended.status, ended.steps) == ("finished", 12)
    assert str(ended.message).startswith("finished 12 steps in ")
    assert ended.weights == steps[-1].weights and ended.bias == steps[-1].bias
    assert ended.final_loss == steps[-1].loss
    assert all(isinstance(v, float) for s in steps for v in (s.loss, s.bias, *s.weights))


def test_run_started_describes_the_run():
    cfg = FitConfig(data_size=250, batch_size=100, epochs=2, devices="virtual:3", noise=0.3, seed=5)
    events, _ = collect(cfg)
    started = events[0]
    assert isinstance(started, RunStarted)
    plan = parse_devices("virtual:3", gpus=[])
    assert started.config == cfg
    assert started.devices == plan.labels and started.header == plan.describe()
    assert started.emulated is True and started.data_parallel is False
    assert (started.total_steps, started.batches_per_epoch) == (6, 3)
    assert max_diff(started.lstsq_weights + (started.lstsq_bias,), lstsq_reference(cfg)) < 1e-9


@pytest.mark.parametrize(
    "data_size, batch_size, devices, batch_rows",
    [
        (250, 100, "virtual:3", [100, 100, 50]),
        (200, 200, "virtual:3", [200]),
        (200, 200, "virtual:2", [200]),
        (13, 5, "virtual:4", [5, 5, 3]),  # 5 rows on 4 devices use 3; the last batch of 3 uses 3
        (10, 5, "virtual:8", [5, 5]),  # 5 rows on 8 devices: five replicas of 1 row
        (201, 201, "virtual:2", [201]),
        (100, 30, "cpu", [30, 30, 30, 10]),
    ],
)
def test_steps_record_each_replicas_chunk(data_size, batch_size, devices, batch_rows):
    cfg = FitConfig(
        data_size=data_size, batch_size=batch_size, epochs=2, devices=devices, weights=(1.0, 2.0, 3.0)
    )
    events, _ = collect(cfg)
    steps = [e for e in events if isinstance(e, Step)]
    labels = parse_devices(devices, gpus=[]).labels
    assert [s.input_shape for s in steps] == [(b, 3) for b in batch_rows] * 2
    for s in steps:
        rows = s.input_shape[0]
        sizes = chunk_sizes(rows, len(labels))
        assert sizes == tuple(c.shape[0] for c in torch.arange(rows).chunk(len(labels)))
        assert s.output_shape == (rows, 1)
        assert [r.rows for r in s.replicas] == list(sizes)
        stops = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        assert [(r.start, r.stop) for r in s.replicas] == list(zip([0] + stops[:-1], stops))
        assert [r.input_shape for r in s.replicas] == [(c, 3) for c in sizes]
        assert [r.output_shape for r in s.replicas] == [(c, 1) for c in sizes]
        assert [r.device for r in s.replicas] == list(labels[: len(sizes)])
        shapes = [s.input_shape, s.output_shape]
        shapes += [t for r in s.replicas for t in (r.input_shape, r.output_shape)]
        assert all(type(t) is tuple for t in shapes)  # plain tuples, not the torch.Size the forward saw


def test_tutorial_split_200_rows_on_3_devices():
    events, _ = collect(FitConfig(epochs=1, devices="virtual:3"))
    (step,) = [e for e in events if isinstance(e, Step)]
    assert [(r.start, r.stop, r.input_shape, r.output_shape) for r in step.replicas] == [
        (0, 67, (67, 2), (67, 1)),
        (67, 134, (67, 2), (67, 1)),
        (134, 200, (66, 2), (66, 1)),
    ]
    assert (step.input_shape, step.output_shape) == ((200, 2), (200, 1))


def test_loss_is_the_batch_mse_before_the_step():
    cfg = FitConfig(data_size=120, batch_size=120, epochs=6, devices="virtual:2", shuffle=False, noise=0.2)
    events, _ = collect(cfg)
    steps = [e for e in events if isinstance(e, Step)]
    X, y = make_data(cfg)
    for before, after in zip(steps, steps[1:]):
        w = torch.tensor(before.weights, dtype=torch.float64).view(-1, 1)
        mse = ((X.double() @ w + before.bias - y.double()) ** 2).mean().item()
        assert abs(after.loss - mse) <= 1e-5 * mse


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_every_step_reports_the_parameters_after_it(optimizer):
    # The loop reads the parameters through NumPy views on the CPU; a replay of the same steps, reading
    # torch's own parameters after each, must give the very same numbers at every step.
    cfg = FitConfig(data_size=250, batch_size=100, epochs=3, optimizer=optimizer, lr=0.1, devices="cpu")
    steps = [e for e in collect(cfg)[0] if isinstance(e, Step)]
    X, y = make_data(cfg)
    model = LinearModel(cfg.n_features)
    init_parameters(model, cfg.seed + 1)
    params_ = list(model.parameters())
    optimizer_ = train_mod.make_optimizer(cfg, params_)
    generator = torch.Generator().manual_seed(cfg.seed + 2)
    replay = []
    for _ in range(cfg.epochs):
        for xb, yb in epoch_batches(X, y, cfg.batch_size, cfg.shuffle, generator):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            optimizer_.zero_grad()
            loss.backward()
            optimizer_.step()
            replay.append((tuple(model.fc.weight.detach().view(-1).tolist()), model.fc.bias.item()))
    assert len(replay) == len(steps) == 9
    assert [(s.weights, s.bias) for s in steps] == replay
    assert len(set(replay)) == 9  # every step moved the parameters


# -- the answer -----------------------------------------------------------------------------------------

# (seed, noise, batch size, epochs): full batches converge to lstsq; minibatches with noise land near it
BASES = [(0, 0.0, 200, 300), (1, 0.5, 50, 60), (2, 0.1, 64, 60)]


@functools.lru_cache(maxsize=None)
def single_device(seed, noise, batch_size, epochs) -> RunEnded:
    cfg = FitConfig(seed=seed, noise=noise, batch_size=batch_size, epochs=epochs, devices="cpu")
    return collect(cfg)[1]


@pytest.mark.parametrize("k", [1, 2, 3, 8])
@pytest.mark.parametrize("seed, noise, batch_size, epochs", BASES)
def test_emulated_devices_learn_what_one_device_learns(seed, noise, batch_size, epochs, k):
    base = single_device(seed, noise, batch_size, epochs)
    cfg = FitConfig(seed=seed, noise=noise, batch_size=batch_size, epochs=epochs, devices=f"virtual:{k}")
    _, ended = collect(cfg)
    assert ended.status == base.status == "finished" and ended.steps == base.steps
    assert max_diff(params(ended), params(base)) < 1e-5


@pytest.mark.parametrize("seed, noise, batch_size, epochs", BASES)
def test_learned_parameters_are_near_lstsq(seed, noise, batch_size, epochs):
    ended = single_device(seed, noise, batch_size, epochs)
    cfg = FitConfig(seed=seed, noise=noise, batch_size=batch_size, epochs=epochs)
    reference = lstsq_reference(cfg)
    # full batches: converged to float32 precision; minibatch Adam at lr 0.5 keeps jittering around lstsq
    tolerance = 1e-4 if batch_size == cfg.data_size else 0.1
    assert max_diff(params(ended), reference) < tolerance
    if noise == 0:
        assert max_diff(params(ended), (5.2, 9.6, 3.4)) < 1e-4


def test_sgd_converges_to_lstsq():
    cfg = FitConfig(optimizer="sgd", lr=0.3, epochs=150, devices="virtual:3", noise=0.5, seed=3)
    _, ended = collect(cfg)
    assert max_diff(params(ended), lstsq_reference(cfg)) < 1e-4


def test_unshuffled_minibatches_on_emulated_devices_match_one_device():
    cfg = FitConfig(batch_size=30, epochs=10, shuffle=False, noise=0.3)
    _, one = collect(dataclasses.replace(cfg, devices="cpu"))
    _, three = collect(dataclasses.replace(cfg, devices="virtual:3"))
    assert max_diff(params(one), params(three)) < 1e-5


def test_same_seed_same_run():
    cfg = FitConfig(batch_size=64, epochs=5, noise=0.2, seed=11)
    assert params(collect(cfg)[1]) == params(collect(cfg)[1])
    assert params(collect(cfg)[1]) != params(collect(dataclasses.replace(cfg, seed=12))[1])


# -- how a run ends -------------------------------------------------------------------------------------


def test_divergence_ends_the_run_and_blames_the_learning_rate():
    cfg = FitConfig(optimizer="sgd", lr=1e6, epochs=50, devices="virtual:2")
    events, ended = collect(cfg)
    steps = [e for e in events if isinstance(e, Step)]
    assert ended.status == "diverged"
    assert "learning rate 1e+06 is too high" in str(ended.message)
    assert f"at step {len(steps) + 1} (epoch {len(steps) + 1})" in str(ended.message)  # one batch per epoch
    assert 1 <= len(steps) < 50 and ended.steps == len(steps)
    # nothing after the bad loss but what the devices held
    assert type(events[-1]) is RunEnded and events[-2].key == "memory" and type(events[-3]) is Step
    assert all(torch.isfinite(torch.tensor(s.loss)) for s in steps)
    assert ended.final_loss == steps[-1].loss


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_largest_learning_rate_allowed_diverges_rather_than_fails(optimizer):
    _, ended = collect(FitConfig(optimizer=optimizer, lr=1e30, epochs=20, devices="cpu"))
    assert ended.status == "diverged" and "the learning rate 1e+30 is too high" in str(ended.message)


def test_stop_between_steps():
    cfg = FitConfig(epochs=100, devices="virtual:2")
    events, ended = collect(cfg, stop_at=5)
    assert (ended.status, str(ended.message), ended.steps) == ("stopped", "stopped by the user", 5)
    assert [e.step for e in events if isinstance(e, Step)] == [1, 2, 3, 4, 5]
    assert ended.weights == [e for e in events if isinstance(e, Step)][-1].weights


def test_replica_threads_end_with_the_run():
    before = set(threading.enumerate())
    collect(FitConfig(epochs=3, devices="virtual:8"))
    assert not [t for t in threading.enumerate() if t not in before and t.name.startswith("fitcore-")]


def test_failure_before_the_model_exists(monkeypatch):
    def broken(X, y):
        raise RuntimeError("boom")

    monkeypatch.setattr(train_mod, "least_squares", broken)
    events, ended = collect(FitConfig(epochs=3))
    assert events == [ended]
    assert (ended.status, str(ended.message), ended.steps) == ("failed", "RuntimeError: boom", 0)
    assert ended.weights == () and ended.final_loss is None


def test_failure_in_the_loop_keeps_what_was_learned(monkeypatch):
    calls = []
    real = train_mod.F.mse_loss

    def mse_loss(out, target):
        calls.append(1)
        if len(calls) == 4:
            raise MemoryError("no room")
        return real(out, target)

    monkeypatch.setattr(train_mod.F, "mse_loss", mse_loss)
    events, ended = collect(FitConfig(epochs=10, devices="virtual:2"))
    steps = [e for e in events if isinstance(e, Step)]
    assert ended.status == "failed" and ended.steps == 3 == len(steps)
    assert str(ended.message) == "out of memory: MemoryError: no room. Try a smaller data size or batch size."
    assert ended.weights == steps[-1].weights and ended.final_loss == steps[-1].loss


def test_a_consumer_that_raises_fails_the_run():
    seen = []

    def on_event(event):
        seen.append(event)
        if isinstance(event, Step) and event.step == 2:
            raise ValueError("cannot draw")

    ended = train(validate(FitConfig(epochs=10), gpus=[]), on_event)
    assert (ended.status, str(ended.message), ended.steps) == ("failed", "ValueError: cannot draw", 2)
    assert [type(e).__name__ for e in seen] == ["RunStarted", "Step", "Detail", "Step", "Detail", "RunEnded"]


# -- Control --------------------------------------------------------------------------------------------


class SleepOnFakeClock(threading.Event):
    """A stop Event whose timed waits move the fake clock instead of sleeping, and are recorded."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout=None):
        self.waits.append(round(timeout, 9))
        self.clock.advance(timeout)
        return self.is_set()


def paced(pace, clock) -> tuple[Control, SleepOnFakeClock]:
    control = Control(pace=pace, clock=clock)
    control._stop = SleepOnFakeClock(clock)
    return control, control._stop


def test_pace_spaces_steps_by_one_over_pace(fake_clock):
    control, sleeps = paced(10.0, fake_clock)
    assert control.wait() and sleeps.waits == []  # the first step goes at once
    for _ in range(3):  # steps that take no time wait a whole slot each
        assert control.wait()
    assert sleeps.waits == [0.1, 0.1, 0.1]
    fake_clock.advance(0.04)  # a step that takes 40 ms waits the rest of its slot
    assert control.wait() and sleeps.waits[-1] == 0.06
    fake_clock.advance(0.1)  # a step that takes its whole slot does not wait
    assert control.wait() and len(sleeps.waits) == 4


def test_a_late_step_is_not_made_up_for(fake_clock):
    control, sleeps = paced(4.0, fake_clock)
    control.wait()
    fake_clock.advance(10.0)  # 40 slots behind
    assert control.wait() and sleeps.waits == []
    assert control.wait() and sleeps.waits == [0.25]  # then a slot each, not a burst of 40 steps
    assert control.wait() and sleeps.waits == [0.25, 0.25]


def test_pace_can_change_and_be_removed(fake_clock):
    control, sleeps = paced(10.0, fake_clock)
    control.wait()
    control.pace = 2.0
    control.wait()
    assert sleeps.waits == [0.5]
    control.pace = None
    for _ in range(5):
        assert control.wait()
    assert sleeps.waits == [0.5]


def test_stop_during_a_paced_wait():
    control = Control(pace=0.01)  # one step every 100 s
    assert control.wait()
    result = []
    waiter = threading.Thread(target=lambda: result.append(control.wait()))
    waiter.start()
    control.stop("enough")
    waiter.join(10)
    assert result == [False] and control.stop_reason == "enough"


def test_pause_during_a_paced_wait_takes_no_further_step():
    control = Control(pace=5.0)  # 0.2 s between steps
    assert control.wait()
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (control.wait(), done.set()))
    waiter.start()
    control.pause()  # while the waiter waits for its slot: the step after it must wait for the resume
    assert not done.wait(0.6)
    control.step_once()  # Step lets exactly that one through
    assert done.wait(10)
    waiter.join(10)


def test_time_limit(fake_clock):
    control = Control(max_seconds=10, clock=fake_clock)
    assert control.wait()
    fake_clock.advance(9.5)
    assert control.wait()
    fake_clock.advance(1.0)
    assert not control.wait()
    said = "stopped at the time limit of 10 s of training (pauses not counted)"
    assert control.stopped and str(control.stop_reason) == said


def test_a_pause_does_not_use_up_the_time_limit_and_has_a_longer_one_of_its_own(fake_clock):
    control = Control(max_seconds=5, clock=fake_clock, max_paused_seconds=60)
    assert control.wait()
    fake_clock.advance(3)  # 3 s of training
    control.pause()
    result = []
    waiter = threading.Thread(target=lambda: result.append(control.wait()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and result == []  # paused
    fake_clock.advance(30)  # a 30 s explanation: past the 5 s of training, which a pause does not count
    waiter.join(0.3)
    assert waiter.is_alive() and not control.stopped
    assert control.limit_left() == ("pause", 60, 30) and control.running_seconds() == 3
    control.resume()
    waiter.join(10)
    assert result == [True] and control.limit_left() == ("run", 5, 2)  # 2 s of training left
    fake_clock.advance(2.5)
    said = "stopped at the time limit of 5 s of training (pauses not counted)"
    assert not control.wait() and str(control.stop_reason) == said


def test_a_pause_longer_than_its_own_limit_stops_the_run(fake_clock):
    control = Control(max_seconds=5, clock=fake_clock, max_paused_seconds=60)
    assert control.wait()
    control.pause()
    result = []
    waiter = threading.Thread(target=lambda: result.append(control.wait()))
    waiter.start()
    fake_clock.advance(61)
    waiter.join(10)
    reason = "stopped after a pause of 60 s, the longest the server keeps a paused run"
    assert result == [False] and str(control.stop_reason) == reason


def test_pause_blocks_until_resume():
    control = Control()
    control.pause()
    assert control.paused and not control.stopped
    result = []
    waiter = threading.Thread(target=lambda: result.append(control.wait()))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and result == []
    control.resume()
    waiter.join(10)
    assert result == [True] and not control.paused


def test_stop_wakes_a_paused_wait_and_keeps_the_first_reason():
    control = Control()
    control.pause()
    result = []
    waiter = threading.Thread(target=lambda: result.append(control.wait()))
    waiter.start()
    control.stop("first")
    control.stop("second")
    waiter.join(10)
    assert result == [False] and control.stop_reason == "first"
    assert control.stopped and not control.paused


def test_pause_inside_train_holds_the_step_count():
    control = Control()
    events = []
    paused_at = threading.Event()

    def on_event(event):
        events.append(event)
        if isinstance(event, Step) and event.step == 3:
            control.pause()
            paused_at.set()

    cfg = validate(FitConfig(epochs=20, devices="virtual:2"), gpus=[])
    worker = threading.Thread(target=lambda: train(cfg, on_event, control))
    worker.start()
    assert paused_at.wait(30)
    worker.join(0.3)
    assert worker.is_alive() and sum(isinstance(e, Step) for e in events) == 3
    control.resume()
    worker.join(30)
    assert not worker.is_alive()
    assert events[-1].status == "finished" and events[-1].steps == 20


def test_adam_is_fused_where_torch_has_it_and_steps_like_the_default_adam():
    """fitcore's Adam is one fused kernel on the CPU; 200 steps end where torch's default Adam ends."""
    cfg = validate(FitConfig(lr=0.05), gpus=[])
    X, y = make_data(cfg)
    ends = []
    for make in (train_mod.make_optimizer, lambda cfg, p: torch.optim.Adam(p, lr=cfg.lr)):
        torch.manual_seed(0)
        fc = torch.nn.Linear(2, 1)
        params = list(fc.parameters())
        optimizer = make(cfg, params)
        for _ in range(200):
            loss = torch.nn.functional.mse_loss(fc(X), y)
            train_mod.clear_grads(params)
            loss.backward()
            optimizer.step()
        assert all(p.grad is not None for p in params)
        ends.append(torch.cat([fc.weight.view(-1), fc.bias]).detach())
        if len(ends) == 1:
            assert optimizer.defaults["fused"] is True
    torch.testing.assert_close(ends[0], ends[1], atol=1e-5, rtol=1e-5)
    assert not torch.equal(ends[0], torch.zeros(3))


def test_step_once_runs_exactly_one_step_while_paused():
    control = Control()
    steps = []
    paused_at = threading.Event()
    stepped = threading.Event()

    def on_event(event):
        if isinstance(event, Step):
            steps.append(event.step)
            if event.step == 2:
                control.pause()
                paused_at.set()
            elif event.step > 2:
                stepped.set()

    cfg = validate(FitConfig(epochs=20, devices="virtual:2"), gpus=[])
    worker = threading.Thread(target=lambda: train(cfg, on_event, control))
    worker.start()
    assert paused_at.wait(30)
    control.step_once()
    assert stepped.wait(30)
    worker.join(0.3)  # still paused after the one step
    assert worker.is_alive() and steps == [1, 2, 3] and control.paused
    control.step_once()
    control.step_once()  # a second press before the step ran still lets one step through
    wait_for(lambda: len(steps) == 4)
    worker.join(0.3)
    assert steps == [1, 2, 3, 4]
    control.resume()
    worker.join(30)
    assert not worker.is_alive() and steps == list(range(1, 21))


def test_step_once_does_nothing_while_running(fake_clock):
    control = Control(clock=fake_clock)
    control.step_once()
    control.pause()
    control.resume()
    assert control.wait() and not control._one_step.is_set()


def test_paused_time_is_counted_apart(fake_clock):
    control = Control(clock=fake_clock)
    assert control.wait()
    control.pause()
    waiter = threading.Thread(target=control.wait)
    waiter.start()
    wait_for(lambda: waiter.is_alive())
    fake_clock.advance(7.5)
    control.resume()
    waiter.join(10)
    assert control.paused_seconds == pytest.approx(7.5)


def test_finished_message_says_how_long_it_ran_and_was_paused():
    assert str(finished_message(1, 0.5, 0.0)) == "finished 1 step in 0.50 s"
    assert str(finished_message(200, 12.345, 4.0)) == "finished 200 steps in 12.35 s (4.0 s of it paused)"



def test_every_emulated_step_carries_its_phases_and_the_dataset_ids_of_each_chunk():
    from fitcore.core.data import batch_indices
    from fitcore.strategies.dataparallel import phases

    cfg = validate(FitConfig(data_size=10, batch_size=5, epochs=2, devices="virtual:3"), gpus=[])
    events, ended = collect(cfg)
    steps = [e for e in events if isinstance(e, Step)]
    assert ended.status == "finished" and len(steps) == 4
    labels = parse_devices("virtual:3").labels
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    orders = [list(batch_indices(10, 5, True, gen)) for _ in range(2)]  # each epoch's batches of ids
    for step in steps:
        got = step.phases.phases()
        sizes = [len(c) for c in torch.arange(5).chunk(3)]  # 2, 2, 1
        assert [r.rows for r in step.replicas] == sizes
        # one record per busy device for each per-device phase, in the order of the step
        names = [p.name for p in got]
        assert names == (
            ["scatter"] * 3 + ["replicate"] * 3 + ["parallel_apply"] * 3 + ["gather"] * 3
            + ["loss", "backward"] + ["reduce"] * 3 + ["optimizer"]
        )  # fmt: skip
        assert [p.device for p in got if p.name == "scatter"] == list(labels)
        assert all(p.start >= 0 and p.duration >= 0 for p in got)
        by_name = {p.name: p for p in got if p.device == labels[0]}
        assert by_name["loss"].start <= by_name["backward"].start <= by_name["optimizer"].start
        # bytes: the formulas, for float32 and d = 2 (the first device keeps its own chunk)
        assert [p.bytes for p in got if p.name == "scatter"] == [0, 2 * 2 * 4, 1 * 2 * 4]
        assert [p.bytes for p in got if p.name == "gather"] == [0, 2 * 4, 1 * 4]
        assert [p.bytes for p in got if p.name in ("replicate", "reduce")] == [0, 12, 12] * 2
        assert by_name["backward"].bytes == (2 + 1) * 4
        assert step.phases.bytes == phases.dataparallel_bytes(sizes, 2, 4)
        # where each chunk's rows came from: the epoch's shuffled order, cut like the batch
        batch = orders[step.epoch - 1][step.batch - 1].tolist()
        assert [r.ids for r in step.replicas] == [tuple(batch[r.start : r.stop]) for r in step.replicas]


def test_a_single_device_records_no_phases():
    cfg = validate(FitConfig(data_size=10, batch_size=5, epochs=1, devices="cpu", shuffle=False), gpus=[])
    steps = [e for e in collect(cfg)[0] if isinstance(e, Step)]
    assert [s.phases for s in steps] == [None, None]
    assert [s.replicas[0].ids for s in steps] == [(0, 1, 2, 3, 4), (5, 6, 7, 8, 9)]  # rows in order


@pytest.mark.parametrize("shuffle", [True, False])
def test_each_replica_names_the_first_max_ids_rows_of_its_chunk(shuffle):
    # 70 rows in batches of 30 on 3 devices: chunks of 10 (more ids than a replica names), then 4, 3, 3
    cfg = validate(
        FitConfig(data_size=70, batch_size=30, epochs=2, devices="virtual:3", shuffle=shuffle), gpus=[]
    )
    steps = [e for e in collect(cfg)[0] if isinstance(e, Step)]
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    orders = [torch.randperm(70, generator=gen) if shuffle else torch.arange(70) for _ in range(2)]
    assert len(steps) == 6
    for s in steps:
        batch = orders[s.epoch - 1][(s.batch - 1) * 30 :][: s.input_shape[0]].tolist()
        sizes = [len(c) for c in torch.arange(len(batch)).chunk(3)]
        assert [r.rows for r in s.replicas] == sizes  # [10, 10, 10], then [4, 3, 3]
        assert [r.ids for r in s.replicas] == [
            tuple(batch[r.start : r.start + min(r.rows, MAX_IDS)]) for r in s.replicas
        ]
        assert all(type(i) is int for r in s.replicas for i in r.ids)
    assert [len(r.ids) for r in steps[0].replicas] == [MAX_IDS] * 3 == [8] * 3
    if not shuffle:
        assert steps[1].replicas[2].ids == (50, 51, 52, 53, 54, 55, 56, 57)


@pytest.mark.parametrize(("batch", "recorded_at"), [(5, [1]), (4, [1, 3, 4, 6, 7, 9])])
def test_the_replicas_record_what_they_see_when_the_batchs_rows_change(monkeypatch, batch, recorded_at):
    # tensor.chunk splits the same rows the same way, so a step like the step before reuses its records:
    # 10 rows in batches of 5 record on step 1 only; in batches of 4, 4, 2 on each step whose rows changed.
    # Every step's replicas are still the chunks of its own batch, with its own rows' ids.
    from fitcore.core.parallel import ShapeRecorder

    recorded, steps = [], []
    real = ShapeRecorder.record
    monkeypatch.setattr(
        ShapeRecorder, "record", lambda self, *a: recorded.append(len(steps) + 1) or real(self, *a)
    )
    cfg = validate(FitConfig(data_size=10, batch_size=batch, epochs=3, devices="virtual:2"), gpus=[])
    train(cfg, lambda e: steps.append(e) if isinstance(e, Step) else None)
    assert sorted(set(recorded)) == recorded_at and len(recorded) == 2 * len(recorded_at)  # two replicas each
    for s in steps:
        rows = s.input_shape[0]
        assert [r.stop - r.start for r in s.replicas] == list(chunk_sizes(rows, 2))
        assert [r.input_shape for r in s.replicas] == [(n, 2) for n in chunk_sizes(rows, 2)]
        ids = [i for r in s.replicas for i in r.ids]
        assert len(ids) == len(set(ids)) == rows  # up to 8 a replica: these chunks have at most 5
    assert len(steps) == 3 * -(-10 // batch)
