"""DataParallel's wrappers: nn.DataParallel on 2+ GPUs (timed), an emulation on the CPU.

DataParallel's forward has four phases (torch/nn/parallel/data_parallel.py):
  1. scatter: cut the batch along dim 0 with `tensor.chunk(len(device_ids))`, one chunk per device;
  2. replicate: copy the module to as many devices as there are chunks;
  3. parallel_apply: run each replica on its chunk, one thread per replica;
  4. gather: concatenate the outputs on device_ids[0].
The emulation below keeps phases 1, 3 and 4 exactly and makes phase 2 free: on one CPU every replica can
share the module's parameters, so the gradients add up on them just as DataParallel's reduce does.

Both wrappers record each step's phases on their `phases` (a fitcore.core.phases.PhaseRecorder): the wrapper
marks its forward's phases, the training loop marks its own three and takes the step. The lab
(fitcore.kit.equivalence's reference, fitcore.lab.traps) wraps its models with `wrap` too.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Sequence

import torch
from torch import nn

from fitcore.core.devices import DevicePlan
from fitcore.core.parallel import LinearModel
from fitcore.core.phases import START, CudaClock, HostClock, PhaseRecorder, PhaseSpec
from fitcore.strategies.dataparallel.phases import dataparallel_specs

__all__ = [
    "EmulatedDataParallel",
    "TimedDataParallel",
    "phase_recorder",
    "unwrap",
    "wrap",
]


# The emulation's time slots after the four every layout has (fitcore.core.phases.START ... OPTIMIZER_END):
# one chunk call scatters for every device and replicate is free, so all devices share SCATTERED; each
# replica's forward has a start and a stop of its own, marked in its own thread.
_E_SCATTERED, _E_GATHER_START, _E_GATHERED, _E_APPLY = 4, 5, 6, 7


def _emulated_bounds(i: int) -> tuple[int, int, int, int, int, int]:
    """Busy device i's slots: (start, scattered, replicated, apply start, applied, gather start)."""
    return START, _E_SCATTERED, _E_SCATTERED, _E_APPLY + 2 * i, _E_APPLY + 2 * i + 1, _E_GATHER_START


class EmulatedDataParallel(nn.Module):
    """DataParallel's scatter / parallel_apply / gather on the CPU, for classrooms without GPUs.

    Each forward records its phases on `self.phases` (a PhaseRecorder): scatter, a free replicate, each
    replica's forward, gather. Their bytes are what DataParallel would move on as many GPUs.

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
        slots = _E_APPLY + 2 * len(labels)
        device = next(module.parameters()).device
        # on a GPU (virtual:K@cuda:i) the work runs after the host queues it: CUDA events time the work itself
        clock = CudaClock([device.index] * slots) if device.type == "cuda" else HostClock(slots)
        self.phases = PhaseRecorder(clock)

    def _specs(self, chunks: tuple[torch.Tensor, ...]) -> tuple[PhaseSpec, ...]:
        x = chunks[0]  # (rows, d)
        sizes = [c.shape[0] for c in chunks]
        d, itemsize = x.shape[1], x.element_size()
        return dataparallel_specs(self.labels, sizes, d, itemsize, _emulated_bounds, _E_GATHERED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mark = self.phases.mark
        mark(START)
        chunks = x.chunk(len(self._replicas))  # 1. scatter: DataParallel's own rule
        mark(_E_SCATTERED)
        self.phases.use((x.shape[0], x.dtype), self._specs, chunks)
        if len(chunks) == 1:  # parallel_apply runs a single replica inline, and gather has nothing to join
            mark(_E_APPLY)
            out = self._replicas[0](chunks[0])
            mark(_E_APPLY + 1)
            mark(_E_GATHER_START)
            mark(_E_GATHERED)
            return out
        # 3. parallel_apply: grad mode is thread-local, so carry it into the worker threads
        grad_enabled = torch.is_grad_enabled()

        def apply(i: int) -> torch.Tensor:
            with torch.set_grad_enabled(grad_enabled):
                mark(_E_APPLY + 2 * i)
                out = self._replicas[i](chunks[i])
                mark(_E_APPLY + 2 * i + 1)
                return out

        futures = [self._pool.submit(apply, i) for i in range(1, len(chunks))]
        outputs = [apply(0)] + [f.result() for f in futures]
        mark(_E_GATHER_START)
        out = torch.cat(outputs, dim=0)  # 4. gather on the first device
        mark(_E_GATHERED)
        return out

    def close(self) -> None:
        """Stop the replica threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


