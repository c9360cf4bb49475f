"""A TP rank's part of the engine's one loop: nn.Linear's weight split by features with PyTorch's own tensor
parallelism.

`parallelize_module(fc, mesh, RowwiseParallel())` (torch.distributed.tensor.parallel) shards the weight
[1, d] on its features (Shard(1), torch.chunk's rule) and keeps b whole on every rank (Replicate). Each step
every rank takes the same whole batch (one device's order: fitcore.core.data.epoch_order with the seed's
generator), hands its own columns X[:, lo:hi] to the layer as a DTensor of the whole batch's shape (so that
uneven columns, 3 features on 2 ranks, keep their true global shape), and RowwiseParallel's output hook
all-reduces the partial outputs into the whole X·W + b on every rank. The loss is the same on every rank;
backward needs no communication (each rank's gradient is of its own rows of W, and b's is the same
everywhere), and every rank's optimizer steps what it holds.

Its phases are timed by two forward hooks around RowwiseParallel's own: one registered before
parallelize_module runs before the all-reduce (the partial output is done), one registered after it runs
after (and waits for the all-reduce's result).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import torch
from torch import nn

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.data import epoch_ids, order_generator
from fitcore.core.memory import rank_memory
from fitcore.core.train import first_model, make_optimizer
from fitcore.engine.loop import Mark, Place, WholeForward
from fitcore.engine.rank import local_values
from fitcore.engine.rowwise import columns_input, shard_features
from fitcore.protocols.mesh import TP
from fitcore.strategies.tp.layout import ALLREDUCE_END, PARTIAL_END, allreduce_bytes


class TpRank(NamedTuple):
    """What one rank holds: its layer (W's rows [lo, hi) and b), its optimizer, its columns."""

    fc: nn.Module
    optimizer: torch.optim.Optimizer
    cols: tuple[int, int]


class TpPart(WholeForward):
    """A TP rank's part of the engine's loop (fitcore.engine.loop): its rows of W by RowwiseParallel, the
    whole batch every step (one device's order), its own columns of X."""

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark):
        self.cfg = cfg
        raw = first_model(cfg)  # the same initial parameters on every rank; RowwiseParallel splits W
        raw.to(place.device)
        fc = raw.fc
        self.lo, self.hi = columns(cfg.n_features, place.world_size)[place.rank]
        self.mesh = place.mesh.device_mesh(place.device.type)[TP]
        shard_features(fc, self.mesh, mark, PARTIAL_END, ALLREDUCE_END)  # RowwiseParallel, its hooks
        self.fc = fc
        self.optimizer = make_optimizer(cfg, fc.parameters())  # of this rank's rows of W, and b
        self.generator = order_generator(cfg.seed)  # one device's order (dataparallel's)
        self.world_size = place.world_size

    @property
    def holds(self) -> TpRank:
        return TpRank(self.fc, self.optimizer, (self.lo, self.hi))

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        """Every row of the epoch, in one device's order, in whole batches: every rank takes every row."""
        cfg = self.cfg
        return epoch_ids(cfg.data_size, cfg.batch_size, cfg.shuffle, self.generator)

    def inputs(self, X, y, idx):
        """This rank's columns of the whole batch, as a DTensor of the whole batch's shape (so that uneven
        columns, 3 features on 2 ranks, keep their true global shape)."""
        xb = X[idx, self.lo : self.hi]  # (B, hi - lo)
        return columns_input(xb, self.mesh, self.cfg.n_features), y[idx], tuple(xb.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)  # (B, 1): the partial X[:, lo:hi]·W[lo:hi], all-reduced, + b

    def begin_step(self) -> None:
        pass

    def end_backward(self) -> None:
        pass  # backward needed no communication: each rank's gradient is of its own rows of W (and b)

    def end_early(self) -> None:
        pass

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        buffer = out.numel() * out.element_size()  # the all-reduced partial output, (B, 1)
        return (allreduce_bytes(self.world_size, buffer, 1),)


# ---------------------------------------------------------------------------------------------------------
# What a TP rank reports (the engine's Engine) and how the parent reads it.


def own_rows(rank: int, holds: TpRank) -> tuple[tuple[float, ...], float | None]:
    """What a rank reports after each step: its rows of W; rank 0 b too (every rank holds the same b)."""
    return tuple(local_values(holds.fc.weight)), (local_values(holds.fc.bias)[0] if rank == 0 else None)


def whole_params(holds: TpRank) -> tuple[tuple[float, ...], float]:
    """W gathered (full_tensor: an all-gather every rank makes) and b: torchrun's lead rank's parameters."""
    fc = holds.fc
    return tuple(fc.weight.full_tensor().detach().view(-1).tolist()), local_values(fc.bias)[0]


def holds_memory(rank: int, holds: TpRank) -> dict:
    """What a rank measured it holds: its rows of W and b, their gradients and their optimizer state."""
    return rank_memory(rank, holds.fc.parameters(), holds.optimizer)


def final_rows(holds: TpRank) -> tuple[tuple[tuple[float, ...], float], dict]:
    """After the loop: the whole W and b as every rank can gather them (whole_params, a collective every
    rank makes), and what this rank holds: its columns, its own rows of W and b, its measured bytes."""
    fc = holds.fc
    rank = fc.weight.device_mesh.get_local_rank()
    shard = {"weights": local_values(fc.weight), "bias": local_values(fc.bias)}
    return whole_params(holds), {
        "columns": list(holds.cols),
        "shard": shard,
        "memory": holds_memory(rank, holds),
    }
