"""The fsdp rows of `fitcore check`: each rank holds its rows of W and b (and no more), the gathered
parameters are identical on every rank, and they meet one process and least squares; on gloo CPU ranks and
nccl GPUs."""

from __future__ import annotations

from dataclasses import replace

from fitcore.core.devices import GPU
from fitcore.core.events import Detail
from fitcore.core.i18n import count, t
from fitcore.core.phases import TP_ALLREDUCE, ring_bytes
from fitcore.kit.check import (
    CHECK_CONFIG,
    MESH_CHECK,
    CheckFailed,
    Machine,
    Row,
    Verified,
    check_mesh,
    check_ranks,
    rank_skips,
    row,
)
from fitcore.strategies.fsdp.layout import (
    ALL_GATHER,
    REDUCE_SCATTER,
    planned_sent_2d,
    shard_numel,
    shard_rows,
)
from fitcore.strategies.fsdp.name import NAME

# three weights, so that two ranks hold unequal parts (w1, w2 and b; w3) and three ranks one weight each
CHECK_FSDP = replace(CHECK_CONFIG, weights=(5.2, 9.6, -1.0))


def check_fsdp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    """Train CHECK_FSDP with fully_shard on `workers` ranks: DDP's checks (rows, identical ranks, one process,
    least squares), then each rank's shard against torch.chunk's rows of W (d, 1) and b."""
    verified, events = check_ranks(spec, workers, gpus, CHECK_FSDP, NAME)
    value = [e.value for e in events if isinstance(e, Detail) and e.key == NAME][-1]
    d = CHECK_FSDP.n_features
    w_rows, b_rows = shard_rows(d, workers), shard_rows(1, workers)
    held = []
    for r, rank in enumerate(value["ranks"]):
        expected = (w_rows[r][1] - w_rows[r][0], b_rows[r][1] - b_rows[r][0])
        got = (len(rank["shard"]["weights"]), len(rank["shard"]["bias"]))
        if got != expected or rank["weight_rows"] != list(w_rows[r]):
            raise CheckFailed(t("cli.check.fail.fsdp_shards", rank=r, got=got, expected=expected))
        held.append(f"W[{w_rows[r][0]}:{w_rows[r][1]}]" + (" + b" if expected[1] else ""))
    numel = shard_numel(d, workers)
    text = t("cli.check.fsdp_shards", shards=", ".join(held), numel=count("fsdp.count.number", numel))
    figures = {**verified.figures, "shards": held, "padded_numel": numel}
    return Verified(f"{text}; {verified.text}", figures)


def mesh_bytes(rows: int, cols: int) -> dict[str, int]:
    """One rank's bytes on dp=2 x tp=2: its tp group's all-reduce of its rows' outputs, its dp group's two
    all-gathers (ZeRO-3) and reduce-scatter of its [1, cols] block of W and b, padded to ceil(1 / 2) rows."""
    *gathers, scatter = planned_sent_2d(2, cols, 4, True)
    return {TP_ALLREDUCE: ring_bytes(2, rows * 4), ALL_GATHER: sum(gathers), REDUCE_SCATTER: scatter}


def check_rows(machine: Machine) -> list[Row]:
    """Two gloo CPU ranks, and one nccl rank per GPU where there are two or more."""
    gpus = machine.gpus
    n = len(gpus)
    no_gloo, no_nccl = rank_skips(machine)
    return [
        row(t("cli.check.row.fsdp_gloo", n=2), lambda: check_fsdp("cpu", 2), no_gloo),
        row(t("cli.check.row.fsdp_mesh", mesh=MESH_CHECK),
            lambda: check_mesh(NAME, mesh_bytes, "cli.check.fsdp_mesh"), no_gloo),
        row(t("cli.check.row.fsdp_nccl", n=max(n, 2)), lambda: check_fsdp("cuda", n, gpus), no_nccl),
    ]
