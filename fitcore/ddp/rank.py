"""One rank's loop, shared by the spawned ranks and by torchrun's, and what the ranks report as events."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, NamedTuple, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

from fitcore.config import FitConfig
from fitcore.data import make_data
from fitcore.ddp.shards import Layout
from fitcore.devices import DevicePlan
from fitcore.errors import ConfigError
from fitcore.events import Replica, Status, Step
from fitcore.parallel import LinearModel, ShapeRecorder, init_parameters
from fitcore.train import make_optimizer

COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a collective waiting longer than this fails its rank


def placement(cfg: FitConfig, plan: DevicePlan, world_size: int | None = None) -> tuple[str, tuple[str, ...]]:
    """The backend and each local rank's device: gloo on the CPU, nccl with one GPU per rank.

    For ddp, `cpu` and `virtual:K` both mean K = cfg.workers CPU processes; `cuda`/`cuda:i,j` need exactly
    one rank per listed GPU.
    """
    k = cfg.workers if world_size is None else world_size
    if plan.kind != "cuda":
        return "gloo", ("cpu",) * k
    if k != len(plan.device_ids):
        raise ConfigError(
            "workers", k, f"{len(plan.device_ids)}: one process per GPU in devices {plan.spec} for ddp"
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
    message: str = ""
    steps: int = 0
    loss: float | None = None  # the mean of the ranks' losses at the last step


class RankParams(NamedTuple):
    """One rank's parameters after its last step, as the ranks share them."""

    label: str
    weights: tuple[float, ...]  # (d,)
    bias: float


def rank_params(raw: LinearModel) -> tuple[tuple[float, ...], float]:
    """(W, b) of this rank's model as Python floats."""
    return tuple(raw.fc.weight.detach().view(-1).tolist()), raw.fc.bias.item()


def train_rank(
    cfg: FitConfig,
    rank: int,
    world_size: int,
    device: torch.device,
    label: str,
    wait_turn: Callable[[int], bool],
    want_stop: Callable[[], bool],
    report: Callable[[int, int, int, torch.Tensor, float, LinearModel], None],
    ready: Callable[[], None] = lambda: None,
) -> tuple[RankState, LinearModel]:
    """Train this rank's replica in the process group already initialised; return how it ended.

    Args:
        wait_turn: called before each step; False ends the run at once (the spawned ranks' gate, which
            every rank sees the same).
        want_stop: this rank's wish to stop; all ranks share theirs with the loss, so they stop together.
        report: called after each step with (step, epoch, batch, table, local loss, model), where table
            (K, 6) holds every rank's [loss, input rows, input cols, output rows, output cols, stop].
        ready: called once the model, DDP and the optimizer exist (the first optimizer of a process costs
            seconds), just before the first step.
    """
    state = RankState()
    # 1. the same data and initial parameters on every rank, from the seed
    X, y = make_data(cfg, device)  # (N, d), (N, 1)
    recorder = ShapeRecorder()
    raw = LinearModel(cfg.n_features, recorder)
    init_parameters(raw, cfg.seed + 1)
    raw.device_label = label
    raw.to(device)
    model = DistributedDataParallel(raw, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = make_optimizer(cfg, model.parameters())
    sampler = DistributedSampler(
        TensorDataset(X, y), num_replicas=world_size, rank=rank, shuffle=cfg.shuffle, seed=cfg.seed,
        drop_last=False,
    )  # fmt: skip
    layout = Layout(cfg.data_size, world_size, cfg.batch_size)
    ready()

    # 2. each step: forward on this rank's rows, share losses and stop wishes, backward (all-reduce), step
    for epoch in range(1, cfg.epochs + 1):
        sampler.set_epoch(epoch - 1)
        shard = torch.tensor(list(sampler), dtype=torch.long, device=device)  # (rows_per_rank,)
        for batch, idx in enumerate(shard.split(layout.per_rank_batch), 1):
            if not wait_turn(state.steps + 1):
                state.status = Status.STOPPED
                return state, raw
            xb, yb = X[idx], y[idx]  # (b, d), (b, 1): this rank's rows only
            out = model(xb)  # (b, 1); DDP does not gather it anywhere
            loss = F.mse_loss(out, yb)
            value = loss.item()
            (seen,) = recorder.take()
            mine = torch.tensor(
                [value, *seen.input_shape, *seen.output_shape, float(want_stop())],
                dtype=torch.float64,
                device=device,
            )
            gathered = [torch.empty_like(mine) for _ in range(world_size)]
            dist.all_gather(gathered, mine)
            table = torch.stack(gathered).cpu()  # (K, 6), the same on every rank
            mean = table[:, 0].mean().item()
            if table[:, 5].any():
                state.status = Status.STOPPED
                return state, raw
            if not math.isfinite(mean):
                state.status, state.message = (
                    Status.DIVERGED,
                    (
                        f"the loss became {mean} at step {state.steps + 1} (epoch {epoch}); "
                        f"the learning rate {cfg.lr:g} is too high for this data"
                    ),
                )
                return state, raw
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here, averaging them over the ranks
            optimizer.step()
            state.steps, state.loss = state.steps + 1, mean
            report(state.steps, epoch, batch, table, value, raw)
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
) -> Step:
    """One step of K ranks as a Step: a Replica per rank (its rows numbered on from the rank before it),
    the mean of the ranks' losses, and rank 0's parameters.

    Args:
        shapes: each rank's (input shape, output shape), (b, d) and (b, 1).
        losses: each rank's own loss.
    """
    replicas, start = [], 0
    for label, (input_shape, output_shape), loss in zip(labels, shapes, losses):
        rows = input_shape[0]
        replicas.append(Replica(label, start, start + rows, tuple(input_shape), tuple(output_shape), loss))
        start += rows
    d, out = shapes[0][0][1], shapes[0][1][1]
    mean = sum(losses) / len(losses)
    # every rank's rows together; no tensor of this shape exists (nothing is gathered)
    return Step(step, epoch, batch, mean, (start, d), (start, out), tuple(replicas), weights, bias, elapsed)


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
