"""One FSDP rank's loop: `fully_shard` on the (d, 1) model, its collectives timed and measured, its reports.

The loop is DDP's (ddp's rank.train_rank): the same data, the same rows from DistributedSampler, the
same table of losses and stop wishes shared before backward. What differs is the model and its wrapper:
  - W is a (d, 1) parameter and y = X @ W + b (torch.addmm, the very arithmetic nn.Linear's F.linear runs,
    bit for bit), so that fully_shard's Shard(0) cuts W's rows over the ranks;
  - fully_shard(reshard_after_forward=...) all-gathers the parameters in its pre-forward hook, frees them
    after forward (ZeRO-3) or keeps them until backward ends (ZeRO-2), and reduce-scatters (averages) the
    gradients in backward, so each rank keeps its own shard's gradient and steps its own shard;
  - its collectives go through TimedAllGather / TimedReduceScatter (FSDPModule.set_custom_all_gather and
    set_custom_reduce_scatter), which mark their start and end and measure the buffers actually sent.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
from torch.utils.data import DistributedSampler, TensorDataset

from fitcore.config import FitConfig
from fitcore.data import make_data
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
from fitcore.parallel import LinearModel, ShapeRecorder, init_parameters
from fitcore.phases import (
    BACKWARD_END,
    FORWARD_END,
    LOADED,
    LOSS_END,
    OPTIMIZER_END,
    START,
)
from fitcore.shards import Layout
from fitcore.strategies.fsdp.layout import (
    AG_BACK_END,
    AG_BACK_START,
    AG_END,
    AG_START,
    FSDP_SLOTS,
    GATHERS,
    RS_END,
    RS_START,
    all_gather_bytes,
    reduce_scatter_bytes,
)
from fitcore.train import diverged_message, make_optimizer


class ColumnLinear(nn.Module):
    """y = X @ W + b with W a (d, 1) parameter, as the seed writes it, and b (1,).

    Made from a LinearModel (its nn.Linear weight [1, d] reshaped), so that it starts from the same numbers;
    torch.addmm(b, X, W) is what F.linear(X, weight, b) computes, so both give the same outputs and gradients.
    """

    def __init__(self, source: LinearModel, recorder: ShapeRecorder | None = None):
        super().__init__()
        fc = source.fc
        self.weight = nn.Parameter(fc.weight.detach().reshape(-1, 1).clone())  # (d, 1)
        self.bias = nn.Parameter(fc.bias.detach().clone())  # (1,)
        self.recorder = recorder
        self.device_label: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x, self.weight)  # (rows, d) @ (d, 1) + b -> (rows, 1)
        if self.recorder is not None:
            self.recorder.record(self.device_label or str(x.device), x.shape, out.shape)
        return out


class Collectives:
    """What the step's collectives did: the slots they mark, and the bytes of the buffers they were given."""

    def __init__(self, mark: Callable[[int], None], k: int):
        self.mark, self.k = mark, k
        self.gathers = 0  # all-gathers so far this step (reset by the loop)
        self.scattered = False
        self.sent: list[int] = []  # ring bytes this rank sent, per collective, in order
        self.buffers: list[dict] = []  # the first step's buffers: {"op", "input_bytes", "output_bytes"}
        self.steps = 0

    def begin_step(self) -> None:
        self.gathers, self.scattered, self.sent = 0, False, []
        self.steps += 1

    def record(self, op: str, input_tensor: torch.Tensor, output_tensor: torch.Tensor, sent: int) -> None:
        self.sent.append(sent)
        if self.steps == 1:
            self.buffers.append(
                {
                    "op": op,
                    "input_bytes": input_tensor.numel() * input_tensor.element_size(),
                    "output_bytes": output_tensor.numel() * output_tensor.element_size(),
                }
            )


