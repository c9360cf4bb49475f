"""An FSDP rank's part of the engine's one loop: `fully_shard` on the (d, 1) model, its collectives timed and
measured, its reports.

The loop is the engine's (fitcore.engine.loop), and its rows DDP's: the same data, the same rows from
DistributedSampler, the same table of losses and stop wishes shared before backward. What differs is the
model and its wrapper:
  - W is a (d, 1) parameter and y = X @ W + b (torch.addmm, the very arithmetic nn.Linear's F.linear runs,
    bit for bit), so that fully_shard's Shard(0) cuts W's rows over the ranks;
  - fully_shard(reshard_after_forward=...) all-gathers the parameters in its pre-forward hook, frees them
    after forward (ZeRO-3) or keeps them until backward ends (ZeRO-2), and reduce-scatters (averages) the
    gradients in backward, so each rank keeps its own shard's gradient and steps its own shard;
  - its collectives go through TimedAllGather / TimedReduceScatter (FSDPModule.set_custom_all_gather and
    set_custom_reduce_scatter), which mark their start and end and measure the buffers actually sent.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterator, NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.memory import rank_memory
from fitcore.core.parallel import LinearModel, ShapeRecorder, init_parameters
from fitcore.core.phases import FORWARD_END
from fitcore.core.train import make_optimizer
from fitcore.engine.loop import Mark, Place, WholeForward, sampler_batches
from fitcore.engine.rank import local_values
from fitcore.engine.rowwise import Cut, block_inputs, shard_features
from fitcore.protocols.mesh import DP, TP
from fitcore.strategies.fsdp.layout import (
    AG_BACK_END,
    AG_BACK_START,
    AG_END,
    AG_START,
    GATHERS,
    RS_END,
    RS_START,
    TP_ALLREDUCE_END,
    TP_PARTIAL_END,
    all_gather_bytes,
    reduce_scatter_bytes,
)


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


class FsdpPart(WholeForward):
    """An FSDP rank's part of the engine's loop (fitcore.engine.loop): the (d, 1) model under fully_shard,
    its collectives timed and measured, its rows of each batch from DistributedSampler (as DDP's).

    On a 2-D mesh the model is nn.Linear (weight [1, d]), first cut by features over the mesh's `tp`
    dimension (RowwiseParallel, as TP's), then fully_shard over `dp`: each rank's weight is a DTensor placed
    (Shard(0), Shard(1)). fully_shard shards dim 0, which has one row for one output, so the ranks of `dp`
    coordinate 0 hold their `tp` columns of W and the others none (`shard_placement_fn` could choose dim 1).
    """

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark, reshard_after_forward: bool = True):
        self.cfg, self.place, self.reshard_after_forward = cfg, place, reshard_after_forward
        source = LinearModel(cfg.n_features)
        init_parameters(source, cfg.seed + 1)  # the same initial parameters on every rank, from the seed
        mesh = place.mesh.device_mesh(place.device.type)
        self.cut = None
        if TP in place.mesh.names:
            model = source.fc.to(place.device)
            lo, hi = columns(cfg.n_features, place.mesh.size(TP))[place.coords[TP]]
            self.cut = Cut(mesh[TP], lo, hi, cfg.n_features)
            shard_features(model, mesh[TP], mark, TP_PARTIAL_END, TP_ALLREDUCE_END)
        else:
            model = ColumnLinear(source).to(place.device)
            model.device_label = place.label
        fully_shard(model, mesh=mesh[DP], reshard_after_forward=reshard_after_forward)
        self.seen = Collectives(mark, place.mesh.size(DP))
        model.set_custom_all_gather(TimedAllGather(self.seen))
        model.set_custom_reduce_scatter(TimedReduceScatter(self.seen))
        self.model, self.mark = model, mark
        self.optimizer = make_optimizer(cfg, model.parameters())  # of the shards: Adam state 1/K

    @property
    def holds(self) -> FsdpRank:
        return FsdpRank(self.model, self.optimizer, self.seen)

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return sampler_batches(self.cfg, self.place, epoch)  # its own rows, DistributedSampler's

    def inputs(self, X, y, idx):
        return block_inputs(X, y, idx, self.cut)  # its rows; on a 2-D mesh, its columns of them

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)  # fully_shard's pre-forward hook all-gathers W and b first (AG_START, AG_END)
        self.mark(FORWARD_END)  # under ZeRO-3 the gathered parameters are already freed again
        if self.cut is None:  # no `tp` group, no all-reduce of the partial outputs: zero-length
            self.mark(TP_PARTIAL_END)
            self.mark(TP_ALLREDUCE_END)
        return out

    def begin_step(self) -> None:
        self.seen.begin_step()

    def end_backward(self) -> None:
        # ZeRO-3 all-gathered again in backward; then the reduce-scatter averaged the gradients
        _mark_absent(self.seen, self.reshard_after_forward)

    def end_early(self) -> None:
        self.model.reshard()  # ZeRO-2 still holds the gathered parameters here; a rank ends on its shard

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        return tuple(self.seen.sent)


# ---------------------------------------------------------------------------------------------------------
# What an FSDP rank reports (fitcore.engine.contract.Engine's rank side) and how the parent reads it.


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
    rank = dist.get_rank()
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


def rank_part(reshard_after_forward: bool) -> Callable:
    """The rank's part maker for the launcher's Engine: picklable, so that spawn carries it to each rank."""
    return partial(FsdpPart, reshard_after_forward=reshard_after_forward)
