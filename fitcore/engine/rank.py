"""What every rank shares, whatever its strategy: where it runs, the table the ranks all-gather each step, its
clock, and what the ranks report as events (the Step, the process group, the finals).

A strategy's own loop (fitcore.strategies.<name>.rank) calls these: DDP's, FSDP's and TP's tables have the
same columns, so that the launchers (fitcore.engine.launcher, fitcore.engine.torchrun) read any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping, NamedTuple, Sequence

import torch
import torch.distributed as dist

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.errors import ConfigError, Text
from fitcore.core.events import MAX_IDS, Replica, Status, Step
from fitcore.core.memory import local_tensor
from fitcore.core.parallel import LinearModel
from fitcore.core.phases import CudaClock, HostClock, PhaseSpec, StepPhases
from fitcore.core.shards import Layout
from fitcore.protocols.mesh import Mesh, mesh_of
from fitcore.protocols.split import ROWS, Split

COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a collective waiting longer than this fails its rank

# Columns of the table the ranks all-gather every step, one row per rank
LOSS_COL, SHAPE_COLS, STOP_COL = 0, slice(1, 5), 5
IDS_COLS = slice(6, 6 + MAX_IDS)  # its first row ids, padded with -1
TIMES_FROM = 6 + MAX_IDS  # its previous step's times follow, with pass_times (one column per time slot)


def prev_times_cols(slots: int) -> slice:
    """The table's columns of a rank's previous step's times, for a loop of `slots` time slots."""
    return slice(TIMES_FROM, TIMES_FROM + slots)


def group_backend(plan: DevicePlan) -> str:
    """The process group's backend: nccl for ranks on GPUs, gloo on the CPU."""
    return "nccl" if plan.kind == "cuda" else "gloo"


def placement(cfg: FitConfig, plan: DevicePlan, world_size: int | None = None) -> tuple[str, tuple[str, ...]]:
    """The backend and each local rank's device: gloo on the CPU, nccl with one GPU per rank.

    For every ranked strategy, `cpu` and `virtual:K` both mean K = cfg.workers CPU processes;
    `cuda`/`cuda:i,j` need exactly one rank per listed GPU.
    """
    k = cfg.workers if world_size is None else world_size
    if group_backend(plan) == "gloo":
        return "gloo", ("cpu",) * k
    if k != len(plan.device_ids):
        raise ConfigError(
            "workers", k, Text("config.workers_gpus_ddp", n=len(plan.device_ids), spec=plan.spec)
        )
    return "nccl", tuple(f"cuda:{i}" for i in plan.device_ids)


def run_mesh(cfg: FitConfig, plan: DevicePlan) -> Mesh:
    """The run's mesh, made once per Start from the checked config: its dimensions (the strategy's own one
    of cfg.workers ranks, or cfg.mesh), the backend and each rank's device."""
    backend, devices = placement(cfg, plan)
    return mesh_of(cfg.mesh_dims, backend, devices)


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
    last_times: torch.Tensor | None = None  # (K, slots) every rank's times of the last step (pass_times)


class RankParams(NamedTuple):
    """One rank's parameters after its last step, as the ranks share them."""

    label: str
    weights: tuple[float, ...]  # (d,)
    bias: float


def rank_params(raw: LinearModel) -> tuple[tuple[float, ...], float]:
    """(W, b) of this rank's model as Python floats."""
    return tuple(raw.fc.weight.detach().view(-1).tolist()), raw.fc.bias.item()


def local_values(param) -> list[float]:
    """A parameter's part on this rank as plain numbers: a DTensor's shard (FSDP's, TP's columns, a 2-D
    mesh's block), or the whole of any other tensor (the local one _pre_dp_module_transform leaves DDP)."""
    return local_tensor(param).detach().view(-1).tolist()


def rank_clock(device: torch.device, slots: int) -> HostClock | CudaClock:
    """On the CPU a call's work is done when it returns; on a GPU, CUDA events time the queued work."""
    if device.type == "cuda":
        return CudaClock([device.index] * slots)
    return HostClock(slots)


def previous_times(table: torch.Tensor, pass_times: bool, steps: int) -> torch.Tensor | None:
    """Every rank's times of the step before the one whose table this is: the last step taken."""
    return table[:, TIMES_FROM:] if pass_times and steps else None


def gather_times(times: Sequence[float], device, world_size: int) -> torch.Tensor:
    """Every rank's times of the last step, (K, slots): they have no next step's table to travel with."""
    mine = torch.tensor(times, dtype=torch.float64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(gathered, mine)
    return torch.stack(gathered).cpu()


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
    split: Split = ROWS,
    coords: Sequence[Mapping[str, int]] | None = None,
) -> Step:
    """One step of K ranks as a Step: a Replica per rank, the mean of the ranks' losses, and the step's
    parameters. Each rank's span of the batch is its split's (fitcore.protocols.split): its own rows, numbered
    on from the rank before it (DDP, FSDP), or the whole batch and its own features (TP).

    Args:
        shapes: each rank's (input shape, output shape), (b, d) and (b, 1).
        losses: each rank's own loss.
        ids: each rank's first dataset row ids of the step (table_ids); none given, none shown.
        phases: every rank's phases of the step (ranks_phases).
        coords: each rank's coordinates on the run's mesh (Mesh.coords); none given, a 1-D mesh's: rank r
            is r along the split's first dimension.
    """
    if coords is None:
        coords = [{split.rows or split.columns: r} for r in range(len(shapes))]
    spans, (rows, d) = split.spans([tuple(input_shape) for input_shape, _ in shapes], coords)
    replicas = tuple(
        Replica(label, *span.rows, tuple(shape), tuple(out_shape), loss, tuple(ids[r]) if ids else (),
                span.columns)  # fmt: skip
        for r, (label, (shape, out_shape), loss, span) in enumerate(zip(labels, shapes, losses, spans))
    )
    mean = sum(losses) / len(losses)
    out = shapes[0][1][1]
    # the whole batch: every rank's rows (or columns) together; no tensor of this shape need exist
    return Step(step, epoch, batch, mean, (rows, d), (rows, out), replicas, weights, bias, elapsed, phases)


def table_ids(row: Sequence[float]) -> tuple[int, ...]:
    """A rank's row ids from its IDS_COLS of the gathered table (floats, padded with -1)."""
    return tuple(int(i) for i in row if i >= 0)


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
        "world_size": len(labels),
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
