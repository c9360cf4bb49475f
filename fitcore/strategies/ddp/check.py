"""The ddp rows of `fitcore check`: each rank's rows per step, identical parameters on every rank, and the
parameters against one process and against least squares, on gloo CPU ranks and on nccl GPUs."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from fitcore.check import (
    CHECK_CONFIG,
    CUDA_TOL,
    SAME_DEVICE_TOL,
    CheckFailed,
    Machine,
    Row,
    Verified,
    _cpu_reference,
    _lstsq,
    _max_diff,
    _params,
    _require_finished,
    _sizes,
    _steps,
    _train,
    _within,
    rank_skips,
    row,
)
from fitcore.config import FitConfig, validate
from fitcore.devices import GPU
from fitcore.events import Detail
from fitcore.i18n import t
from fitcore.strategies.ddp.name import NAME


def check_ddp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    """Train CHECK_CONFIG with DistributedDataParallel on `workers` ranks and verify rows and parameters.

    The data size is rounded up to a multiple of the ranks, so no row is repeated to pad a shard and a
    step's global batch is every row once: DDP then learns what one process learns on the same rows.

    Args:
        spec: "cpu" (gloo, one CPU process per rank) or "cuda"/"cuda:0,1" (nccl, one GPU per rank).
        workers: the ranks.
        gpus: the machine's GPUs, for parse_devices.
    """
    return check_ranks(spec, workers, gpus)[0]


def check_ranks(
    spec: str, workers: int, gpus: tuple[GPU, ...] = (), base: FitConfig = CHECK_CONFIG, strategy: str = NAME
) -> tuple[Verified, list]:
    """check_ddp for any strategy with ranks that cuts DDP's rows (`strategy`, on `base`): (what it
    verified, the run's events), for the strategy's own checks on top."""
    rows = workers * math.ceil(base.data_size / workers)
    base = replace(base, data_size=rows, batch_size=rows)
    cfg = validate(replace(base, strategy=strategy, devices=spec, workers=workers), gpus=list(gpus))
    events, ended = _train(cfg, gpus)
    _require_finished(cfg, ended)
    steps = _steps(events)
    # 1. each rank's rows per step: ceil(N / K) rows of its shard, all of them in the one step per epoch
    expected = (rows // workers,) * workers
    for step in steps:
        split = tuple(r.stop - r.start for r in step.replicas)
        if split != expected:
            raise CheckFailed(
                t("cli.check.fail.rows", step=step.step, split=_sizes(split), expected=_sizes(expected))
            )
    finals = [e.value for e in events if isinstance(e, Detail) and e.key == "final"]
    if not finals or not finals[0]["identical"]:
        diff = finals[0]["max_abs_diff"] if finals else t("cli.check.fail.none_reported")
        raise CheckFailed(t("cli.check.fail.ranks_differ", diff=diff))
    parts = [
        t("cli.check.rows_per_rank", split=_sizes(expected), rows=rows, workers=workers, steps=len(steps)),
        t("cli.check.ranks_identical", workers=workers),
    ]
    figures: dict[str, Any] = {"split": list(expected), "steps": len(steps), "ranks_identical": True}
    # 2. the parameters, against one process on the same rows and against least squares
    learned = _params(ended)
    tol = CUDA_TOL if spec.startswith("cuda") else SAME_DEVICE_TOL
    diff = _max_diff(learned, _cpu_reference(base))
    parts.append(_within("W_1proc", diff, tol))
    figures.update(reference_diff=diff, reference_tol=tol)
    parts.append(_lstsq(cfg, learned, figures))
    return Verified("; ".join(parts), figures), events


def check_sync_batchnorm(gpus: int) -> Verified:
    """torch's SyncBatchNorm on `gpus` ranks against the lab's one-process arithmetic (fitcore.traps)."""
    from fitcore.traps.batchnorm import check_sync_batchnorm as measure

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
    (fitcore.strategies.ddp.across: the rows, identical ranks, one process, least squares)."""
    from fitcore.strategies.ddp import across

    cfg = across.config(nodes)
    results = across.checks(cfg, across.run(cfg, nodes, 1), nodes, 1, _cpu_reference(replace(cfg, workers=2)))
    failed = [f"{name}: {text}" for name, ok, text in results if not ok]
    if failed:
        raise CheckFailed("; ".join(failed))
    return Verified("; ".join(text for _, _, text in results[1:]), {name: text for name, _, text in results})


def check_rows(machine: Machine) -> list[Row]:
    """Two gloo CPU ranks, and one nccl rank per GPU where there are two or more."""
    gpus = machine.gpus
    n = len(gpus)
    no_gloo, no_nccl = rank_skips(machine)
    return [
        row(t("cli.check.row.gloo", n=2), lambda: check_ddp("cpu", 2), no_gloo),
        row(t("cli.check.row.nccl", n=max(n, 2)), lambda: check_ddp("cuda", n, gpus), no_nccl),
        row(t("cli.check.row.syncbn", n=max(n, 2)), lambda: check_sync_batchnorm(n), no_nccl),
        row(t("cli.check.row.hosts", n=2), check_hosts, no_gloo or machine.no_hosts),
    ]
