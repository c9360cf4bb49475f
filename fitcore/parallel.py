"""The model and its data-parallel wrappers: real nn.DataParallel on 2+ GPUs, an emulation on the CPU.

DataParallel's forward has four phases (torch/nn/parallel/data_parallel.py):
  1. scatter: cut the batch along dim 0 with `tensor.chunk(len(device_ids))`, one chunk per device;
  2. replicate: copy the module to as many devices as there are chunks;
  3. parallel_apply: run each replica on its chunk, one thread per replica;
  4. gather: concatenate the outputs on device_ids[0].
The emulation below keeps phases 1, 3 and 4 exactly and makes phase 2 free: on one CPU every replica can
share the module's parameters, so the gradients add up on them just as DataParallel's reduce does.
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from fitcore.devices import DevicePlan


def chunk_sizes(n: int, k: int) -> tuple[int, ...]:
    """Rows per replica when DataParallel scatters n rows over k devices.

    `tensor.chunk(k)` gives chunks of ceil(n / k) rows and a smaller last one, so a batch can use fewer
    than k devices: 9 rows on 4 devices is 3/3/3, and 5 rows on 8 devices is five chunks of 1.
    """
    if n < 1 or k < 1:
        raise ValueError(f"chunk_sizes needs n >= 1 and k >= 1, got n={n}, k={k}")
    size = math.ceil(n / k)
    full, rest = divmod(n, size)
    return (size,) * full + ((rest,) if rest else ())


class ReplicaRecord(NamedTuple):
    """What one replica's forward really saw: the tutorial's `In Model:` line.

    A NamedTuple, not a frozen dataclass: one is made on every forward, and it is built in half the time.
    """

    device: str
    input_shape: tuple[int, ...]  # x.shape itself: a torch.Size is a tuple; copying it cost every forward
    output_shape: tuple[int, ...]


class ShapeRecorder:
    """Collects ReplicaRecords from forward calls that may run in several threads at once.

    No lock: list.append is atomic, and take() runs between forwards, never during one (DataParallel and
    the emulation join their replica threads before forward returns). A lock taken twice a step cost about
    2 µs of a 170 µs step.
    """

    def __init__(self):
        self._records: list[ReplicaRecord] = []

    def record(self, device: str, input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> None:
        self._records.append(ReplicaRecord(device, input_shape, output_shape))

    def take(self) -> list[ReplicaRecord]:
        """Return the records since the last take and start afresh."""
        records, self._records = self._records, []
        return records


def _device_name(x: torch.Tensor) -> str:
    """str(x.device), without making and printing a torch.device on the CPU: that costs ~5 µs a step."""
    return "cpu" if x.is_cpu else str(x.device)


class LinearModel(nn.Module):
    """nn.Linear(d, 1) that records, inside forward, the shapes each replica was given and returned."""

    def __init__(self, n_features: int, recorder: ShapeRecorder | None = None):
        super().__init__()
        self.fc = nn.Linear(n_features, 1)
        self.recorder = recorder
        self.device_label: str | None = None  # set on emulated replicas; real ones report x.device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # nn.Linear's own forward, without a second module call (its hooks' checks cost ~6 µs a step);
        # self.fc is looked up once, as each lookup goes through nn.Module.__getattr__
        fc = self.fc
        out = F.linear(x, fc.weight, fc.bias)  # (rows, d) -> (rows, 1)
        if self.recorder is not None:
            self.recorder.record(self.device_label or _device_name(x), x.shape, out.shape)
        return out


class EmulatedDataParallel(nn.Module):
    """DataParallel's scatter / parallel_apply / gather on the CPU, for classrooms without GPUs.

    .. warning::
        An emulation: every replica runs on the CPU and no data moves between devices. The split of each
        batch, the threads and the gathered output are DataParallel's; the speed-up is not.
    """

    def __init__(self, module: LinearModel, labels: tuple[str, ...]):
        super().__init__()
        self.module = module
        self.labels = labels
        # Shallow copies share the parameters (and the recorder) and differ only in their label; a plain
        # list keeps them out of .parameters() so the optimizer sees each parameter once.
        self._replicas = []
        for label in labels:
            replica = copy.copy(module)
            replica.device_label = label
            self._replicas.append(replica)
        self._pool = ThreadPoolExecutor(len(labels) - 1, "fitcore-replica") if len(labels) > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chunks = x.chunk(len(self._replicas))  # 1. scatter: DataParallel's own rule
        if len(chunks) == 1:
            return self._replicas[0](chunks[0])  # parallel_apply runs a single replica inline
        # 3. parallel_apply: grad mode is thread-local, so carry it into the worker threads
        grad_enabled = torch.is_grad_enabled()

        def apply(i: int) -> torch.Tensor:
            with torch.set_grad_enabled(grad_enabled):
                return self._replicas[i](chunks[i])

        futures = [self._pool.submit(apply, i) for i in range(1, len(chunks))]
        outputs = [apply(0)] + [f.result() for f in futures]
        return torch.cat(outputs, dim=0)  # 4. gather on the first device

    def close(self) -> None:
        """Stop the replica threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def init_parameters(model: LinearModel, seed: int) -> None:
    """nn.Linear's default uniform(-1/sqrt(d), 1/sqrt(d)) initialisation, drawn from `seed` alone."""
    g = torch.Generator().manual_seed(seed)
    bound = 1 / math.sqrt(model.fc.in_features)
    with torch.no_grad():
        for p in (model.fc.weight, model.fc.bias):
            p.copy_(torch.rand(p.shape, generator=g) * 2 * bound - bound)


def wrap(model: LinearModel, plan: DevicePlan) -> nn.Module:
    """Put `model` on the plan's first device and wrap it for the plan's kind of parallelism."""
    model.to(plan.first_device)  # model.to moves in place; tensor.to returns a copy
    if plan.uses_data_parallel:
        return nn.DataParallel(model, device_ids=list(plan.device_ids))
    if plan.emulated:
        return EmulatedDataParallel(model, plan.labels)
    return model


def unwrap(model: nn.Module) -> LinearModel:
    """The module that holds the parameters, whatever wraps it."""
    return model.module if isinstance(model, (nn.DataParallel, EmulatedDataParallel)) else model
