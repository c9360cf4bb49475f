"""DataParallel's chunking rule, the CPU emulation of it, and wrapping for each kind of device plan."""

from __future__ import annotations

import importlib
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fitcore.devices import GPU, parse_devices
from fitcore.parallel import (
    EmulatedDataParallel,
    LinearModel,
    ShapeRecorder,
    chunk_sizes,
    init_parameters,
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
    assert type(wrapped) is nn.DataParallel
    assert wrapped.device_ids == [0, 1]
    assert wrapped.output_device == 0
    assert wrapped.module is model and unwrap(wrapped) is model
    assert moved == [torch.device("cuda:0")]  # model.to(first device), in place, before wrapping


def test_wrap_reversed_gpus_gathers_on_the_first_listed(fake_cuda):
    model_on_fake_gpu, moved = fake_cuda
    model = model_on_fake_gpu(2)
    wrapped = wrap(model, parse_devices("cuda:1,0", gpus=GPUS))
    assert type(wrapped) is nn.DataParallel
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
