"""DataParallel's chunking rule, the CPU emulation of it, and wrapping for each kind of device plan."""

from __future__ import annotations

import importlib
import itertools
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fitcore.core import phases
from fitcore.core.devices import GPU, parse_devices
from fitcore.core.parallel import LinearModel, ShapeRecorder, chunk_sizes, init_parameters
from fitcore.core.phases import CudaClock, step_bytes
from fitcore.strategies.dataparallel.phases import DATAPARALLEL_PHASES
from fitcore.strategies.dataparallel.wrappers import (
    EmulatedDataParallel,
    TimedDataParallel,
    _cuda_bounds,
    _cuda_slot_devices,
    phase_recorder,
    unwrap,
    wrap,
)

GPUS = [GPU(0, "A", 16 << 30), GPU(1, "B", 16 << 30)]

# (rows, devices, rows per replica), written out by hand from ceil(n / k)-sized chunks
CHUNKS = [
    (200, 1, (200,)),
    (200, 2, (100, 100)),
    (200, 3, (67, 67, 66)),
    (201, 2, (101, 100)),
    (100, 8, (13, 13, 13, 13, 13, 13, 13, 9)),
    (50, 3, (17, 17, 16)),
    (10, 4, (3, 3, 3, 1)),
    (9, 4, (3, 3, 3)),  # only 3 of the 4 devices get rows
    (6, 4, (2, 2, 2)),
    (8, 3, (3, 3, 2)),
    (7, 7, (1, 1, 1, 1, 1, 1, 1)),
    (5, 8, (1, 1, 1, 1, 1)),  # 5 rows on 8 devices: five replicas run
    (1, 3, (1,)),
    (1, 1, (1,)),
]


def torch_chunks(n: int, k: int) -> tuple[int, ...]:
    return tuple(c.shape[0] for c in torch.arange(n).chunk(k))


@pytest.mark.parametrize("n, k, expected", CHUNKS)
def test_chunk_sizes_table(n, k, expected):
    assert chunk_sizes(n, k) == expected
    assert torch_chunks(n, k) == expected
    assert sum(expected) == n


def test_chunk_sizes_match_tensor_chunk_everywhere():
    mismatches = [
        (n, k) for n in range(1, 130) for k in range(1, 10) if chunk_sizes(n, k) != torch_chunks(n, k)
    ]
    assert mismatches == []


@pytest.mark.parametrize("n, k", [(0, 2), (3, 0), (-1, 1), (5, -2)])
def test_chunk_sizes_rejects_empty(n, k):
    with pytest.raises(ValueError, match=f"n={n}, k={k}"):
        chunk_sizes(n, k)


def make_model(d: int, seed: int = 7) -> tuple[LinearModel, ShapeRecorder]:
    recorder = ShapeRecorder()
    model = LinearModel(d, recorder)
    init_parameters(model, seed)
    return model, recorder


@pytest.mark.parametrize("n, k", [(200, 2), (200, 3), (10, 4), (9, 4), (5, 8), (1, 3), (201, 2), (64, 1)])
def test_emulated_forward_records_each_chunk_and_matches_unwrapped(n, k):
    d = 3
    model, recorder = make_model(d)
    plan = parse_devices(f"virtual:{k}", gpus=[])
    wrapped = wrap(model, plan)
    try:
        g = torch.Generator().manual_seed(n * 10 + k)
        x, y = torch.randn(n, d, generator=g), torch.randn(n, 1, generator=g)

        # 1. the split: one record per chunk, with DataParallel's sizes, on the first len(chunks) devices
        out = wrapped(x)
        records = sorted(recorder.take(), key=lambda r: plan.labels.index(r.device))
        sizes = chunk_sizes(n, k)
        assert [r.input_shape for r in records] == [(c, d) for c in sizes]
        assert [r.output_shape for r in records] == [(c, 1) for c in sizes]
        assert [r.device for r in records] == list(plan.labels[: len(sizes)])

        # 2. the gathered output is the unwrapped model's output
        single = model(x)
        assert recorder.take()[0].input_shape == (n, d)
        assert out.shape == (n, 1)
        torch.testing.assert_close(out, single, atol=1e-6, rtol=0)

        # 3. gradients of the loss on the gathered output equal the single-device gradients
        F.mse_loss(out, y).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        for g_parallel, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g_parallel, p.grad, atol=1e-6, rtol=1e-6)
    finally:
        wrapped.close()


