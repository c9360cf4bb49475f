"""One rank's loop, shared by the spawned ranks and by torchrun's, and what the ranks report as events."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, NamedTuple, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

from fitcore.config import FitConfig
from fitcore.data import make_data
from fitcore.devices import DevicePlan
from fitcore.errors import ConfigError, Text
from fitcore.events import Replica, Status, Step
from fitcore.parallel import LinearModel, ShapeRecorder
from fitcore.phases import (
    ALLREDUCE_END,
    ALLREDUCE_START,
    BACKWARD_END,
    DDP_SLOTS,
    FORWARD_END,
    LOADED,
    LOSS_END,
    OPTIMIZER_END,
    START,
    CudaClock,
    HostClock,
    PhaseRecorder,
    PhaseSpec,
    StepPhases,
    ddp_specs,
)
from fitcore.shards import Layout
from fitcore.train import diverged_message, first_model, make_optimizer

COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a collective waiting longer than this fails its rank
MAX_IDS = 8  # dataset row ids each rank reports per step: where its first rows came from

# Columns of the table the ranks all-gather every step, one row per rank
LOSS_COL, SHAPE_COLS, STOP_COL = 0, slice(1, 5), 5
IDS_COLS = slice(6, 6 + MAX_IDS)  # its first row ids, padded with -1
PREV_TIMES_COLS = slice(6 + MAX_IDS, 6 + MAX_IDS + DDP_SLOTS)  # its previous step's times, with pass_times


def group_backend(plan: DevicePlan) -> str:
    """The process group's backend: nccl for ranks on GPUs, gloo on the CPU."""
    return "nccl" if plan.kind == "cuda" else "gloo"


def placement(cfg: FitConfig, plan: DevicePlan, world_size: int | None = None) -> tuple[str, tuple[str, ...]]:
    """The backend and each local rank's device: gloo on the CPU, nccl with one GPU per rank.

    For ddp, `cpu` and `virtual:K` both mean K = cfg.workers CPU processes; `cuda`/`cuda:i,j` need exactly
    one rank per listed GPU.
    """
    k = cfg.workers if world_size is None else world_size
    if group_backend(plan) == "gloo":
        return "gloo", ("cpu",) * k
    if k != len(plan.device_ids):
        raise ConfigError(
            "workers", k, Text("config.workers_gpus_ddp", n=len(plan.device_ids), spec=plan.spec)
        )
    return "nccl", tuple(f"cuda:{i}" for i in plan.device_ids)


def rank_label(rank: int, device: str, backend: str) -> str:
    return f"rank {rank} · {device} · {backend}"


def rank_labels(cfg: FitConfig, plan: DevicePlan) -> tuple[str, ...]:
    """Every rank's label, as a run of cfg on plan will name them."""
    backend, devices = placement(cfg, plan)
    return tuple(rank_label(r, d, backend) for r, d in enumerate(devices))


@dataclass
class RankState:
    """How this rank's loop ended."""

    status: Status = Status.FINISHED
    message: Text | None = None  # why the loop ended where it says more than its status (a diverged loss)
    steps: int = 0
    loss: float | None = None  # the mean of the ranks' losses at the last step
    last_times: torch.Tensor | None = None  # (K, DDP_SLOTS) every rank's times of the last step (pass_times)


class RankParams(NamedTuple):
    """One rank's parameters after its last step, as the ranks share them."""

    label: str
    weights: tuple[float, ...]  # (d,)
    bias: float


def rank_params(raw: LinearModel) -> tuple[tuple[float, ...], float]:
    """(W, b) of this rank's model as Python floats."""
    return tuple(raw.fc.weight.detach().view(-1).tolist()), raw.fc.bias.item()


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


def _rank_clock(device: torch.device) -> HostClock | CudaClock:
    """On the CPU a call's work is done when it returns; on a GPU, CUDA events time the queued work."""
    if device.type == "cuda":
        return CudaClock([device.index] * DDP_SLOTS)
    return HostClock(DDP_SLOTS)


def relative_times(phases: StepPhases) -> tuple[float, ...]:
    """A rank's slot times in seconds from its own START: what it sends, plain floats."""
    t0 = phases.times[START]
    return tuple(t - t0 for t in phases.times)


def _previous_times(table: torch.Tensor, pass_times: bool, steps: int) -> torch.Tensor | None:
    """Every rank's times of the step before the one whose table this is: the last step taken."""
    return table[:, PREV_TIMES_COLS] if pass_times and steps else None