class TimedAllGather(DefaultAllGather):
    """FSDP2's own all-gather (all_gather_single) with its start and end marked and its buffers measured."""

    def __init__(self, seen: Collectives):
        self.seen = seen

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        seen = self.seen
        start, end = GATHERS[min(seen.gathers, len(GATHERS) - 1)]
        seen.gathers += 1
        seen.mark(start)
        work = super().__call__(output_tensor, input_tensor, group, async_op=async_op)
        if work is not None and input_tensor.device.type == "cpu":
            work.wait()  # on the CPU the gather is done when it returns; a GPU's events bracket its stream
        seen.mark(end)
        in_bytes = input_tensor.numel() * input_tensor.element_size()
        seen.record("all_gather", input_tensor, output_tensor, all_gather_bytes(seen.k, in_bytes))
        return None if input_tensor.device.type == "cpu" else work


class TimedReduceScatter(DefaultReduceScatter):
    """FSDP2's own reduce-scatter (reduce_scatter_single), marked and measured; FSDP waits for it itself."""

    def __init__(self, seen: Collectives):
        self.seen = seen

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        seen = self.seen
        seen.mark(RS_START)
        work = super().__call__(output_tensor, input_tensor, group, op, async_op=async_op)
        seen.mark(RS_END)
        seen.scattered = True
        out_bytes = output_tensor.numel() * output_tensor.element_size()
        seen.record("reduce_scatter", input_tensor, output_tensor, reduce_scatter_bytes(seen.k, out_bytes))
        return work


class FsdpRank(NamedTuple):
    """What one rank holds: its sharded model, its optimizer (of the shards) and its collectives' record."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    collectives: Collectives


def _mark_absent(seen: Collectives, reshard_after_forward: bool) -> None:
    """Give a collective that did not run this step (one rank: nothing to scatter) a zero-length phase."""
    absent = []
    if seen.gathers < 1:
        absent += [AG_START, AG_END]
    if reshard_after_forward and seen.gathers < 2:
        absent += [AG_BACK_START, AG_BACK_END]
    if not seen.scattered:
        absent += [RS_START, RS_END]
    for slot in absent:
        seen.mark(slot)


def train_fsdp_rank(
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
    reshard_after_forward: bool = True,
) -> tuple[RankState, FsdpRank]:
    """Train this rank's shard in the process group already initialised (the ddp rank module's train_rank's
    arguments, and fully_shard's reshard_after_forward: True is ZeRO-3, False ZeRO-2).

    report(step, epoch, batch, table, local loss, FsdpRank, times, sent): times are this rank's FSDP slot
    times from its own START, sent the ring bytes of each of the step's collectives, as measured.
    """
    state = RankState()
    # 1. the same data and initial parameters on every rank; then fully_shard cuts them
    X, y = make_data(cfg, device)  # (N, d), (N, 1)
    recorder = ShapeRecorder()
    source = LinearModel(cfg.n_features)
    init_parameters(source, cfg.seed + 1)
    model = ColumnLinear(source, recorder).to(device)
    model.device_label = label
    mesh = init_device_mesh(device.type, (world_size,))
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    clock = rank_clock(device, FSDP_SLOTS)
    mark = clock.mark
    seen = Collectives(mark, world_size)
    model.set_custom_all_gather(TimedAllGather(seen))
    model.set_custom_reduce_scatter(TimedReduceScatter(seen))
    optimizer = make_optimizer(cfg, model.parameters())  # of the shards: each rank's Adam state is 1/K
    held = FsdpRank(model, optimizer, seen)
    sampler = DistributedSampler(
        TensorDataset(X, y), num_replicas=world_size, rank=rank, shuffle=cfg.shuffle, seed=cfg.seed,
        drop_last=False,
    )  # fmt: skip
    b = Layout(cfg.data_size, world_size, cfg.batch_size).per_rank_batch
    slots = tuple(range(FSDP_SLOTS))
    times = (0.0,) * FSDP_SLOTS
    ready()

    # 2. each step: all-gather, forward on this rank's rows, share losses, backward (reduce-scatter), step
    for epoch in range(1, cfg.epochs + 1):
        sampler.set_epoch(epoch - 1)
        order = list(sampler)
        shard = torch.tensor(order, dtype=torch.long, device=device)  # (rows_per_rank,)
        for batch, idx in enumerate(shard.split(b), 1):
            if not wait_turn(state.steps + 1):
                state.status = Status.STOPPED
                return state, held
            seen.begin_step()
            mark(START)
            xb, yb = X[idx], y[idx]  # (b, d), (b, 1): this rank's rows only
            mark(LOADED)
            out = model(xb)  # fully_shard's pre-forward hook all-gathers W and b first (AG_START, AG_END)
            mark(FORWARD_END)  # under ZeRO-3 the gathered parameters are already freed again
            loss = F.mse_loss(out, yb)
            value = loss.item()
            (seen_shape,) = recorder.take()
            first = (batch - 1) * b
            ids = order[first : first + min(len(idx), MAX_IDS)]
            more = times if pass_times else ()
            table = share_step(value, seen_shape, ids, want_stop(), device, world_size, more)
            mean = table[:, LOSS_COL].mean().item()
            if table[:, STOP_COL].any() or not math.isfinite(mean):
                state.last_times = previous_times(table, pass_times, state.steps)
                model.reshard()  # ZeRO-2 still holds the gathered parameters here; a rank ends on its shard
                state.status = Status.STOPPED if table[:, STOP_COL].any() else Status.DIVERGED
                if state.status == Status.DIVERGED:
                    state.message = diverged_message(mean, state.steps + 1, epoch, cfg.lr)
                return state, held
            optimizer.zero_grad(set_to_none=True)
            mark(LOSS_END)
            loss.backward()  # ZeRO-3 all-gathers again here; then the reduce-scatter averages the gradients
            mark(BACKWARD_END)
            _mark_absent(seen, reshard_after_forward)
            optimizer.step()  # on this rank's shard only
            mark(OPTIMIZER_END)
            times = clock.resolve(slots)
            times = tuple(t - times[START] for t in times)  # seconds from this rank's own START
            state.steps, state.loss = state.steps + 1, mean
            report(state.steps, epoch, batch, table, value, held, times, tuple(seen.sent))
    if pass_times and state.steps:  # the last step's times have no next step to travel with
        state.last_times = gather_times(times, device, world_size)
    return state, held


# ---------------------------------------------------------------------------------------------------------
# What an FSDP rank reports (fitcore.engine.launcher.Engine's rank side) and how the parent reads it.


def shard_params(rank: int, held: FsdpRank) -> tuple[tuple[float, ...], float | None]:
    """What a rank reports after each step: its own rows of W, and b where it holds b (else None)."""
    bias = local_values(held.model.bias)
    return tuple(local_values(held.model.weight)), (bias[0] if bias else None)


def holds_memory(rank: int, held: FsdpRank) -> dict:
    """What a rank measured it holds: its shards of W and b, their gradients' shards and their Adam state."""
    return rank_memory(rank, [held.model.weight, held.model.bias], held.optimizer)


