"""Device discovery and the device spec: `cpu`, `cuda`, `cuda:0,1,...` or `virtual:K`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fitcore.errors import ConfigError

MAX_VIRTUAL = 8
EMULATED = "emulated on CPU"


@dataclass(frozen=True)
class GPU:
    """One CUDA GPU as torch reports it."""

    index: int
    name: str
    total_memory: int  # bytes

    @property
    def label(self) -> str:
        return f"cuda:{self.index} · {self.name} · {self.total_memory / 2**30:.0f} GiB"


@dataclass(frozen=True)
class DevicePlan:
    """Where a run's replicas live.

    kind is "cpu" (one device, no parallelism), "cuda" (1+ GPUs; 2+ use the real nn.DataParallel) or
    "virtual" (K replicas on the CPU, split with DataParallel's rule: an emulation, labelled so).
    """

    kind: str
    spec: str  # the spec as given, normalised
    labels: tuple[str, ...]  # one per device, as shown to the user
    device_ids: tuple[int, ...] = ()  # CUDA indices, for nn.DataParallel(device_ids=...)

    @property
    def emulated(self) -> bool:
        return self.kind == "virtual"

    @property
    def first_device(self) -> torch.device:
        """Where the data, the master parameters and the gathered output live."""
        return torch.device(f"cuda:{self.device_ids[0]}") if self.kind == "cuda" else torch.device("cpu")

    @property
    def uses_data_parallel(self) -> bool:
        """True where the real torch.nn.DataParallel wraps the model."""
        return self.kind == "cuda" and len(self.device_ids) >= 2

    def describe(self) -> str:
        """The first line of the tutorial's output, honest about emulation."""
        k = len(self.labels)
        if self.kind == "virtual":
            return (
                f"Emulating {k} device{'s' if k > 1 else ''} on the CPU ({self.spec}): "
                "the batch is split with DataParallel's rule, but no GPU is used."
            )
        if self.kind == "cuda":
            return f"Let's use {k} GPUs!" if k > 1 else f"Using 1 GPU (cuda:{self.device_ids[0]})."
        return "Using the CPU (1 device)."


def cuda_gpus() -> list[GPU]:
    """The CUDA GPUs this process can see (an empty list on a CPU-only machine)."""
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(GPU(index=i, name=p.name, total_memory=p.total_memory))
    return gpus


def virtual_label(i: int) -> str:
    return f"virtual:{i} ({EMULATED})"


def parse_devices(spec: str, gpus: list[GPU] | None = None) -> DevicePlan:
    """Turn a device spec into a DevicePlan, or raise ConfigError naming what this machine allows.

    Args:
        spec: "cpu", "cuda" (every GPU), "cuda:0,1" (those GPUs), or "virtual:K" with K from 1 to 8.
        gpus: the GPUs to check against; discovered when None (tests pass a list).
    """
    gpus = cuda_gpus() if gpus is None else gpus
    text = str(spec).strip().lower().replace(" ", "")
    have = f"this machine has {len(gpus)} CUDA GPU{'s' if len(gpus) != 1 else ''}"
    allowed = "cpu, virtual:K (K from 1 to 8)" + (
        f", cuda or cuda:i,j,... with i, j from 0 to {len(gpus) - 1}" if gpus else f"; {have}"
    )
    if text == "cpu":
        return DevicePlan("cpu", "cpu", ("cpu",))
    if text.startswith("virtual:"):
        k = text.split(":", 1)[1]
        if not k.isdigit() or not 1 <= int(k) <= MAX_VIRTUAL:
            raise ConfigError("devices", spec, allowed)
        k = int(k)
        return DevicePlan("virtual", f"virtual:{k}", tuple(virtual_label(i) for i in range(k)))
    if text == "cuda" or text.startswith("cuda:"):
        if not gpus:
            raise ConfigError("devices", spec, allowed)
        if text == "cuda":
            ids = [g.index for g in gpus]
        else:
            parts = text.split(":", 1)[1].split(",")
            if not all(p.isdigit() for p in parts):
                raise ConfigError("devices", spec, allowed)
            ids = [int(p) for p in parts]
        known = {g.index for g in gpus}
        if len(set(ids)) != len(ids) or not set(ids) <= known:
            raise ConfigError("devices", spec, allowed)
        return DevicePlan(
            "cuda",
            "cuda:" + ",".join(map(str, ids)),
            tuple(f"cuda:{i}" for i in ids),
            tuple(ids),
        )
    raise ConfigError("devices", spec, allowed)