# TimedDataParallel's slots: GATHERED on the first device after the four every layout has, then four per
# device, each marked on that device's stream: (start, scattered, replicated, applied). The first device
# starts at START itself, so its own start slot stays unused.
_C_GATHERED, _C_PER_DEVICE = 4, 5


def _cuda_bounds(i: int) -> tuple[int, int, int, int, int, int]:
    """Device i's slots: (start, scattered, replicated, apply start, applied, gather start)."""
    base = _C_PER_DEVICE + 4 * i
    start = START if i == 0 else base
    return start, base + 1, base + 2, base + 2, base + 3, base + 3


def _cuda_slot_devices(device_ids: Sequence[int]) -> list[int | None]:
    """The CUDA device each TimedDataParallel slot is marked on."""
    first = device_ids[0]
    devices: list[int | None] = [first] * _C_PER_DEVICE
    for i, index in enumerate(device_ids):
        devices += [None if i == 0 else index, index, index, index]
    return devices


class TimedDataParallel(nn.DataParallel):
    """nn.DataParallel whose forward records its phases per device, with CUDA events, on `self.phases`.

    forward is DataParallel.forward (torch/nn/parallel/data_parallel.py) step for step, with marks between
    its scatter, replicate, parallel_apply and gather. With a single device DataParallel runs the module
    itself and there are no phases: `phases.take()` gives None.

    Args:
        labels: one per device, for the phases (default "cuda:<index>").
        clock: where the marks go (default: a CudaClock over this wrapper's slots).
    """

    def __init__(self, module: nn.Module, device_ids: Sequence[int], labels: Sequence[str] = (), clock=None):
        super().__init__(module, device_ids=list(device_ids))
        self.labels = tuple(labels) or tuple(f"cuda:{i}" for i in self.device_ids)
        self._bounds = tuple(_cuda_bounds(i) for i in range(len(self.device_ids)))
        self.phases = PhaseRecorder(clock or CudaClock(_cuda_slot_devices(self.device_ids)))

    def _specs(self, sizes: tuple[int, ...], x: torch.Tensor) -> tuple[PhaseSpec, ...]:
        return dataparallel_specs(self.labels, sizes, x.shape[1], x.element_size(), _cuda_bounds, _C_GATHERED)

    def forward(self, *inputs, **kwargs):
        with torch.autograd.profiler.record_function("DataParallel.forward"):
            if not self.device_ids:
                return self.module(*inputs, **kwargs)
            for t in chain(self.module.parameters(), self.module.buffers()):
                if t.device != self.src_device_obj:
                    raise RuntimeError(
                        "module must have its parameters and buffers "
                        f"on device {self.src_device_obj} (device_ids[0]) but found one of "
                        f"them on device: {t.device}"
                    )
            mark, bounds = self.phases.mark, self._bounds
            for b in bounds:
                mark(b[0])
            inputs, module_kwargs = self.scatter(inputs, kwargs, self.device_ids)  # 1. scatter
            if not inputs and not module_kwargs:
                inputs = ((),)
                module_kwargs = ({},)
            if len(self.device_ids) == 1:
                return self.module(*inputs[0], **module_kwargs[0])
            busy = bounds[: len(inputs)]
            x = inputs[0][0]  # (rows, d): the first chunk
            sizes = tuple(i[0].shape[0] for i in inputs)
            self.phases.use((sizes, x.dtype), self._specs, sizes, x)
            for b in busy:
                mark(b[1])
            replicas = self.replicate(self.module, self.device_ids[: len(inputs)])  # 2. replicate
            for b in busy:
                mark(b[2])
            outputs = self.parallel_apply(replicas, inputs, module_kwargs)  # 3. parallel_apply
            for b in busy:
                mark(b[4])
            out = self.gather(outputs, self.output_device)  # 4. gather
            mark(_C_GATHERED)
            return out


def phase_recorder(model: nn.Module) -> PhaseRecorder | None:
    """The PhaseRecorder of a wrapped model, or None for a model that runs on one device as it is."""
    return model.phases if isinstance(model, (TimedDataParallel, EmulatedDataParallel)) else None


def wrap(model: LinearModel, plan: DevicePlan) -> nn.Module:
    """Put `model` on the plan's first device and wrap it for the plan's kind of parallelism."""
    model.to(plan.first_device)  # model.to moves in place; tensor.to returns a copy
    if plan.uses_data_parallel:
        return TimedDataParallel(model, plan.device_ids, plan.labels)
    if plan.emulated:
        return EmulatedDataParallel(model, plan.labels)
    return model


def unwrap(model: nn.Module) -> LinearModel:
    """The module that holds the parameters, whatever wraps it."""
    return model.module if isinstance(model, (nn.DataParallel, EmulatedDataParallel)) else model