def test_emulated_replicas_share_the_parameters_once():
    model, _ = make_model(2)
    wrapped = wrap(model, parse_devices("virtual:4", gpus=[]))
    try:
        assert isinstance(wrapped, EmulatedDataParallel)
        assert unwrap(wrapped) is model
        params = list(wrapped.parameters())
        assert len(params) == 2  # the optimizer sees W and b once, not once per replica
        assert all(a is b for a, b in zip(params, model.parameters()))
        replicas = wrapped._replicas
        assert len(replicas) == 4 and all(r.fc is model.fc for r in replicas)
    finally:
        wrapped.close()


def test_emulated_forward_runs_replicas_in_threads_and_keeps_grad_mode(monkeypatch):
    model, _ = make_model(2)
    seen = []
    original = LinearModel.forward

    def forward(self, x):
        seen.append((self.device_label, threading.current_thread().name, torch.is_grad_enabled()))
        return original(self, x)

    monkeypatch.setattr(LinearModel, "forward", forward)
    wrapped = wrap(model, parse_devices("virtual:3", gpus=[]))
    try:
        with torch.no_grad():
            out = wrapped(torch.randn(9, 2))
        assert not out.requires_grad
        assert all(grad is False for _, _, grad in seen)
        seen.clear()
        out = wrapped(torch.randn(9, 2))
        assert out.requires_grad
        assert all(grad is True for _, _, grad in seen)
        workers = {name for label, name, _ in seen if not label.startswith("virtual:0")}
        assert len(seen) == 3 and workers and all(n.startswith("fitcore-replica") for n in workers)
    finally:
        wrapped.close()


def test_close_ends_the_replica_threads():
    model, _ = make_model(2)
    wrapped = wrap(model, parse_devices("virtual:8", gpus=[]))
    wrapped(torch.randn(16, 2))
    wrapped.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("fitcore-replica")]


def test_single_virtual_device_runs_inline():
    model, recorder = make_model(2)
    wrapped = wrap(model, parse_devices("virtual:1", gpus=[]))
    assert isinstance(wrapped, EmulatedDataParallel) and wrapped._pool is None
    wrapped(torch.randn(5, 2))
    assert [(r.device, r.input_shape) for r in recorder.take()] == [("virtual:0 (emulated on CPU)", (5, 2))]
    wrapped.close()


def test_wrap_cpu_returns_the_model_itself():
    model, recorder = make_model(2)
    assert wrap(model, parse_devices("cpu", gpus=[])) is model
    assert unwrap(model) is model
    model(torch.randn(4, 2))
    assert [(r.device, r.input_shape, r.output_shape) for r in recorder.take()] == [("cpu", (4, 2), (4, 1))]


@pytest.fixture
def fake_cuda(monkeypatch):
    """Let the real nn.DataParallel constructor believe CUDA exists; record where the model is moved."""
    # the module, not the function torch.nn.parallel re-exports under the same name
    dp_module = importlib.import_module("torch.nn.parallel.data_parallel")
    monkeypatch.setattr(dp_module, "_get_available_device_type", lambda: "cuda")
    monkeypatch.setattr(dp_module, "_check_balance", lambda ids: None)  # reads real GPU properties
    moved = []

    def model_on_fake_gpu(d: int) -> LinearModel:
        model, _ = make_model(d)
        monkeypatch.setattr(model, "to", lambda device: moved.append(torch.device(device)) or model)
        return model

    return model_on_fake_gpu, moved


def test_wrap_two_gpus_uses_real_data_parallel(fake_cuda):
    model_on_fake_gpu, moved = fake_cuda
    model = model_on_fake_gpu(2)
    plan = parse_devices("cuda:0,1", gpus=GPUS)
    wrapped = wrap(model, plan)
    assert type(wrapped) is TimedDataParallel and isinstance(wrapped, nn.DataParallel)
    assert wrapped.device_ids == [0, 1]
    assert wrapped.output_device == 0
    assert wrapped.module is model and unwrap(wrapped) is model
    assert moved == [torch.device("cuda:0")]  # model.to(first device), in place, before wrapping


def test_wrap_reversed_gpus_gathers_on_the_first_listed(fake_cuda):
    model_on_fake_gpu, moved = fake_cuda
    model = model_on_fake_gpu(2)
    wrapped = wrap(model, parse_devices("cuda:1,0", gpus=GPUS))
    assert type(wrapped) is TimedDataParallel and isinstance(wrapped, nn.DataParallel)
    assert wrapped.device_ids == [1, 0] and wrapped.output_device == 1
    assert moved == [torch.device("cuda:1")]


