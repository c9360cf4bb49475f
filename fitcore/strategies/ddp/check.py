"""The ddp rows of `fitcore check`: each rank's rows per step, identical parameters on every rank, and the
parameters against one process and against least squares, on gloo CPU ranks and on nccl GPUs."""

from __future__ import annotations

from dataclasses import replace

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
    _steps,
    _train,
    _within,
    check_ranks,
    rank_skips,
    row,
)
from fitcore.chunks import columns
from fitcore.config import validate
from fitcore.devices import GPU
from fitcore.i18n import t
from fitcore.mesh import DP, TP
from fitcore.phases import TP_ALLREDUCE
from fitcore.strategies.ddp.name import NAME
from fitcore.strategies.ddp.phases import ALLREDUCE, ring_bytes


def check_ddp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    """Train CHECK_CONFIG with DistributedDataParallel on `workers` ranks and verify rows and parameters.

    The data size is rounded up to a multiple of the ranks, so no row is repeated to pad a shard and a
    step's global batch is every row once: DDP then learns what one process learns on the same rows.

    Args:
        spec: "cpu" (gloo, one CPU process per rank) or "cuda"/"cuda:0,1" (nccl, one GPU per rank).
        workers: the ranks.
        gpus: the machine's GPUs, for parse_devices.
    """
    return check_ranks(spec, workers, gpus, CHECK_CONFIG, NAME)[0]


def check_sync_batchnorm(gpus: int) -> Verified:
    """torch's SyncBatchNorm on `gpus` ranks against the lab's one-process arithmetic (fitcore.traps)."""
    from fitcore.traps.syncbn import check_sync_batchnorm as measure

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


MESH_CHECK = f"{DP}=2,{TP}=2"  # 4 gloo ranks: DDP over dp, RowwiseParallel over tp


def check_mesh() -> Verified:
    """DDP over dp on a dp=2 x tp=2 mesh of gloo ranks, RowwiseParallel over tp: each rank's block of the
    batch (its dp coordinate's rows, its tp coordinate's columns), each collective's bytes by its ring
    formula, and the parameters against one process on the same rows and against least squares."""
    cfg = validate(replace(CHECK_CONFIG, strategy=NAME, devices="cpu", mesh=MESH_CHECK, workers=4))
    events, ended = _train(cfg, ())
    _require_finished(cfg, ended)
    step = _steps(events)[0]
    rows, cuts = cfg.batch_size // 2, columns(cfg.n_features, 2)
    blocks = [(r.start, r.stop, r.columns) for r in step.replicas]
    expected = [(dp * rows, dp * rows + rows, cuts[tp]) for dp in range(2) for tp in range(2)]
    if blocks != expected:
        raise CheckFailed(f"blocks {blocks}, expected {expected}")
    # one rank's bytes: its tp group's all-reduce of its rows' (rows, 1) outputs, its dp group's of its
    # columns' gradients and b's
    sent = {(p.device, p.name): p.bytes for p in step.phases.phases()} if step.phases else {}
    for r, (lo, hi) in enumerate(cuts[tp] for _ in range(2) for tp in range(2)):
        label = step.replicas[r].device
        want = {TP_ALLREDUCE: ring_bytes(2, rows * 4), ALLREDUCE: ring_bytes(2, (hi - lo + 1) * 4)}
        got = {name: sent.get((label, name)) for name in want}
        if got != want:
            raise CheckFailed(f"rank {r}'s bytes {got}, the formulas {want}")
    learned = _params(ended)
    diff = _max_diff(learned, _cpu_reference(replace(CHECK_CONFIG, devices="cpu")))
    figures = {"blocks": [list(b[:2]) + [list(b[2])] for b in blocks], "reference_diff": diff}
    parts = [t("cli.check.mesh", mesh=MESH_CHECK, rows=rows, tp=want[TP_ALLREDUCE]),
             _within("W_1proc", diff, SAME_DEVICE_TOL), _lstsq(cfg, learned, figures)]  # fmt: skip
    return Verified("; ".join(parts), figures)


def check_rows(machine: Machine) -> list[Row]:
    """Two gloo CPU ranks, and one nccl rank per GPU where there are two or more."""
    gpus = machine.gpus
    n = len(gpus)
    no_gloo, no_nccl = rank_skips(machine)
    return [
        row(t("cli.check.row.gloo", n=2), lambda: check_ddp("cpu", 2), no_gloo),
        row(t("cli.check.row.mesh", mesh=MESH_CHECK), check_mesh, no_gloo),
        row(t("cli.check.row.nccl", n=max(n, 2)), lambda: check_ddp("cuda", n, gpus), no_nccl),
        row(t("cli.check.row.syncbn", n=max(n, 2)), lambda: check_sync_batchnorm(n), no_nccl),
        row(t("cli.check.row.hosts", n=2), check_hosts, no_gloo or machine.no_hosts),
    ]
