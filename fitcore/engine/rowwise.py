"""PyTorch's own tensor parallelism of the linear layer, as every strategy with a `tp` dimension wires it:
RowwiseParallel over the features, with its forward's two moments marked, and a rank's columns of X handed
to it as a DTensor.

`parallelize_module(fc, tp_mesh, RowwiseParallel())` (torch.distributed.tensor.parallel) shards the weight
[1, d] on its features (Shard(1), torch.chunk's rule) and keeps b whole on every rank (Replicate);
RowwiseParallel's output hook all-reduces the partial outputs into the whole X·W + b on every rank of the
`tp` group. Two forward hooks around it time the step: one registered before parallelize_module runs before
the all-reduce (the partial output is done), one registered after it runs after (and waits for the
all-reduce's result).
"""

from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

from fitcore.engine.loop import own_rows


def shard_features(
    fc: nn.Module, tp_mesh: DeviceMesh, mark: Callable[[int], None], partial_end: int, end: int
) -> None:
    """Cut `fc`'s weight by features over `tp_mesh` (RowwiseParallel), marking slot `partial_end` when a
    rank's partial output is done and `end` once the all-reduce of the partial outputs has arrived."""
    _quiet_known_warnings()
    fc.register_forward_hook(lambda module, args, output: mark(partial_end))  # before the all-reduce
    parallelize_module(fc, tp_mesh, RowwiseParallel())  # weight Shard(1), bias Replicate, output all-reduced
    fc.register_forward_hook(_after_allreduce(mark, end))


def _quiet_known_warnings() -> None:
    """Two warnings torch prints on every rank of a 2-D mesh, about what is meant: a column shard of W is a
    strided view (torch.chunk's along dim 1), whose gradient DDP copies into its bucket instead of aliasing
    it; and RowwiseParallel's output is a view that fully_shard wraps (nothing in fitcore writes in place)."""
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")


Hook = Callable[[nn.Module, tuple[object, ...], torch.Tensor], None]  # a module's forward hook


def _after_allreduce(mark: Callable[[int], None], end: int) -> Hook:
    """The forward hook after RowwiseParallel's: wait for the all-reduce (an AsyncCollectiveTensor, whose
    trigger_wait waits in place and keeps the output's autograd), then mark."""

    def hook(module: nn.Module, args: tuple[object, ...], output: torch.Tensor) -> None:
        if hasattr(output, "trigger_wait"):
            output.trigger_wait()
        mark(end)

    return hook


def columns_input(xb: torch.Tensor, tp_mesh: DeviceMesh, d: int) -> DTensor:
    """A rank's columns of its rows, (b, hi - lo), as a DTensor of the rows' whole shape (b, d), so that
    uneven columns (3 features on 2 ranks) keep their true global shape."""
    return DTensor.from_local(xb, tp_mesh, [Shard(1)], run_check=False, shape=(xb.shape[0], d), stride=(d, 1))


class Cut(NamedTuple):
    """A rank's columns of X on a 2-D mesh: its `tp` group's DeviceMesh, its features [lo, hi) of d."""

    tp_mesh: DeviceMesh
    lo: int
    hi: int
    d: int


def block_inputs(
    X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, cut: Cut | None
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """A rank's inputs where it takes its own rows (DDP's, FSDP's): X's and y's rows `idx`, and on a 2-D mesh
    only its columns of them, as a DTensor (columns_input); with the shape of what it holds."""
    x, yb, shape = own_rows(X, y, idx)  # (b, d), (b, 1): this rank's rows only
    if cut is None:
        return x, yb, shape
    xb = x[:, cut.lo : cut.hi]  # and of them its `tp` coordinate's columns
    return columns_input(xb, cut.tp_mesh, cut.d), yb, tuple(xb.shape)
