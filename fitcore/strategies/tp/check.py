"""The tp rows of `fitcore check`: each rank holds its columns of W (torch.chunk's), the all-reduce's bytes
are the formula's, and the parameters meet one process and least squares; on gloo CPU ranks and nccl GPUs."""

from __future__ import annotations

from dataclasses import replace

from fitcore.core.chunks import columns
from fitcore.core.config import check
from fitcore.core.devices import GPU
from fitcore.core.events import Detail
from fitcore.core.i18n import count, t
from fitcore.kit.check import (
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
    rank_skips,
    row,
)
from fitcore.strategies.tp.layout import allreduce_bytes
from fitcore.strategies.tp.name import NAME

CHECK_TP = replace(CHECK_CONFIG, weights=(5.2, 9.6, -1.0))  # 3 features: 2 ranks hold unequal columns


def check_tp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    """Train CHECK_TP with RowwiseParallel on `workers` ranks; verify each rank's columns and bytes, then the
    parameters against one process on the same batches and against least squares."""
    checked = check(replace(CHECK_TP, strategy=NAME, devices=spec, workers=workers), gpus=list(gpus))
    cfg = checked.config
    events, ended = _train(checked)
    _require_finished(cfg, ended)
    steps = _steps(events)
    value = [e.value for e in events if isinstance(e, Detail) and e.key == NAME][-1]
    cols, held = columns(cfg.n_features, workers), []
    for r, rank in enumerate(value["ranks"]):
        lo, hi = cols[r]
        got = len((rank.get("shard") or {}).get("weights", []))
        if got != hi - lo:
            holds = count("tp.count.weight", got)
            raise CheckFailed(t("cli.check.fail.tp_columns", rank=r, got=holds, expected=hi - lo))
        held.append(f"W[{lo}:{hi}]")
    rows = steps[0].input_shape[0]
    sent = allreduce_bytes(workers, rows, 4)
    measured = (
        {p.bytes for p in steps[0].phases.phases() if p.name == "allreduce"} if steps[0].phases else set()
    )
    if measured != {sent}:
        raise CheckFailed(f"all-reduce bytes {sorted(measured)}, the formula {sent}")
    parts = [t("cli.check.tp_columns", columns=", ".join(held), bytes=sent)]
    learned = _params(ended)
    tol = 10 * CUDA_TOL if spec.startswith("cuda") else SAME_DEVICE_TOL
    diff = _max_diff(learned, _cpu_reference(replace(CHECK_TP, devices="cpu")))
    parts.append(_within("W_1proc", diff, tol))
    figures = {"columns": held, "allreduce_bytes": sent, "reference_diff": diff, "reference_tol": tol}
    parts.append(_lstsq(cfg, learned, figures))
    return Verified("; ".join(parts), figures)


def check_rows(machine: Machine) -> list[Row]:
    """Two gloo CPU ranks, and one nccl rank per GPU where there are two or more."""
    gpus = machine.gpus
    n = len(gpus)
    no_gloo, no_nccl = rank_skips(machine)
    return [
        row(t("cli.check.row.tp_gloo", n=2), lambda: check_tp("cpu", 2), no_gloo),
        row(t("cli.check.row.tp_nccl", n=max(n, 2)), lambda: check_tp("cuda", n, gpus), no_nccl),
    ]