def test_wrap_one_gpu_is_not_data_parallel(fake_cuda):
    model_on_fake_gpu, moved = fake_cuda
    model = model_on_fake_gpu(2)
    assert wrap(model, parse_devices("cuda:1", gpus=GPUS)) is model
    assert moved == [torch.device("cuda:1")]


def test_init_parameters_depends_on_the_seed_only():
    a, _ = make_model(4, seed=3)
    b, _ = make_model(4, seed=3)
    c, _ = make_model(4, seed=4)
    assert torch.equal(a.fc.weight, b.fc.weight) and torch.equal(a.fc.bias, b.fc.bias)
    assert not torch.equal(a.fc.weight, c.fc.weight)
    bound = 1 / 4**0.5
    assert a.fc.weight.abs().max().item() <= bound and a.fc.bias.abs().max().item() <= bound


# ---------------------------------------------------------------------------------------------------------
# The phases of a step.

PER_DEVICE = ("scatter", "replicate", "parallel_apply", "gather", "reduce")


def train_step(wrapped, x, y):
    """One step as the training loop takes it, with the loop's three marks; returns (output, StepPhases)."""
    recorder = phase_recorder(wrapped)
    out = wrapped(x)
    loss = F.mse_loss(out, y)
    loss.item()
    recorder.mark(phases.LOSS_END)
    loss.backward()
    recorder.mark(phases.BACKWARD_END)
    recorder.mark(phases.OPTIMIZER_END)  # no optimizer: the test only needs the mark
    return out, recorder.take()


def check_step_phases(taken, labels, sizes, d, itemsize):
    """The checks every DataParallel step's phases pass, emulated or timed."""
    got = taken.phases()
    busy = list(labels[: len(sizes)])
    # 1. the order of the step, and exactly one record per busy device for each per-device phase
    names = [p.name for p in got]
    assert names == sorted(names, key=DATAPARALLEL_PHASES.index)
    for name in PER_DEVICE:
        assert [p.device for p in got if p.name == name] == busy
    assert [p.device for p in got if p.name not in PER_DEVICE] == [labels[0]] * 3
    # 2. bytes: the formulas for these shapes and this dtype
    first = [True] + [False] * (len(sizes) - 1)
    bytes_of = {name: [p.bytes for p in got if p.name == name] for name in DATAPARALLEL_PHASES}
    assert bytes_of["scatter"] == [0 if f else r * d * itemsize for r, f in zip(sizes, first)]
    assert bytes_of["replicate"] == [0 if f else (d + 1) * itemsize for f in first]
    assert bytes_of["gather"] == [0 if f else r * itemsize for r, f in zip(sizes, first)]
    assert bytes_of["backward"] == [sum(sizes[1:]) * itemsize]
    assert bytes_of["reduce"] == [0 if f else (d + 1) * itemsize for f in first]
    assert bytes_of["parallel_apply"] == [0] * len(sizes)
    assert bytes_of["loss"] == bytes_of["optimizer"] == [0]
    assert taken.bytes == step_bytes(sum(sizes), len(labels), d, itemsize)["dataparallel"]
    # 3. times: present, non-negative, and each phase starts no earlier than every start of the one before
    assert got[0].start == 0.0
    assert all(p.start >= 0 and p.duration >= 0 for p in got)
    starts = {name: [p.start for p in got if p.name == name] for name in DATAPARALLEL_PHASES}
    for before, after in zip(DATAPARALLEL_PHASES, DATAPARALLEL_PHASES[1:]):
        assert max(starts[before]) <= min(starts[after]), (before, after)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n, k", [(200, 2), (200, 3), (5, 8), (1, 3), (64, 1)])
def test_emulated_step_records_its_phases(n, k, dtype):
    d = 3
    model, _ = make_model(d)
    model.to(dtype)
    plan = parse_devices(f"virtual:{k}", gpus=[])
    wrapped = wrap(model, plan)
    try:
        g = torch.Generator().manual_seed(n + k)
        x, y = torch.randn(n, d, generator=g, dtype=dtype), torch.randn(n, 1, generator=g, dtype=dtype)
        out, taken = train_step(wrapped, x, y)
        got = check_step_phases(taken, plan.labels, chunk_sizes(n, k), d, x.element_size())
        assert all(
            p.duration == 0 for p in got if p.name in ("replicate", "reduce")
        )  # free, or inside backward
        assert sum(p.name == "scatter" for p in got) == min(n, k)  # 5 rows on 8 devices: 5, 3 idle
        torch.testing.assert_close(out, model(x), atol=1e-6, rtol=0)  # the emulation's output is unchanged
    finally:
        wrapped.close()


