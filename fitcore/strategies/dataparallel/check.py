"""The dataparallel rows of `fitcore check`: the split of every step against tensor.chunk, the phases and
their bytes, the parameters against one CPU device and against least squares, on each device spec."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from fitcore.core.config import check
from fitcore.core.devices import GPU
from fitcore.core.i18n import t
from fitcore.kit.check import (
    CHECK_CONFIG,
    CUDA_TOL,
    SAME_DEVICE_TOL,
    VIRTUAL_KS,
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
    row,
)
from fitcore.strategies.dataparallel.name import NAME
from fitcore.strategies.dataparallel.phases import dataparallel_bytes


def check_dataparallel(spec: str, gpus: tuple[GPU, ...] = (), reference: bool = True) -> Verified:
    """Train CHECK_CONFIG on the devices of `spec` and verify its split and what it learned.

    Args:
        spec: a device spec: "cpu", "virtual:3", "cuda:0", "virtual:3@cuda:0", "cuda".
        gpus: the machine's GPUs, which the spec is checked against.
        reference: compare with one CPU device (within 1e-5, or 1e-4 where a GPU ran); False for the
            reference run itself.
    """
    checked = check(replace(CHECK_CONFIG, devices=spec), gpus=list(gpus))
    cfg, plan = checked.config, checked.plan
    events, ended = _train(checked)
    _require_finished(cfg, ended)
    steps = _steps(events)
    # 1. every step's split: the rows each replica recorded, against tensor.chunk of that batch
    for step in steps:
        split = tuple(r.stop - r.start for r in step.replicas)
        chunks = tuple(len(c) for c in torch.arange(step.input_shape[0]).chunk(len(plan.labels)))
        devices = tuple(r.device for r in step.replicas)
        if split != chunks or devices != plan.labels[: len(chunks)]:
            raise CheckFailed(
                t("cli.check.fail.split", step=step.step, split=_sizes(split), devices=devices,
                  chunks=_sizes(chunks), expected=plan.labels[: len(chunks)])
            )  # fmt: skip
    first = tuple(r.stop - r.start for r in steps[0].replicas)
    parts = [t("cli.check.split", split=_sizes(first), steps=len(steps))]
    figures: dict[str, Any] = {"split": list(first), "steps": len(steps), "devices": list(plan.labels)}
    # 2. the learned parameters, against one CPU device and against least squares
    learned = _params(ended)
    if reference:
        tol = CUDA_TOL if plan.device_ids else SAME_DEVICE_TOL
        diff = _max_diff(learned, _cpu_reference(CHECK_CONFIG))
        parts.append(_within("W_cpu" if plan.device_ids else "W_1dev", diff, tol))
        figures.update(reference_diff=diff, reference_tol=tol)
    parts.append(_lstsq(cfg, learned, figures))
    # 3. the phases the step picture draws: on every step, for each busy device, measured and in order
    if len(plan.labels) > 1:
        parts.append(_phases_checked(steps, figures))
    return Verified("; ".join(parts), figures)


def _phases_checked(steps: list, figures: dict) -> str:
    """Every step's phases (perf_counter on the CPU, CUDA events on a GPU): one per busy device for each
    per-device phase, none negative, the bytes of DataParallel's formulas."""
    for step in steps:
        if step.phases is None:
            raise CheckFailed(t("cli.check.fail.no_phases", step=step.step))
        got = step.phases.phases()
        busy = len(step.replicas)
        for name in ("scatter", "replicate", "parallel_apply", "gather", "reduce"):
            count = sum(p.name == name for p in got)
            if count != busy:
                raise CheckFailed(
                    t("cli.check.fail.records", step=step.step, count=count, name=name, busy=busy)
                )
        if any(p.start < 0 or p.duration < 0 for p in got):
            raise CheckFailed(t("cli.check.fail.negative", step=step.step))
        sizes = [r.stop - r.start for r in step.replicas]
        d = step.input_shape[1]
        if step.phases.bytes != dataparallel_bytes(sizes, d, 4):
            raise CheckFailed(
                t("cli.check.fail.bytes", step=step.step, bytes=step.phases.bytes,
                  formula=dataparallel_bytes(sizes, d, 4))
            )  # fmt: skip
    total = sum(p.duration for p in steps[-1].phases.phases() if p.device == steps[-1].replicas[0].device)
    figures.update(phases_bytes=steps[-1].phases.bytes, phases_seconds_first_device=total)
    return t("cli.check.phases", steps=len(steps), bytes=steps[-1].phases.bytes)


def check_rows(machine: Machine) -> list[Row]:
    """One device, the emulated splits, one GPU, the emulated split on a GPU, and every GPU."""
    gpus = machine.gpus
    n = len(gpus)

    def dp(spec: str, **kw) -> Callable[[], Verified]:
        return lambda: check_dataparallel(spec, gpus, **kw)

    no_gpu = "" if n else t("cli.check.skip.no_gpu")
    two_gpus = "" if n >= 2 else t("cli.check.skip.two_gpus")
    return [
        Row(f"{NAME} cpu", dp("cpu", reference=False)),
        *(Row(f"{NAME} virtual:{k}", dp(f"virtual:{k}")) for k in VIRTUAL_KS),
        row(f"{NAME} cuda:0", dp("cuda:0"), no_gpu),
        row(f"{NAME} virtual:3@cuda:0", dp("virtual:3@cuda:0"), no_gpu),
        row(t("cli.check.row.cuda", n=max(n, 2)), dp("cuda"), two_gpus),
    ]
