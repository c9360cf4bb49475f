"""A DDP rank's part of the engine's one loop (fitcore.engine.loop), the same under the spawned launcher and
under torchrun; its Engine.

DDP's own part of a rank: its replica wrapped in DistributedDataParallel, its all-reduce timed by a
communication hook, its rows of each batch from DistributedSampler; the engine gives the loop, the table the
ranks share each step, the clock and the events.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
from torch.nn.parallel import DistributedDataParallel

from fitcore.core.chunks import columns
from fitcore.core.config import FitConfig
from fitcore.core.memory import rank_memory
from fitcore.core.parallel import LinearModel
from fitcore.core.phases import FORWARD_END, ring_bytes
from fitcore.core.train import first_model, make_optimizer
from fitcore.engine.contract import Engine, first_memory_details, joined_parts, memory_on_step_one
from fitcore.engine.loop import Mark, Place, WholeForward, sampler_batches
from fitcore.engine.rank import local_values, rank_params
from fitcore.engine.rowwise import Cut, block_inputs, shard_features
from fitcore.protocols.mesh import DP, TP, Mesh
from fitcore.strategies.ddp.name import NAME
from fitcore.strategies.ddp.phases import (
    ALLREDUCE_END,
    ALLREDUCE_START,
    DDP_SLOTS,
    TP_ALLREDUCE_END,
    TP_PARTIAL_END,
    ddp_specs,
)


class _AllreduceTimes:
    """The state of the timed communication hook: where to mark, whether this step's first bucket went, and
    the group it all-reduces over (None: every rank; a 2-D mesh's `dp` group)."""

    def __init__(self, mark: Callable[[int], None], group=None):
        self.mark, self.group = mark, group
        self.started = False  # reset by the loop before each backward


def _timed_allreduce(state, bucket):  # no annotations: DDP rejects any but its own, unquoted ones
    """DDP's own all-reduce of a gradient bucket (allreduce_hook), with its start and end marked.

    With several buckets the phase runs from the first bucket's start to the last one's end: every
    bucket's end overwrites the mark. DDP waits for the returned future inside backward, so the callback
    has run, and the end is marked, before backward returns.
    """
    if not state.started:
        state.started = True
        state.mark(ALLREDUCE_START)

    def done(fut: torch.futures.Future) -> torch.Tensor:
        state.mark(ALLREDUCE_END)
        return fut.value()

    return allreduce_hook(state.group, bucket).then(done)



class DdpPart(WholeForward):
    """A DDP rank's part of the engine's loop (fitcore.engine.loop): its replica wrapped in
    DistributedDataParallel, with its all-reduce timed by a communication hook, and its rows of each
    batch from DistributedSampler.

    On a 2-D mesh the replica is first cut by features over the mesh's `tp` dimension (RowwiseParallel, as
    TP's), then wrapped in DDP over its `dp` group: torch's DDP takes a tensor-parallel module once
    `_pre_dp_module_transform` has made its DTensor parameters local ones (torch.distributed.tensor.parallel
    .ddp), so each rank all-reduces the gradients of its own columns of W, and of b, with the ranks of its
    `dp` group only.
    """

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark):
        self.cfg, self.place, self.mark = cfg, place, mark
        raw = first_model(cfg)  # the same initial parameters on every rank, from the seed
        raw.device_label = place.label
        raw.to(place.device)
        device = place.device
        self.cut, group, wrapped = None, None, raw
        if TP in place.mesh.names:
            mesh = place.mesh.device_mesh(device.type)
            lo, hi = columns(cfg.n_features, place.mesh.size(TP))[place.coords[TP]]
            self.cut, group = Cut(mesh[TP], lo, hi, cfg.n_features), mesh[DP].get_group()
            shard_features(raw.fc, mesh[TP], mark, TP_PARTIAL_END, TP_ALLREDUCE_END)
            _pre_dp_module_transform(raw.fc)
            wrapped = raw.fc  # called as a module, so that RowwiseParallel's hooks run (LinearModel's own
            # forward calls F.linear on fc's parameters, past them)
        # gradient_as_bucket_view: each gradient is a view into the reducer's bucket, so the rank keeps one
        # copy of its gradients (the bucket), not two, and what it holds (fitcore.core.memory, storage by
        # storage) is what torch allocated. A column shard of W is a strided view (torch.chunk's along
        # dim 1), whose gradient the bucket cannot alias: on a 2-D mesh DDP copies into its bucket instead
        self.model = DistributedDataParallel(
            wrapped, device_ids=[device.index] if device.type == "cuda" else None, process_group=group,
            gradient_as_bucket_view=self.cut is None,
        )  # fmt: skip
        self.hook = _AllreduceTimes(mark, group)  # the hook replaces DDP's own: it all-reduces over `group`
        self.model.register_comm_hook(self.hook, _timed_allreduce)
        self.optimizer = make_optimizer(cfg, self.model.parameters())
        raw.optimizer = self.optimizer  # what the rank holds is read after its loop (its Engine's `final`)
        raw.lead = place.coords.get(DP, 0) == 0  # its `dp` group's first: it reports the step's W
        self.raw = raw

    @property
    def holds(self) -> LinearModel:
        return self.raw

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return sampler_batches(self.cfg, self.place, epoch)  # its own rows, DistributedSampler's

    def inputs(self, X, y, idx):
        return block_inputs(X, y, idx, self.cut)  # its rows; on a 2-D mesh, its columns of them

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)  # (b, 1); DDP does not gather it anywhere
        self.mark(FORWARD_END)
        if self.cut is None:  # no `tp` group, no all-reduce of the partial outputs: zero-length
            self.mark(TP_PARTIAL_END)
            self.mark(TP_ALLREDUCE_END)
        return out

    def begin_step(self) -> None:
        self.hook.started = False

    def end_backward(self) -> None:
        pass

    def end_early(self) -> None:
        pass

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        return ()  # DDP's bytes are its specs' (fitcore.strategies.ddp.phases), from the labels alone


