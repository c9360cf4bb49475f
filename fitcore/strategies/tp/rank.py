"""One TP rank's loop: nn.Linear's weight split by features with PyTorch's own tensor parallelism.

`parallelize_module(fc, mesh, RowwiseParallel())` (torch.distributed.tensor.parallel) shards the weight
[1, d] on its features (Shard(1), torch.chunk's rule) and keeps b whole on every rank (Replicate). Each step
every rank takes the same whole batch (one device's order: fitcore.data.epoch_order with the seed's
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

import math
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

from fitcore.config import FitConfig
from fitcore.data import epoch_order, make_data
from fitcore.engine.rank import (
    LOSS_COL,
    MAX_IDS,
    STOP_COL,
    RankState,
    gather_times,
    local_values,
    previous_times,
    rank_clock,
    share_step,
)
from fitcore.events import Status
from fitcore.memory import rank_memory
from fitcore.phases import BACKWARD_END, LOSS_END, OPTIMIZER_END, START
from fitcore.strategies.tp.layout import (
    ALLREDUCE_END,
    LOADED,
    PARTIAL_END,
    TP_SLOTS,
    allreduce_bytes,
    columns,
)
from fitcore.train import diverged_message, first_model, make_optimizer


class Seen(NamedTuple):
    """This rank's shapes in a step, as share_step sends them: its columns of the batch, its output."""

    input_shape: tuple[int, int]  # (B, hi - lo)
    output_shape: tuple[int, int]  # (B, 1): the whole output, after the all-reduce


class TpRank(NamedTuple):
    """What one rank holds: its layer (W's rows [lo, hi) and b), its optimizer, its columns."""

    fc: nn.Module
    optimizer: torch.optim.Optimizer
    cols: tuple[int, int]


def _after_allreduce(mark: Callable[[int], None]) -> Callable:
    """The forward hook after RowwiseParallel's: wait for the all-reduce (an AsyncCollectiveTensor, whose
    trigger_wait waits in place and keeps the output's autograd), then mark."""

    def hook(module, args, output):
        if hasattr(output, "trigger_wait"):
            output.trigger_wait()
        mark(ALLREDUCE_END)

    return hook


def train_tp_rank(
    cfg: FitConfig,
    rank: int,
    world_size: int,
    device: torch.device,
    label: str,
    wait_turn: Callable[[int], bool],
    want_stop: Callable[[], bool],
    report: Callable[..., None],
    ready: Callable[[], None] = lambda: None,
    pass_times: bool = False,
) -> tuple[RankState, TpRank]:
    """Train this rank's rows of W in the process group already initialised (the engine's rank loop
    signature: fitcore.engine.launcher.Engine). report(step, epoch, batch, table, loss, TpRank, times, sent):
    sent holds the bytes this rank sent in the step's all-reduce, from the buffer it all-reduced."""
    state = RankState()
    # 1. the same data and initial parameters on every rank; then RowwiseParallel splits W by features
    X, y = make_data(cfg, device)  # (N, d), (N, 1)
    raw = first_model(cfg)
    raw.to(device)
    fc = raw.fc
    lo, hi = columns(cfg.n_features, world_size)[rank]
    clock = rank_clock(device, TP_SLOTS)
    mark = clock.mark
    slots = tuple(range(TP_SLOTS))
    fc.register_forward_hook(lambda module, args, output: mark(PARTIAL_END))  # before the all-reduce
    mesh = init_device_mesh(device.type, (world_size,))
    parallelize_module(fc, mesh, RowwiseParallel())  # weight Shard(1), bias Replicate, output all-reduced
    fc.register_forward_hook(_after_allreduce(mark))
    optimizer = make_optimizer(cfg, fc.parameters())  # of this rank's rows of W, and b
    holds = TpRank(fc, optimizer, (lo, hi))
    generator = torch.Generator().manual_seed(cfg.seed + 2)  # one device's order (dataparallel's loop)
    times = (0.0,) * TP_SLOTS
    ready()

    # 2. each step: the whole batch, this rank's columns, the partial output all-reduced, the loss, step
    for epoch in range(1, cfg.epochs + 1):
        order = epoch_order(cfg.data_size, cfg.shuffle, generator)
        ids = order if order is not None else torch.arange(cfg.data_size)
        for batch, idx in enumerate(ids.split(cfg.batch_size), 1):
            if not wait_turn(state.steps + 1):
                state.status = Status.STOPPED
                return state, holds
            mark(START)
            xb = X[idx, lo:hi]  # (B, hi - lo): this rank's columns of the whole batch
            yb = y[idx]  # (B, 1)
            whole = (xb.shape[0], cfg.n_features)
            xin = DTensor.from_local(
                xb, mesh, [Shard(1)], run_check=False, shape=whole, stride=(cfg.n_features, 1)
            )
            mark(LOADED)
            out = fc(xin)  # (B, 1): the partial X[:, lo:hi]·W[lo:hi], all-reduced, + b
            loss = F.mse_loss(out, yb)
            value = loss.item()
            first = idx[:MAX_IDS].tolist()
            more = times if pass_times else ()
            seen = Seen(tuple(xb.shape), tuple(out.shape))
            table = share_step(value, seen, first, want_stop(), device, world_size, more)
            mean = table[:, LOSS_COL].mean().item()
            if table[:, STOP_COL].any():
                state.status = Status.STOPPED
                state.last_times = previous_times(table, pass_times, state.steps)
                return state, holds
            if not math.isfinite(mean):
                state.last_times = previous_times(table, pass_times, state.steps)
                state.status = Status.DIVERGED
                state.message = diverged_message(mean, state.steps + 1, epoch, cfg.lr)
                return state, holds
            optimizer.zero_grad(set_to_none=True)
            mark(LOSS_END)
            loss.backward()  # no communication: each rank's gradient is of its own rows of W (and b)
            mark(BACKWARD_END)
            optimizer.step()
            mark(OPTIMIZER_END)
            times = clock.resolve(slots)
            times = tuple(t - times[START] for t in times)  # seconds from this rank's own START
            state.steps, state.loss = state.steps + 1, mean
            buffer = out.numel() * out.element_size()  # the all-reduced partial output, (B, 1)
            report(
                state.steps,
                epoch,
                batch,
                table,
                value,
                holds,
                times,
                (allreduce_bytes(world_size, buffer, 1),),
            )
    if pass_times and state.steps:  # the last step's times have no next step to travel with
        state.last_times = gather_times(times, device, world_size)
    return state, holds


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
