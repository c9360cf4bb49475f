"""Device specs and plans, with a fake list of GPUs so that the CUDA branch is covered on any machine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import fitcore.core.devices as devices
from fitcore.core.config import ConfigError
from fitcore.core.devices import GPU, cuda_gpus, parse_devices

GPUS = [GPU(0, "A", 16 << 30), GPU(1, "B", 16 << 30)]
EMULATED_LABELS = tuple(f"virtual:{i} (emulated on CPU)" for i in range(8))


# spec, kind, normalised spec, labels, device_ids, uses the real nn.DataParallel
GOOD = [
    ("cpu", "cpu", "cpu", ("cpu",), (), False),
    (" CPU ", "cpu", "cpu", ("cpu",), (), False),
    ("virtual:1", "virtual", "virtual:1", EMULATED_LABELS[:1], (), False),
    ("virtual:3", "virtual", "virtual:3", EMULATED_LABELS[:3], (), False),
    ("Virtual:8", "virtual", "virtual:8", EMULATED_LABELS, (), False),
    ("cuda", "cuda", "cuda:0,1", ("cuda:0", "cuda:1"), (0, 1), True),
    ("cuda:0,1", "cuda", "cuda:0,1", ("cuda:0", "cuda:1"), (0, 1), True),
    ("cuda: 1, 0", "cuda", "cuda:1,0", ("cuda:1", "cuda:0"), (1, 0), True),
    ("cuda:0", "cuda", "cuda:0", ("cuda:0",), (0,), False),
    ("CUDA:1", "cuda", "cuda:1", ("cuda:1",), (1,), False),
]


@pytest.mark.parametrize("spec, kind, normal, labels, ids, data_parallel", GOOD)
def test_parse_devices(spec, kind, normal, labels, ids, data_parallel):
    plan = parse_devices(spec, gpus=GPUS)
    assert (plan.kind, plan.spec, plan.labels, plan.device_ids) == (kind, normal, labels, ids)
    assert plan.uses_data_parallel is data_parallel
    assert plan.emulated is (kind == "virtual")
    expected_first = torch.device(f"cuda:{ids[0]}") if kind == "cuda" else torch.device("cpu")
    assert plan.first_device == expected_first


ALLOWED_WITH_GPUS = "cpu, virtual:K (K from 1 to 8), cuda or cuda:i,j,... with i, j from 0 to 1"
ALLOWED_WITHOUT = "cpu, virtual:K (K from 1 to 8); this machine has 0 CUDA GPUs"

BAD = [
    ("gpu", GPUS, ALLOWED_WITH_GPUS),
    ("", GPUS, ALLOWED_WITH_GPUS),
    ("virtual:0", GPUS, ALLOWED_WITH_GPUS),
    ("virtual:9", GPUS, ALLOWED_WITH_GPUS),
    ("virtual:", GPUS, ALLOWED_WITH_GPUS),
    ("virtual:-1", GPUS, ALLOWED_WITH_GPUS),
    ("virtual:two", GPUS, ALLOWED_WITH_GPUS),
    ("cuda:5", GPUS, ALLOWED_WITH_GPUS),
    ("cuda:0,0", GPUS, ALLOWED_WITH_GPUS),
    ("cuda:0,2", GPUS, ALLOWED_WITH_GPUS),
    ("cuda:a", GPUS, ALLOWED_WITH_GPUS),
    ("cuda:", GPUS, ALLOWED_WITH_GPUS),
    ("cuda", [], ALLOWED_WITHOUT),
    ("cuda:0", [], ALLOWED_WITHOUT),
    ("gpu", [], ALLOWED_WITHOUT),
]


@pytest.mark.parametrize("spec, gpus, allowed", BAD)
def test_parse_devices_rejects(spec, gpus, allowed):
    with pytest.raises(ConfigError) as info:
        parse_devices(spec, gpus=gpus)
    err = info.value
    assert (err.field, err.value, err.allowed) == ("devices", spec, allowed)
    assert str(err) == f"devices: got {spec!r}; allowed: {allowed}"


def test_one_gpu_machine_allows_index_0_only():
    with pytest.raises(ConfigError) as info:
        parse_devices("cuda:1", gpus=GPUS[:1])
    assert info.value.allowed == "cpu, virtual:K (K from 1 to 8), cuda or cuda:i,j,... with i, j from 0 to 0"


@pytest.mark.parametrize(
    "spec, gpus, expected",
    [
        ("cuda", GPUS, "Let's use 2 GPUs!"),
        ("cuda:0,1", GPUS, "Let's use 2 GPUs!"),
        ("cuda:1", GPUS, "Using 1 GPU (cuda:1)."),
        ("cpu", [], "Using the CPU (1 device)."),
        (
            "virtual:3",
            [],
            "Emulating 3 devices on the CPU (virtual:3): the batch is split with DataParallel's rule, "
            "but no GPU is used.",
        ),
        (
            "virtual:1",
            [],
            "Emulating 1 device on the CPU (virtual:1): the batch is split with DataParallel's rule, "
            "but no GPU is used.",
        ),
    ],
)
def test_describe(spec, gpus, expected):
    assert parse_devices(spec, gpus=gpus).describe() == expected


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_virtual_plans_say_they_are_emulated(k):
    plan = parse_devices(f"virtual:{k}", gpus=GPUS)
    assert plan.emulated and not plan.uses_data_parallel and plan.device_ids == ()
    assert all("emulated" in label for label in plan.labels)
    assert "Emulating" in plan.describe() and "no GPU is used" in plan.describe()
    assert "GPUs!" not in plan.describe()


def test_gpu_label():
    assert GPU(1, "B", 16 << 30).label == "cuda:1 · B · 16 GiB"
    assert GPU(0, "H200", 141 * 2**30 + 2**29).label == "cuda:0 · H200 · 142 GiB"


def test_cuda_gpus_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_gpus() == []


def test_cuda_gpus_reads_torch(monkeypatch):
    props = [
        SimpleNamespace(name="A", total_memory=16 << 30),
        SimpleNamespace(name="B", total_memory=8 << 30),
    ]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    assert cuda_gpus() == [GPU(0, "A", 16 << 30), GPU(1, "B", 8 << 30)]


def test_parse_devices_discovers_gpus_when_not_given(monkeypatch):
    monkeypatch.setattr(devices, "cuda_gpus", lambda: GPUS)
    assert parse_devices("cuda").device_ids == (0, 1)
    monkeypatch.setattr(devices, "cuda_gpus", lambda: [])
    with pytest.raises(ConfigError, match="this machine has 0 CUDA GPUs"):
        parse_devices("cuda")


# virtual:K@cuda:i: the emulation with its K replicas on one real GPU
ON_GPU_ALLOWED = "virtual:K@cuda:i with K from 1 to 8 and i from 0 to 1"


@pytest.mark.parametrize(
    "spec, normal, k, index",
    [
        ("virtual:3@cuda:0", "virtual:3@cuda:0", 3, 0),
        (" Virtual:1 @ CUDA:1 ", "virtual:1@cuda:1", 1, 1),
        ("virtual:8@cuda:1", "virtual:8@cuda:1", 8, 1),
    ],
)
def test_parse_virtual_on_gpu(spec, normal, k, index):
    plan = parse_devices(spec, gpus=GPUS)
    assert (plan.kind, plan.spec, plan.device_ids) == ("virtual", normal, (index,))
    assert plan.labels == tuple(f"virtual:{i} (emulated on cuda:{index})" for i in range(k))
    assert plan.emulated and not plan.uses_data_parallel
    assert plan.first_device == torch.device(f"cuda:{index}")
    assert plan.describe() == (
        f"Emulating {k} device{'s' if k > 1 else ''} on cuda:{index} ({normal}): the batch is split with "
        f"DataParallel's rule, and every replica runs on cuda:{index}."
    )


@pytest.mark.parametrize(
    "spec, gpus, allowed",
    [
        ("virtual:3@cuda:2", GPUS, ON_GPU_ALLOWED),
        ("virtual:0@cuda:0", GPUS, ON_GPU_ALLOWED),
        ("virtual:9@cuda:0", GPUS, ON_GPU_ALLOWED),
        ("virtual:@cuda:0", GPUS, ON_GPU_ALLOWED),
        ("virtual:3@", GPUS, ON_GPU_ALLOWED),
        ("virtual:3@cuda", GPUS, ON_GPU_ALLOWED),
        ("virtual:3@cuda:0,1", GPUS, ON_GPU_ALLOWED),
        ("virtual:3@cpu", GPUS, ON_GPU_ALLOWED),
        ("virtual:3@cuda:0", [], ALLOWED_WITHOUT),
        ("virtual:3@cuda:1", GPUS[:1], "virtual:K@cuda:i with K from 1 to 8 and i from 0 to 0"),
    ],
)
def test_parse_virtual_on_gpu_rejects(spec, gpus, allowed):
    with pytest.raises(ConfigError) as info:
        parse_devices(spec, gpus=gpus)
    assert (info.value.field, info.value.value, info.value.allowed) == ("devices", spec, allowed)


def test_cli_rejects_virtual_on_gpu_without_one(capsys, monkeypatch):
    from fitcore.cli import main

    monkeypatch.setattr(devices, "cuda_gpus", lambda: [])  # the same answer on a machine with GPUs
    assert main(["--devices", "virtual:3@cuda:0", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fitcore: error: --devices: got 'virtual:3@cuda:0'; allowed: {ALLOWED_WITHOUT}"]
