"""The pp rows of `fitcore check`: each rank ran its blocks in the schedule's order, stage 0 held what its
schedule lets it hold, the bytes between stages are the formula's, and the layers' product meets the same
deep model on one device and least squares; on gloo CPU ranks and nccl GPUs."""

from __future__ import annotations

from dataclasses import replace

import torch

from fitcore.core.config import FitConfig, check
from fitcore.core.data import epoch_ids, make_data, order_generator
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
    _lstsq,
    _max_diff,
    _params,
    _require_finished,
    _train,
    _within,
    rank_skips,
    row,
)
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.compare import DeepTrainer
from fitcore.strategies.pp.name import NAME
from fitcore.strategies.pp.schedule import blocks_of

CHECK_PP = replace(
    CHECK_CONFIG, optimizer="adam", lr=0.1, epochs=300, layers=4, microbatches=4, schedule="1f1b"
)


def one_device(cfg: FitConfig) -> tuple[float, ...]:
    """The same deep model on one CPU device, on the same whole batches (one device's order)."""
    cfg = replace(cfg, devices="cpu")
    data = make_data(cfg, torch.device("cpu"))
    one = DeepTrainer(cfg, data, torch.device("cpu"), cfg.lr)
    generator = order_generator(cfg.seed)
    for _ in range(cfg.epochs):
        for batch in epoch_ids(cfg.data_size, cfg.batch_size, cfg.shuffle, generator):
            xb, yb = one.rows(batch.tolist())
            one.optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(one.model(xb), yb).backward()
            one.optimizer.step()
    return tuple(one.flat().tolist())


def check_pp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    checked = check(replace(CHECK_PP, strategy=NAME, devices=spec, workers=workers), gpus=list(gpus))
    cfg = checked.config
    events, ended = _train(checked)
    _require_finished(cfg, ended)
    value = [e.value for e in events if isinstance(e, Detail) and e.key == NAME][-1]
    runs = layout.order(cfg.schedule, workers, cfg.microbatches)
    for r, rank in enumerate(value["ranks"]):
        ran = tuple(blocks_of(rank["blocks"]))
        if ran != runs[r]:
            got = count("pp.count.block", len(ran))
            raise CheckFailed(t("cli.check.fail.pp_order", rank=r, got=got, expected=len(runs[r])))
    held = layout.held_counts(blocks_of(value["ranks"][0]["blocks"])).get(0, 0)
    if held > workers:
        raise CheckFailed(t("cli.check.fail.pp_held", held=held, p=workers))
    rows = value["microbatch_rows"]
    expected = layout.step_bytes(rows * cfg.microbatches, layout.hidden(cfg), workers, cfg.schedule)
    if value["bytes_between_stages"] != expected:
        raise CheckFailed(f"bytes between stages {value['bytes_between_stages']}, the formula {expected}")
    parts = [t("cli.check.pp_schedule", schedule=cfg.schedule, held=held, bytes=expected)]
    learned = _params(ended)
    tol = 10 * CUDA_TOL if spec.startswith("cuda") else SAME_DEVICE_TOL
    diff = _max_diff(learned, one_device(cfg))
    parts.append(_within("W_1proc", diff, tol))
    figures = {
        "held_stage0": held,
        "bytes_between_stages": expected,
        "reference_diff": diff,
        "reference_tol": tol,
    }
    parts.append(_lstsq(cfg, learned, figures))
    return Verified("; ".join(parts), figures)


def check_rows(machine: Machine) -> list[Row]:
    """Two gloo CPU ranks, and one nccl rank per GPU where there are two or more."""
    gpus = machine.gpus
    n = len(gpus)
    no_gloo, no_nccl = rank_skips(machine)
    return [
        row(t("cli.check.row.pp_gloo", n=2), lambda: check_pp("cpu", 2), no_gloo),
        row(t("cli.check.row.pp_nccl", n=max(n, 2)), lambda: check_pp("cuda", n, gpus), no_nccl),
    ]
