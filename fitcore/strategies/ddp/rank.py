"""One DDP rank's loop, the same under the spawned launcher and under torchrun (fitcore.engine); its Engine.

DDP's own part of a rank: its replica wrapped in DistributedDataParallel, its all-reduce timed by a
communication hook, its phases; the engine (fitcore.engine.rank) gives the table the ranks share each step,
the clock and the events.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

from fitcore.config import FitConfig
from fitcore.data import make_data
from fitcore.engine.launcher import Engine, first_memory_details, memory_on_step_one
from fitcore.engine.rank import (
    LOSS_COL,
    MAX_IDS,
    STOP_COL,
    RankState,
    gather_times,
    previous_times,
    rank_clock,
    rank_params,
    relative_times,
    share_step,
)
from fitcore.events import Status
from fitcore.memory import rank_memory
from fitcore.parallel import LinearModel, ShapeRecorder
from fitcore.phases import (
    BACKWARD_END,
    FORWARD_END,
    LOADED,
    LOSS_END,
    OPTIMIZER_END,
    START,
    PhaseRecorder,
    PhaseSpec,
)
from fitcore.shards import Layout
from fitcore.strategies.ddp.name import NAME
from fitcore.strategies.ddp.phases import ALLREDUCE_END, ALLREDUCE_START, DDP_SLOTS, ddp_specs
from fitcore.train import diverged_message, first_model, make_optimizer


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



def train_rank(
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
) -> tuple[RankState, LinearModel]:
    """Train this rank's replica in the process group already initialised; return how it ended.

    Args:
        wait_turn: called before each step; False ends the run at once (the spawned ranks' gate, which
            every rank sees the same).
        want_stop: this rank's wish to stop; all ranks share theirs with the loss, so they stop together.
        report: called after each step with (step, epoch, batch, table, local loss, model, times), where
            table (K, 14) holds every rank's [loss, input rows, input cols, output rows, output cols, stop,
            its first MAX_IDS dataset row ids padded with -1] (and, with pass_times, its times of the step
            before) and times are this rank's DDP slot times in seconds from its own START (relative_times).
        ready: called once the model, DDP and the optimizer exist (the first optimizer of a process costs
            seconds), just before the first step.
        pass_times: also share each rank's times of a step, in the table of the step after it (8 more
            columns from TIMES_FROM on; zeros at a run's first step), and those of the last step in
            RankState.last_times once the loop ends by itself, the loss or a stop wish: for a launcher
            that hears the ranks through the lead rank alone (torchrun), at no extra collective per step.
    """
    state = RankState()
    # 1. the same data and initial parameters on every rank, from the seed
    X, y = make_data(cfg, device)  # (N, d), (N, 1)
    recorder = ShapeRecorder()
    raw = first_model(cfg, recorder)
    raw.device_label = label
    raw.to(device)
    # gradient_as_bucket_view: each gradient is a view into the reducer's bucket, so the rank keeps one copy
    # of its gradients (the bucket), not two, and what it holds (fitcore.memory, storage by storage) is
    # what torch allocated
    model = DistributedDataParallel(
        raw, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
    )
    phases, itemsize = PhaseRecorder(rank_clock(device, DDP_SLOTS)), X.element_size()
    mark = phases.mark
    hook = _AllreduceTimes(mark)
    model.register_comm_hook(hook, _timed_allreduce)
    optimizer = make_optimizer(cfg, model.parameters())
    raw.optimizer = optimizer  # what the rank holds is read after its loop (its Engine's `final`)
    sampler = DistributedSampler(
        TensorDataset(X, y), num_replicas=world_size, rank=rank, shuffle=cfg.shuffle, seed=cfg.seed,
        drop_last=False,
    )  # fmt: skip
    layout = Layout(cfg.data_size, world_size, cfg.batch_size)
    b = layout.per_rank_batch
    times = (0.0,) * DDP_SLOTS
    ready()

    # 2. each step: forward on this rank's rows, share losses and stop wishes, backward (all-reduce), step
    for epoch in range(1, cfg.epochs + 1):
        sampler.set_epoch(epoch - 1)
        order = list(sampler)  # this rank's shard: dataset row ids, in the order it trains on them
        shard = torch.tensor(order, dtype=torch.long, device=device)  # (rows_per_rank,)
        for batch, idx in enumerate(shard.split(b), 1):
            if not wait_turn(state.steps + 1):
                state.status = Status.STOPPED
                return state, raw
            phases.use(label, ddp_specs, label, world_size, cfg.n_features, itemsize)  # built once
            mark(START)
            xb, yb = X[idx], y[idx]  # (b, d), (b, 1): this rank's rows only
            mark(LOADED)
            out = model(xb)  # (b, 1); DDP does not gather it anywhere
            mark(FORWARD_END)
            loss = F.mse_loss(out, yb)
            value = loss.item()
            (seen,) = recorder.take()
            first = (batch - 1) * b
            ids = order[first : first + min(len(idx), MAX_IDS)]
            more = times if pass_times else ()
            table = share_step(value, seen, ids, want_stop(), device, world_size, more)  # (K, 14 or 22)
            mean = table[:, LOSS_COL].mean().item()
            if table[:, STOP_COL].any():
                state.status = Status.STOPPED
                state.last_times = previous_times(table, pass_times, state.steps)
                return state, raw
            if not math.isfinite(mean):
                state.last_times = previous_times(table, pass_times, state.steps)
                state.status = Status.DIVERGED
                state.message = diverged_message(mean, state.steps + 1, epoch, cfg.lr)
                return state, raw
            optimizer.zero_grad(set_to_none=True)
            hook.started = False
            # the loss phase ends here: the step's loss is the mean of the ranks', shared just above
            mark(LOSS_END)
            loss.backward()  # DDP all-reduces the gradients here (the hook), averaging them over the ranks
            mark(BACKWARD_END)
            optimizer.step()
            mark(OPTIMIZER_END)
            times = relative_times(phases.take())
            state.steps, state.loss = state.steps + 1, mean
            report(state.steps, epoch, batch, table, value, raw, times)
    if pass_times and state.steps:  # the last step's times have no next step to travel with
        state.last_times = gather_times(times, device, world_size)
    return state, raw


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
    train=train_rank, step_params=lead_params, final=final_params, specs=specs_of, slots=DDP_SLOTS,
    words=NAME, joined=own_params, step_extra=partial(memory_on_step_one, holds_memory),
    step_details=first_memory_details,
)  # fmt: skip