def test_emulated_phases_reuse_the_specs_while_the_split_repeats():
    model, _ = make_model(2)
    wrapped = wrap(model, parse_devices("virtual:3", gpus=[]))
    try:
        x, y = torch.randn(10, 2), torch.randn(10, 1)
        _, a = train_step(wrapped, x, y)
        _, b = train_step(wrapped, x, y)
        _, c = train_step(wrapped, x[:7], y[:7])  # the epoch's smaller last batch: 3/3/1
        assert a.specs is b.specs and a.times != b.times
        assert c.specs is not a.specs
        assert [p.bytes for p in c.phases() if p.name == "scatter"] == [0, 3 * 2 * 4, 1 * 2 * 4]
        assert phase_recorder(wrapped).take() is None  # each step is taken once
    finally:
        wrapped.close()


def test_plain_model_has_no_phase_recorder():
    model, _ = make_model(2)
    assert phase_recorder(wrap(model, parse_devices("cpu", gpus=[]))) is None


TICKS = itertools.count()


class ClockEvent:
    """torch.cuda.Event's four calls on the host's clock; remembers the stream (here, a device index)."""

    def record(self, stream):
        # one microsecond a mark, in the order of the marks: with the host's clock, a worker preempted
        # between two devices' start marks moved one device's anchor past the other's next phase, and the
        # order of the phases, which each device times from its own anchor, failed under load
        self.t, self.stream = next(TICKS) * 1e-6, stream

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0  # milliseconds, as CUDA gives them


@pytest.mark.parametrize("spec, n", [("cuda:0,1", 200), ("cuda:1,0", 9), ("cuda:0,1", 1)])
def test_timed_data_parallel_marks_each_phase_on_its_device(fake_cuda, monkeypatch, spec, n):
    """TimedDataParallel.forward on the CPU: torch's phases replaced by their CPU equivalents, fake events."""
    model_on_fake_gpu, _ = fake_cuda
    d = 2
    model = model_on_fake_gpu(d)
    plan = parse_devices(spec, gpus=GPUS)
    ids = list(plan.device_ids)
    clock = CudaClock(_cuda_slot_devices(ids), event=ClockEvent, stream=lambda device: device)
    wrapped = TimedDataParallel(model, ids, plan.labels, clock=clock)
    wrapped.src_device_obj = torch.device("cpu")  # the fake GPU's parameters stay on the CPU
    calls = []

    def scatter(inputs, kwargs, device_ids):
        calls.append("scatter")
        chunks = inputs[0].chunk(len(device_ids))
        return tuple((c,) for c in chunks), tuple({} for _ in chunks)

    monkeypatch.setattr(wrapped, "scatter", scatter)
    monkeypatch.setattr(wrapped, "replicate", lambda m, devs: calls.append("replicate") or [m] * len(devs))
    monkeypatch.setattr(
        wrapped,
        "parallel_apply",
        lambda rs, ins, kws: calls.append("apply") or [r(*i) for r, i in zip(rs, ins)],
    )
    monkeypatch.setattr(wrapped, "gather", lambda outs, dev: calls.append("gather") or torch.cat(outs))
    x, y = torch.randn(n, d), torch.randn(n, 1)
    out, taken = train_step(wrapped, x, y)
    assert calls == ["scatter", "replicate", "apply", "gather"]
    torch.testing.assert_close(out, model(x), atol=1e-6, rtol=0)
    sizes = chunk_sizes(n, len(ids))
    check_step_phases(taken, plan.labels, sizes, d, 4)
    # each device's slots were marked on that device's stream
    events = clock._events
    for i, index in enumerate(ids[: len(sizes)]):
        start, scattered, replicated, _, applied, _ = _cuda_bounds(i)
        assert [events[s].stream for s in (start, scattered, replicated, applied)] == [index] * 4
    assert events[phases.LOSS_END].stream == ids[0]


@pytest.mark.parametrize("i, host", [(0, ""), (7, ""), (1, "cuda:0"), (3, "cuda:12")])
def test_a_virtual_label_is_taken_apart_where_it_is_made(i, host):
    from fitcore.core.devices import label_parts, virtual_label

    assert label_parts(virtual_label(i, host)) == (f"virtual:{i}", host or "CPU")
    for other in ("cpu", "cuda:1", "rank 1 · cpu · gloo", "virtual:2"):
        assert label_parts(other) == (other, None)