def share_step(value: float, seen, ids, stop: bool, device, world_size: int, more=()) -> torch.Tensor:
    """Every rank's row [loss, input shape, output shape, stop wish, first ids padded with -1, *more],
    all-gathered: one (K, 14 + len(more)) table on the CPU, the same on every rank."""
    mine = torch.tensor(
        [
            value, *seen.input_shape, *seen.output_shape, float(stop), *ids, *(-1,) * (MAX_IDS - len(ids)),
            *more,
        ],
        dtype=torch.float64,
        device=device,
    )  # fmt: skip
    gathered = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(gathered, mine)
    return torch.stack(gathered).cpu()


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
            columns, PREV_TIMES_COLS; zeros at a run's first step), and those of the last step in
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
    model = DistributedDataParallel(raw, device_ids=[device.index] if device.type == "cuda" else None)
    phases, itemsize = PhaseRecorder(_rank_clock(device)), X.element_size()
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
                state.last_times = _previous_times(table, pass_times, state.steps)
                return state, raw
            if not math.isfinite(mean):
                state.last_times = _previous_times(table, pass_times, state.steps)
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
        mine = torch.tensor(times, dtype=torch.float64, device=device)
        gathered = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(gathered, mine)
        state.last_times = torch.stack(gathered).cpu()
    return state, raw


# ---------------------------------------------------------------------------------------------------------
# What the ranks report, as events: the same for the spawned ranks and for torchrun's.


def rank_step(
    step: int,
    epoch: int,
    batch: int,
    labels: Sequence[str],
    shapes: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    losses: Sequence[float],
    weights: tuple[float, ...],
    bias: float,
    elapsed: float,
    ids: Sequence[tuple[int, ...]] = (),
    phases: StepPhases | None = None,
) -> Step:
    """One step of K ranks as a Step: a Replica per rank (its rows numbered on from the rank before it),
    the mean of the ranks' losses, and rank 0's parameters.

    Args:
        shapes: each rank's (input shape, output shape), (b, d) and (b, 1).
        losses: each rank's own loss.
        ids: each rank's first dataset row ids of the step (table_ids); none given, none shown.
        phases: every rank's phases of the step (ranks_phases).
    """
    replicas, start = [], 0
    for r, (label, (input_shape, output_shape), loss) in enumerate(zip(labels, shapes, losses)):
        rows = input_shape[0]
        rank_ids = tuple(ids[r]) if ids else ()
        replicas.append(
            Replica(label, start, start + rows, tuple(input_shape), tuple(output_shape), loss, rank_ids)
        )
        start += rows
    d, out = shapes[0][0][1], shapes[0][1][1]
    mean = sum(losses) / len(losses)
    # every rank's rows together; no tensor of this shape exists (nothing is gathered)
    return Step(
        step, epoch, batch, mean, (start, d), (start, out), tuple(replicas), weights, bias, elapsed, phases
    )


def table_ids(row: Sequence[float]) -> tuple[int, ...]:
    """A rank's row ids from its IDS_COLS of the gathered table (floats, padded with -1)."""
    return tuple(int(i) for i in row if i >= 0)


def ranks_specs(labels: Sequence[str], d: int, itemsize: int) -> tuple[PhaseSpec, ...]:
    """Every rank's DDP specs, rank r's over slots r*DDP_SLOTS ... (r+1)*DDP_SLOTS - 1; built once a run."""
    k = len(labels)
    return tuple(
        spec._replace(start=spec.start + r * DDP_SLOTS, stop=spec.stop + r * DDP_SLOTS)
        for r, label in enumerate(labels)
        for spec in ddp_specs(label, k, d, itemsize)
    )


def ranks_phases(specs: tuple[PhaseSpec, ...], times: Sequence[Sequence[float]]) -> StepPhases:
    """One step's phases of every rank: each rank's times count from its own START, so all start at 0.

    Ranks' clocks are separate processes' (or GPUs'): only times within one rank compare.
    """
    return StepPhases(specs, tuple(t for rank_times in times for t in rank_times))


def group_value(
    layout: Layout,
    backend: str,
    master: tuple[str, int],
    launcher: str,
    devices: Sequence[str],
    labels: Sequence[str],
    processes: dict,
    **more,
) -> dict:
    """Detail('ddp').value: the process group, where each rank runs and how each step is cut.

    Args:
        master: the store's (address, port).
        processes: where the ranks' processes are ({"pids": [...]}, with "hosts" under torchrun).
        more: anything the launcher adds (the seconds the ranks took to start).
    """
    return {
        "backend": backend,
        "world_size": layout.world_size,
        "master_addr": master[0],
        "master_port": master[1],
        "launcher": launcher,
        "devices": list(devices),
        "labels": list(labels),
        **processes,
        "rows_per_rank": layout.rows_per_rank,
        "padding": layout.padding,
        "per_rank_batch": layout.per_rank_batch,
        "global_batch": layout.per_rank_batch * layout.world_size,
        "steps_per_epoch": layout.steps_per_epoch,
        **more,
    }


def final_value(finals: Sequence[tuple[str, tuple[float, ...], float]]) -> dict:
    """Detail('final').value from each rank's (label, weights, bias): are they identical?"""
    params = [tuple(w) + (b,) for _, w, b in finals]
    diff = max((abs(a - b) for p in params[1:] for a, b in zip(params[0], p)), default=0.0)
    return {
        "ranks": [
            {"rank": r, "device": label, "weights": list(w), "bias": b}
            for r, (label, w, b) in enumerate(finals)
        ],
        "identical": all(p == params[0] for p in params),
        "max_abs_diff": diff,
    }