def final_params(held: FsdpRank) -> tuple[tuple[tuple[float, ...], float], dict]:
    """After the loop: the gathered parameters as this rank sees them (full_tensor, one collective every
    rank makes), and its shard, its memory and the buffers of its first step's collectives."""
    model = held.model
    weights = tuple(model.weight.full_tensor().detach().view(-1).tolist())
    bias = model.bias.full_tensor().item()
    rank = model.weight.device_mesh.get_local_rank()
    w_local, b_local = local_values(model.weight), local_values(model.bias)
    extra = {
        "shard": {"weights": w_local, "bias": b_local},
        "memory": holds_memory(rank, held),
        "collectives": held.collectives.buffers,
    }
    return (weights, bias), extra


def full_params(held: FsdpRank) -> tuple[tuple[float, ...], float]:
    """The step's W and b on every rank (full_tensor: an all-gather each rank makes), for torchrun's lead
    rank, which hears no other rank's shard."""
    model = held.model
    return tuple(model.weight.full_tensor().detach().view(-1).tolist()), model.bias.full_tensor().item()


def rank_loop(reshard_after_forward: bool) -> Callable:
    """The rank's loop for the launcher's Engine: picklable, so that spawn carries it to each rank."""
    return partial(train_fsdp_rank, reshard_after_forward=reshard_after_forward)
