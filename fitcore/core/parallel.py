"""The model every strategy trains: nn.Linear(d, 1) that records the shapes each replica saw, and its seeded
initialisation.

DataParallel's wrappers around it (nn.DataParallel timed, and its emulation on the CPU) live in its package:
fitcore.strategies.dataparallel.wrappers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from fitcore.core.chunks import chunk_sizes  # DataParallel's split rule, which every strategy's rows follow

__all__ = ["LinearModel", "ReplicaRecord", "ShapeRecorder", "chunk_sizes", "init_parameters"]


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
        # whether forwards record now: a loop whose batches split as the step before's did turns it off
        # (tensor.chunk gives the same chunks for the same rows), and on again when the rows change
        self.on = True

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
        recorder = self.recorder
        if recorder is not None and recorder.on:
            recorder.record(self.device_label or _device_name(x), x.shape, out.shape)
        return out


def init_parameters(model: LinearModel, seed: int) -> None:
    """nn.Linear's default uniform(-1/sqrt(d), 1/sqrt(d)) initialisation, drawn from `seed` alone."""
    g = torch.Generator().manual_seed(seed)
    bound = 1 / math.sqrt(model.fc.in_features)
    with torch.no_grad():
        for p in (model.fc.weight, model.fc.bias):
            p.copy_(torch.rand(p.shape, generator=g) * 2 * bound - bound)