def ranks_specs(labels: Sequence[str], d: int, itemsize: int, reports=(), mesh: Mesh | None = None):
    """Every rank's DDP specs, rank r's over slots r*DDP_SLOTS ... (r+1)*DDP_SLOTS - 1. On a 2-D mesh a
    rank's all-reduce carries its own columns of W and b over its `dp` group, and its `tp` group's all-reduce
    of the partial outputs its rows' (b, 1) output, each as the rank's shapes (its report) say."""
    on_2d = mesh is not None and TP in mesh.names
    tp = mesh.size(TP) if mesh is not None and on_2d else None
    k = mesh.size(DP) if mesh is not None and on_2d else len(labels)
    return tuple(
        spec._replace(start=spec.start + r * DDP_SLOTS, stop=spec.stop + r * DDP_SLOTS)
        for r, label in enumerate(labels)
        for spec in ddp_specs(
            label, k, d if tp is None else reports[r].input_shape[1], itemsize,
            None if tp is None else ring_bytes(tp, reports[r].input_shape[0] * itemsize),
        )  # fmt: skip
    )


def lead_params(rank: int, raw) -> tuple[tuple[float, ...] | None, float | None]:
    """What a DDP rank reports after each step: the first rank of each `tp` group along `dp` (rank 0 alone
    on a 1-D mesh) its parameters, its columns of W on a 2-D one (every `dp` group holds the same), and b;
    the others none. The parent joins them in rank order (joined_parts)."""
    return (tuple(local_values(raw.fc.weight)), local_values(raw.fc.bias)[0]) if raw.lead else (None, None)


def own_params(raw) -> tuple[tuple[float, ...], float]:
    """Under torchrun, the lead rank's parameters are the step's: the whole W, gathered over its `tp` group
    on a 2-D mesh (full_tensor, a collective every rank makes)."""
    weight = raw.fc.weight
    if hasattr(weight, "full_tensor"):
        return tuple(weight.full_tensor().detach().view(-1).tolist()), local_values(raw.fc.bias)[0]
    return rank_params(raw)


def holds_memory(rank: int, raw) -> dict:
    """What a DDP rank measured it holds: every parameter, its gradient and its optimizer state. The
    parameters are the optimizer's: on a 2-D mesh the module's attributes are swapped for DTensors and back
    around each forward (_pre_dp_module_transform), while the tensors the rank keeps and steps stay put."""
    kept = [p for group in raw.optimizer.param_groups for p in group["params"]]
    return rank_memory(rank, kept, raw.optimizer)


def final_params(raw) -> tuple[tuple[tuple[float, ...], float], dict]:
    """A DDP rank's parameters after its loop, and what it holds: every parameter (its columns of W on a 2-D
    mesh), gradient and Adam state."""
    extra: dict = {"memory": holds_memory(dist.get_rank(), raw)}
    if hasattr(raw.fc.weight, "full_tensor"):
        extra["shard"] = {"weights": local_values(raw.fc.weight), "bias": local_values(raw.fc.bias)}
    return own_params(raw), extra


def specs_of(labels, d: int, itemsize: int, reports, mesh: Mesh | None = None) -> tuple:
    """Every rank's phase specs: DDP's depend on the labels, and on a 2-D mesh on each rank's shapes."""
    return ranks_specs(labels, d, itemsize, reports, mesh)


ENGINE = Engine(
    part=DdpPart, step_params=lead_params, final=final_params, specs=specs_of, slots=DDP_SLOTS,
    words=NAME, joined=own_params, step_extra=partial(memory_on_step_one, holds_memory),
    step_details=first_memory_details, weights=joined_parts,
)  # fmt: skip
