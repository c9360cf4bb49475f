"""The ddp rows of `fitcore check`: each rank's rows per step, identical parameters on every rank, and the
parameters against one process and against least squares, on gloo CPU ranks and on nccl GPUs."""

from __future__ import annotations

from dataclasses import replace

from fitcore.core.devices import GPU
from fitcore.core.i18n import t
from fitcore.core.phases import TP_ALLREDUCE, ring_bytes
from fitcore.kit.check import (
    CHECK_CONFIG,
    CUDA_TOL,
    MESH_CHECK,
    CheckFailed,
    Machine,
    Row,
    Verified,
    _cpu_reference,
    check_mesh,
    check_ranks,
    rank_skips,
    row,
)
from fitcore.strategies.ddp.name import NAME
from fitcore.strategies.ddp.phases import ALLREDUCE


def check_ddp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    """Train CHECK_CONFIG with DistributedDataParallel on `workers` ranks and verify rows and parameters.

    The data size is rounded up to a multiple of the ranks, so no row is repeated to pad a shard and a
    step's global batch is every row once: DDP then learns what one process learns on the same rows.

    Args:
        spec: "cpu" (gloo, one CPU process per rank) or "cuda"/"cuda:0,1" (nccl, one GPU per rank).
        workers: the ranks.
        gpus: the machine's GPUs, which the spec is checked against.
    """
    return check_ranks(spec, workers, gpus, CHECK_CONFIG, NAME)[0]


def check_sync_batchnorm(gpus: int) -> Verified:
    """torch's SyncBatchNorm on `gpus` ranks against the one-process arithmetic (its syncbn.py)."""
    from fitcore.strategies.ddp.syncbn import check_sync_batchnorm as measure

    figures = measure(gpus)
    for name in ("params_diff", "running_mean_diff"):
        if figures[name] > CUDA_TOL:
            diff = f"{figures[name]:.3g}"
            raise CheckFailed(t("cli.check.fail.syncbn", what=name, diff=diff, tol=CUDA_TOL))
    text = t("cli.check.syncbn", gpus=gpus, steps=figures["steps"], params=f"{figures['params_diff']:.2g}",
             running=f"{figures['running_mean_diff']:.2g}", tol=CUDA_TOL)  # fmt: skip
    return Verified(text, figures)


def check_hosts(nodes: int = 2) -> Verified:
    """DDP on gloo across `nodes` network-namespace hosts of one rank each, under torchrun
    (fitcore.engine.across: the rows, identical ranks, one process, least squares)."""
    from fitcore.engine import across

    cfg = across.config(nodes, NAME)
    results = across.checks(cfg, across.run(cfg, nodes, 1), nodes, 1, _cpu_reference(replace(cfg, workers=2)))
    failed = [f"{name}: {text}" for name, ok, text in results if not ok]
    if failed:
        raise CheckFailed("; ".join(failed))
    return Verified("; ".join(text for _, _, text in results[1:]), {name: text for name, _, text in results})


def mesh_bytes(rows: int, cols: int) -> dict[str, int]:
    """One rank's bytes on dp=2 x tp=2: its tp group's all-reduce of its rows' (rows, 1) outputs, its dp
    group's all-reduce of its columns' gradients and b's."""
    return {TP_ALLREDUCE: ring_bytes(2, rows * 4), ALLREDUCE: ring_bytes(2, (cols + 1) * 4)}


def check_rows(machine: Machine) -> list[Row]:
    """Two gloo CPU ranks, and one nccl rank per GPU where there are two or more."""
    gpus = machine.gpus
    n = len(gpus)
    no_gloo, no_nccl = rank_skips(machine)
    return [
        row(t("cli.check.row.gloo", n=2), lambda: check_ddp("cpu", 2), no_gloo),
        row(t("cli.check.row.mesh", mesh=MESH_CHECK), lambda: check_mesh(NAME, mesh_bytes, "cli.check.mesh"),
            no_gloo),
        row(t("cli.check.row.nccl", n=max(n, 2)), lambda: check_ddp("cuda", n, gpus), no_nccl),
        row(t("cli.check.row.syncbn", n=max(n, 2)), lambda: check_sync_batchnorm(n), no_nccl),
        row(t("cli.check.row.hosts", n=2), check_hosts, no_gloo or machine.no_hosts),
    ]
