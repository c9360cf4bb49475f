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
from torch.nn.parallel import DistributedDataParallel

from fitcore.config import FitConfig
from fitcore.engine.launcher import Engine, first_memory_details, memory_on_step_one
from fitcore.engine.loop import Mark, Place, own_rows, sampler_batches
from fitcore.engine.rank import rank_params
from fitcore.memory import rank_memory
from fitcore.parallel import LinearModel
from fitcore.phases import FORWARD_END, PhaseSpec
from fitcore.strategies.ddp.name import NAME
from fitcore.strategies.ddp.phases import ALLREDUCE_END, ALLREDUCE_START, DDP_SLOTS, ddp_specs
from fitcore.train import first_model, make_optimizer


class _AllreduceTimes:
    """The state of the timed communication hook: where to mark, and whether this step's first bucket went."""

    def __init__(self, mark: Callable[[int], None]):
        self.mark = mark
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

    return allreduce_hook(None, bucket).then(done)



class DdpPart:
    """A DDP rank's part of the engine's loop (fitcore.engine.loop): its replica wrapped in
    DistributedDataParallel, with its all-reduce timed by a communication hook, and its rows of each
    batch from DistributedSampler."""

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark):
        self.cfg, self.place, self.mark = cfg, place, mark
        raw = first_model(cfg)  # the same initial parameters on every rank, from the seed
        raw.device_label = place.label
        raw.to(place.device)
        device = place.device
        # gradient_as_bucket_view: each gradient is a view into the reducer's bucket, so the rank keeps one
        # copy of its gradients (the bucket), not two, and what it holds (fitcore.memory, storage by
        # storage) is what torch allocated
        self.model = DistributedDataParallel(
            raw, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
        )
        self.hook = _AllreduceTimes(mark)
        self.model.register_comm_hook(self.hook, _timed_allreduce)
        self.optimizer = make_optimizer(cfg, self.model.parameters())
        raw.optimizer = self.optimizer  # what the rank holds is read after its loop (its Engine's `final`)
        self.raw = raw

    @property
    def holds(self) -> LinearModel:
        return self.raw

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return sampler_batches(self.cfg, self.place, epoch)  # its own rows, DistributedSampler's

    def inputs(self, X, y, idx):
        return own_rows(X, y, idx)  # (b, d), (b, 1): this rank's rows only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)  # (b, 1); DDP does not gather it anywhere
        self.mark(FORWARD_END)
        return out

    def begin_step(self) -> None:
        self.hook.started = False

    def end_backward(self) -> None:
        pass

    def end_early(self) -> None:
        pass

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        return ()  # DDP's bytes are its specs' (fitcore.strategies.ddp.phases), from the labels alone


def ranks_specs(labels: Sequence[str], d: int, itemsize: int) -> tuple[PhaseSpec, ...]:
    """Every rank's DDP specs, rank r's over slots r*DDP_SLOTS ... (r+1)*DDP_SLOTS - 1; built once a run."""
    k = len(labels)
    return tuple(
        spec._replace(start=spec.start + r * DDP_SLOTS, stop=spec.stop + r * DDP_SLOTS)
        for r, label in enumerate(labels)
        for spec in ddp_specs(label, k, d, itemsize)
    )


def lead_params(rank: int, raw) -> tuple[tuple[float, ...] | None, float | None]:
    """What a DDP rank reports after each step: rank 0 its parameters (they are every rank's), others none."""
    return rank_params(raw) if rank == 0 else (None, None)


def own_params(raw) -> tuple[tuple[float, ...], float]:
    """Under torchrun, the lead rank's parameters are the step's: every rank holds them all."""
    return rank_params(raw)


def holds_memory(rank: int, raw) -> dict:
    """What a DDP rank measured it holds: every parameter, its gradient and its optimizer state."""
    return rank_memory(rank, raw.parameters(), raw.optimizer)


def final_params(raw) -> tuple[tuple[tuple[float, ...], float], dict]:
    """A DDP rank's parameters after its loop, and what it holds: every parameter, gradient and Adam state."""
    return rank_params(raw), {"memory": holds_memory(dist.get_rank(), raw)}


def specs_of(labels, d: int, itemsize: int, reports) -> tuple:
    """Every rank's phase specs: DDP's depend on the labels alone."""
    return ranks_specs(labels, d, itemsize)


ENGINE = Engine(
    part=DdpPart, step_params=lead_params, final=final_params, specs=specs_of, slots=DDP_SLOTS,
    words=NAME, joined=own_params, step_extra=partial(memory_on_step_one, holds_memory),
    step_details=first_memory_details,
)  # fmt: skip
