"""Device discovery and the device spec: `cpu`, `cuda`, `cuda:0,1,...`, `virtual:K` or `virtual:K@cuda:i`."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from fitcore.core.errors import ConfigError, Text
from fitcore.core.i18n import t

MAX_VIRTUAL = 8
# a count or a GPU index: ASCII digits only (str.isdigit() also takes "²", which int() refuses, and "٣")
INDEX_PATTERN = re.compile(r"[0-9]{1,4}")
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
    "virtual" (K replicas split with DataParallel's rule: an emulation, labelled so). A virtual plan runs its
    replicas on the CPU, or with `virtual:K@cuda:i` all of them on that one GPU (device_ids == (i,)), so
    that a one-GPU machine shows the split on real CUDA kernels.
    """

    kind: str
    spec: str  # the spec as given, normalised
    labels: tuple[str, ...]  # one per device, as shown to the user
    device_ids: tuple[int, ...] = ()  # CUDA indices, for nn.DataParallel(device_ids=...); a virtual
    # plan's one GPU, if it has one

    @property
    def emulated(self) -> bool:
        return self.kind == "virtual"

    @property
    def first_device(self) -> torch.device:
        """Where the data, the master parameters and the gathered output live."""
        return torch.device(f"cuda:{self.device_ids[0]}") if self.device_ids else torch.device("cpu")

    @property
    def host(self) -> str:
        """Where a virtual plan's replicas run: "CPU" or "cuda:i"."""
        return f"cuda:{self.device_ids[0]}" if self.device_ids else "CPU"

    @property
    def uses_data_parallel(self) -> bool:
        """True where the real torch.nn.DataParallel wraps the model."""
        return self.kind == "cuda" and len(self.device_ids) >= 2

    def describe(self) -> str:
        """The first line of the tutorial's output, honest about emulation."""
        k = len(self.labels)
        devices = Text.count("count.device", k)
        if self.kind == "virtual":
            if self.device_ids:
                return t("devices.describe.virtual_gpu", devices=devices, host=self.host, spec=self.spec)
            return t("devices.describe.virtual_cpu", devices=devices, spec=self.spec)
        if self.kind == "cuda":
            if k > 1:
                return t("devices.describe.gpus", k=k)
            return t("devices.describe.gpu", id=self.device_ids[0])
        return t("devices.describe.cpu")


def cuda_gpus() -> list[GPU]:
    """The CUDA GPUs this process can see (an empty list on a CPU-only machine)."""
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(GPU(index=i, name=p.name, total_memory=p.total_memory))
    return gpus


_GPU_INDEX = re.compile(r"cuda:([0-9]{1,4}(?:,[0-9]{1,4})*)")


def run_gpus(spec: str, here: list[GPU]) -> list[GPU]:
    """The GPUs to read a run's device spec against: this machine's, and a stand-in for each GPU the spec
    names that this machine lacks. A run shown (a replay recorded on an H200, say) ran where its devices
    were; the page describes it on a laptop without checking it against the laptop."""
    known = {g.index for g in here}
    named = {int(i) for m in _GPU_INDEX.finditer(str(spec).lower()) for i in m[1].split(",")}
    return list(here) + [GPU(i, "recorded GPU", 0) for i in sorted(named - known)]


def virtual_label(i: int, host: str = "") -> str:
    """virtual:i's label; `host` ("cuda:0") names the GPU its replica runs on, "" the CPU."""
    return f"virtual:{i} (emulated on {host})" if host else f"virtual:{i} ({EMULATED})"


_EMULATED_LABEL = re.compile(r"^(virtual:\d+) \(emulated on (.+)\)$")


def label_parts(label: str) -> tuple[str, str | None]:
    """virtual_label read back: ("virtual:0", "CPU") for "virtual:0 (emulated on CPU)", ("virtual:1",
    "cuda:0") for one emulated on a GPU, (label, None) for any other device's label. The one place a label
    is taken apart: the labels stay strings in events and recordings, which name the device as a run saw
    it."""
    emulated = _EMULATED_LABEL.match(label)
    return (emulated[1], emulated[2]) if emulated else (label, None)


def parse_devices(spec: str, gpus: list[GPU] | None = None) -> DevicePlan:
    """Turn a device spec into a DevicePlan, or raise ConfigError naming what this machine allows.

    Args:
        spec: "cpu", "cuda" (every GPU), "cuda:0,1" (those GPUs), "virtual:K" with K from 1 to 8, or
            "virtual:K@cuda:i" (the K emulated replicas all on GPU i).
        gpus: the GPUs to check against; discovered when None (tests pass a list).
    """
    gpus = cuda_gpus() if gpus is None else gpus
    text = str(spec).strip().lower().replace(" ", "")
    if gpus:
        allowed = Text("devices.allowed.gpus", most=MAX_VIRTUAL, last=len(gpus) - 1)
    else:
        allowed = Text("devices.allowed.cpu", most=MAX_VIRTUAL, gpus=Text.count("devices.count.gpu", 0))
    if text == "cpu":
        return DevicePlan("cpu", "cpu", ("cpu",))
    if text.startswith("virtual:") and "@" in text:
        return _virtual_on_gpu(spec, text, gpus, allowed)
    if text.startswith("virtual:"):
        k = text.split(":", 1)[1]
        if not INDEX_PATTERN.fullmatch(k) or not 1 <= int(k) <= MAX_VIRTUAL:
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
            if not all(INDEX_PATTERN.fullmatch(p) for p in parts):
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


def _virtual_on_gpu(spec: str, text: str, gpus: list[GPU], allowed: Text) -> DevicePlan:
    """virtual:K@cuda:i: the emulation with its K replicas on GPU i; without GPUs, the general `allowed`."""
    if gpus:
        allowed = Text("devices.allowed.virtual_gpu", most=MAX_VIRTUAL, last=len(gpus) - 1)
    k, _, host = text[len("virtual:") :].partition("@")
    index = host[len("cuda:") :] if host.startswith("cuda:") else ""
    if not gpus or not (INDEX_PATTERN.fullmatch(k) and 1 <= int(k) <= MAX_VIRTUAL):
        raise ConfigError("devices", spec, allowed)
    if not INDEX_PATTERN.fullmatch(index) or int(index) not in {g.index for g in gpus}:
        raise ConfigError("devices", spec, allowed)
    k, host = int(k), f"cuda:{int(index)}"
    labels = tuple(virtual_label(i, host) for i in range(k))
    return DevicePlan("virtual", f"virtual:{k}@{host}", labels, (int(index),))
