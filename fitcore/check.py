"""`python -m fitcore check`: run every training path this machine can run, each against a reference.

One row per path. The rows are planned from what the machine reports (`Machine`, from
`fitcore.devices.cuda_gpus()` and torch.distributed), so a test can pass a fake machine and see which rows
would run and which are skipped, without running them. Every path is checked by the same two functions,
`check_dataparallel(spec, ...)` and `check_ddp(spec, ...)`: the CUDA rows are the CPU rows with another
device spec and a looser tolerance.

A row verifies real figures: the rows each replica (or rank) received against `tensor.chunk` of the batch
(DistributedSampler's rule for ddp), the learned parameters against training on one CPU device, and against
the exact least-squares answer (the check's config converges to it within its 40 steps).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import torch
import torch.distributed as dist

from fitcore import strategies
from fitcore.config import FitConfig, validate
from fitcore.data import least_squares, make_data
from fitcore.devices import GPU, cuda_gpus, parse_devices
from fitcore.events import Detail, Step
from fitcore.phases import dataparallel_bytes

# The tutorial's 200 rows in one batch of 200, with SGD at lr 0.3: full-batch gradient descent on standard
# normal X converges to the least-squares answer within about 20 steps, so 40 steps leave it at float32's
# rounding (about 1e-7) on every device.
CHECK_CONFIG = FitConfig(epochs=40, optimizer="sgd", lr=0.3)
SAME_DEVICE_TOL = 1e-5  # one process on the CPU, split or not: only the order of the sums can differ
CUDA_TOL = 1e-4  # a GPU against the CPU: other kernels, other rounding
LSTSQ_TOL = 1e-4  # the learned parameters against torch.linalg.lstsq
VIRTUAL_KS = (2, 3, 8)
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


class CheckFailed(Exception):
    """A figure outside its tolerance; the message gives the figure and the bound."""


@dataclass(frozen=True)
class Machine:
    """What this machine offers: versions, GPUs and torch.distributed's backends."""

    python: str
    torch: str
    cuda_runtime: str | None  # torch.version.cuda: None for a CPU build of torch
    driver: str | None  # the NVIDIA driver, from nvidia-smi; None where there is none
    gpus: tuple[GPU, ...]
    nccl: bool  # torch.distributed.is_nccl_available()
    gloo: bool  # torch.distributed.is_gloo_available()
    error: str = ""  # what reading the machine raised; the environment row fails with it


@dataclass(frozen=True)
class Verified:
    """What a row checked: one line for the table, and its figures for --json."""

    text: str
    figures: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One planned path: `run` verifies it (CheckFailed when a figure is off), or `skip` says why not."""

    name: str
    run: Callable[[], Verified] | None
    skip: str = ""  # the reason it cannot run on this machine; empty when it runs


@dataclass(frozen=True)
class Result:
    name: str
    status: str  # passed, failed or skipped
    reason: str  # why it failed or was skipped; empty when it passed
    verified: str
    seconds: float
    figures: dict = field(default_factory=dict)

    @property
    def result(self) -> str:
        """The table's result column: "passed", "failed: ..." or "skipped: ..."."""
        return f"{self.status}: {self.reason}" if self.reason else self.status


# ---------------------------------------------------------------------------------------------------------
# The machine.


def _nccl_available() -> bool:
    return dist.is_available() and dist.is_nccl_available()


def _gloo_available() -> bool:
    return dist.is_available() and dist.is_gloo_available()


def _driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it, or None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run(
        [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def probe(gpus: list[GPU] | None = None) -> Machine:
    """Read this machine; `gpus` replaces what cuda_gpus() reports (tests pretend GPU counts with it)."""
    gpus = cuda_gpus() if gpus is None else gpus
    return Machine(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda_runtime=torch.version.cuda,
        driver=_driver_version() if gpus else None,
        gpus=tuple(gpus),
        nccl=_nccl_available(),
        gloo=_gloo_available(),
    )


def safe_probe() -> Machine:
    """probe(), or where reading the machine raises (a broken CUDA driver), a CPU-only machine saying why."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - the environment row reports it; the CPU rows still run
        return Machine(
            platform.python_version(), torch.__version__, None, None, (), False, _gloo_available(),
            error=f"{type(exc).__name__}: {exc}",
        )  # fmt: skip


def check_environment(machine: Machine) -> Verified:
    """The versions and devices the other rows run on."""
    if machine.error:
        raise CheckFailed(f"reading the machine raised {machine.error}; the CUDA rows are skipped")
    gpus = "; ".join(g.label for g in machine.gpus) or "no CUDA GPU"
    text = (
        f"Python {machine.python}; torch {machine.torch}; CUDA runtime {machine.cuda_runtime or 'none'}; "
        f"driver {machine.driver or 'none'}; {gpus}; nccl {'yes' if machine.nccl else 'no'}, "
        f"gloo {'yes' if machine.gloo else 'no'}"
    )
    figures = asdict(machine)
    figures["gpus"] = [asdict(g) for g in machine.gpus]
    return Verified(text, figures)


# ---------------------------------------------------------------------------------------------------------
# The comparisons, one per strategy, each taking a device spec.


def _train(cfg: FitConfig, gpus: tuple[GPU, ...]):
    """Run cfg with its strategy's trainer (imported when a row runs, not when rows are planned); return
    (its events, its RunEnded)."""
    events: list = []
    train = strategies.of(cfg).train
    ended = train(cfg, events.append, plan=parse_devices(cfg.devices, list(gpus)))
    return events, ended


def _steps(events: list) -> list[Step]:
    """The Step events, one per optimizer step."""
    return [e for e in events if isinstance(e, Step)]


def _params(ended) -> tuple[float, ...]:
    return tuple(ended.weights) + (ended.bias,)


def _max_diff(a, b) -> float:
    if len(a) != len(b):
        return math.inf
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


@functools.lru_cache(maxsize=8)
def _cpu_reference(cfg: FitConfig) -> tuple[float, ...]:
    """The parameters one process on one CPU device learns with cfg (the reference every other row meets)."""
    cfg = replace(cfg, strategy=strategies.DEFAULT, devices="cpu")
    _, ended = _train(cfg, ())
    _require_finished(cfg, ended)
    return _params(ended)


def _require_finished(cfg: FitConfig, ended) -> None:
    if ended.steps != cfg.total_steps:
        raise CheckFailed(f"ran {ended.steps} of {cfg.total_steps} steps: {ended.status}: {ended.message}")


def _within(what: str, diff: float, tol: float) -> str:
    text = f"|W - {what}| = {diff:.1g} <= {tol:.0e}"
    if not diff <= tol:  # also catches NaN
        raise CheckFailed(text.replace("<=", "is not <="))
    return text


def _sizes(sizes) -> str:
    return "/".join(map(str, sizes))


def check_dataparallel(spec: str, gpus: tuple[GPU, ...] = (), reference: bool = True) -> Verified:
    """Train CHECK_CONFIG on the devices of `spec` and verify its split and what it learned.

    Args:
        spec: a device spec: "cpu", "virtual:3", "cuda:0", "virtual:3@cuda:0", "cuda".
        gpus: the machine's GPUs, for parse_devices.
        reference: compare with one CPU device (within 1e-5, or 1e-4 where a GPU ran); False for the
            reference run itself.
    """
    plan = parse_devices(spec, list(gpus))
    cfg = validate(replace(CHECK_CONFIG, devices=spec), gpus=list(gpus))
    events, ended = _train(cfg, gpus)
    _require_finished(cfg, ended)
    steps = _steps(events)
    # 1. every step's split: the rows each replica recorded, against tensor.chunk of that batch
    for step in steps:
        split = tuple(r.stop - r.start for r in step.replicas)
        chunks = tuple(len(c) for c in torch.arange(step.input_shape[0]).chunk(len(plan.labels)))
        devices = tuple(r.device for r in step.replicas)
        if split != chunks or devices != plan.labels[: len(chunks)]:
            raise CheckFailed(
                f"step {step.step}: split {_sizes(split)} on {devices}; tensor.chunk gives {_sizes(chunks)} "
                f"on {plan.labels[: len(chunks)]}"
            )
    first = tuple(r.stop - r.start for r in steps[0].replicas)
    parts = [f"split {_sizes(first)} = tensor.chunk on all {len(steps)} steps"]
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
            raise CheckFailed(f"step {step.step} recorded no phases")
        got = step.phases.phases()
        busy = len(step.replicas)
        for name in ("scatter", "replicate", "parallel_apply", "gather", "reduce"):
            count = sum(p.name == name for p in got)
            if count != busy:
                raise CheckFailed(f"step {step.step}: {count} {name} records for {busy} busy devices")
        if any(p.start < 0 or p.duration < 0 for p in got):
            raise CheckFailed(f"step {step.step}: a phase with a negative time")
        sizes = [r.stop - r.start for r in step.replicas]
        d = step.input_shape[1]
        if step.phases.bytes != dataparallel_bytes(sizes, d, 4):
            raise CheckFailed(
                f"step {step.step}: {step.phases.bytes} B; the formula gives "
                f"{dataparallel_bytes(sizes, d, 4)} B"
            )
    total = sum(p.duration for p in steps[-1].phases.phases() if p.device == steps[-1].replicas[0].device)
    figures.update(phases_bytes=steps[-1].phases.bytes, phases_seconds_first_device=total)
    return f"phases on all {len(steps)} steps, {steps[-1].phases.bytes} B a step"


def _lstsq(cfg: FitConfig, learned: tuple[float, ...], figures: dict) -> str:
    w, b = least_squares(*make_data(cfg))
    diff = _max_diff(learned, tuple(w) + (b,))
    figures.update(lstsq_diff=diff, lstsq_tol=LSTSQ_TOL, learned=list(learned))
    return _within("W_lstsq", diff, LSTSQ_TOL)


def check_ddp(spec: str, workers: int, gpus: tuple[GPU, ...] = ()) -> Verified:
    """Train CHECK_CONFIG with DistributedDataParallel on `workers` ranks and verify rows and parameters.

    The data size is rounded up to a multiple of the ranks, so no row is repeated to pad a shard and a
    step's global batch is every row once: DDP then learns what one process learns on the same rows.

    Args:
        spec: "cpu" (gloo, one CPU process per rank) or "cuda"/"cuda:0,1" (nccl, one GPU per rank).
        workers: the ranks.
        gpus: the machine's GPUs, for parse_devices.
    """
    rows = workers * math.ceil(CHECK_CONFIG.data_size / workers)
    base = replace(CHECK_CONFIG, data_size=rows, batch_size=rows)
    cfg = validate(replace(base, strategy="ddp", devices=spec, workers=workers), gpus=list(gpus))
    events, ended = _train(cfg, gpus)
    _require_finished(cfg, ended)
    steps = _steps(events)
    # 1. each rank's rows per step: ceil(N / K) rows of its shard, all of them in the one step per epoch
    expected = (rows // workers,) * workers
    for step in steps:
        split = tuple(r.stop - r.start for r in step.replicas)
        if split != expected:
            raise CheckFailed(
                f"step {step.step}: ranks got {_sizes(split)} rows, expected {_sizes(expected)}"
            )
    finals = [e.value for e in events if isinstance(e, Detail) and e.key == "final"]
    if not finals or not finals[0]["identical"]:
        diff = finals[0]["max_abs_diff"] if finals else "none reported"
        raise CheckFailed(f"the ranks' final parameters differ: {diff}")
    parts = [
        f"rows per rank {_sizes(expected)} = ceil({rows}/{workers}) on all {len(steps)} steps",
        f"{workers} ranks identical",
    ]
    figures: dict[str, Any] = {"split": list(expected), "steps": len(steps), "ranks_identical": True}
    # 2. the parameters, against one process on the same rows and against least squares
    learned = _params(ended)
    tol = CUDA_TOL if spec.startswith("cuda") else SAME_DEVICE_TOL
    diff = _max_diff(learned, _cpu_reference(base))
    parts.append(_within("W_1proc", diff, tol))
    figures.update(reference_diff=diff, reference_tol=tol)
    parts.append(_lstsq(cfg, learned, figures))
    return Verified("; ".join(parts), figures)


# ---------------------------------------------------------------------------------------------------------
# The rows.


def plan_rows(machine: Machine) -> list[Row]:
    """Every path, in order: a runnable Row where the machine allows it, a skipped one where not."""
    gpus = machine.gpus
    n = len(gpus)

    def dp(spec: str, **kw) -> Callable[[], Verified]:
        return lambda: check_dataparallel(spec, gpus, **kw)

    def row(name: str, run: Callable[[], Verified], skip: str = "") -> Row:
        return Row(name, None if skip else run, skip)

    no_gpu = "" if n else "no CUDA GPU"
    two_gpus = "" if n >= 2 else "needs 2 GPUs"
    no_gloo = "" if machine.gloo else "gloo not available"
    no_nccl = "" if machine.nccl else "nccl not available"
    return [
        Row("environment", lambda: check_environment(machine)),
        Row("dataparallel cpu", dp("cpu", reference=False)),
        *(Row(f"dataparallel virtual:{k}", dp(f"virtual:{k}")) for k in VIRTUAL_KS),
        row("dataparallel cuda:0", dp("cuda:0"), no_gpu),
        row("dataparallel virtual:3@cuda:0", dp("virtual:3@cuda:0"), no_gpu),
        row(f"dataparallel cuda ({max(n, 2)} GPUs, nn.DataParallel)", dp("cuda"), two_gpus),
        row("ddp gloo 2 ranks (CPU)", lambda: check_ddp("cpu", 2), no_gloo),
        row(
            f"ddp nccl {max(n, 2)} ranks (1 per GPU)", lambda: check_ddp("cuda", n, gpus), no_nccl or two_gpus
        ),
    ]


def run_row(row: Row, clock: Callable[[], float] = time.perf_counter) -> Result:
    """Run one row; whatever it raises becomes a failed result with its type and message, not a traceback."""
    if row.run is None:
        return Result(row.name, SKIPPED, row.skip, "", 0.0)
    t0 = clock()
    try:
        verified = row.run()
    except CheckFailed as exc:
        return Result(row.name, FAILED, str(exc), "", clock() - t0)
    except Exception as exc:  # noqa: BLE001 - a row that raises is a failed row, and the others still run
        return Result(row.name, FAILED, f"{type(exc).__name__}: {exc}", "", clock() - t0)
    return Result(row.name, PASSED, "", verified.text, clock() - t0, verified.figures)


# ---------------------------------------------------------------------------------------------------------
# Output.

HEADERS = ("path", "result", "time")
WIDTH = 100  # a terminal's width for what a row verified, on the lines under it


def _time(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds else "-"


def _wrapped(verified: str) -> list[str]:
    """What a row verified, indented, a figure never cut: its "; "-separated parts packed into lines."""
    lines = [""]
    for part in verified.split("; "):
        if lines[-1] and len(lines[-1]) + 2 + len(part) > WIDTH - 4:
            lines.append("")
        lines[-1] += ("; " if lines[-1] else "") + part
    return ["    " + line for line in lines]


def table_lines(results: list[Result]) -> list[str]:
    """An aligned text table: a line per row (path, result, time), and what it verified indented beneath,
    wrapped to a terminal's width."""
    cells = [HEADERS] + [(r.name, r.result, _time(r.seconds)) for r in results]
    w = [max(len(c[i]) for c in cells) for i in range(3)]
    lines = []
    for i, c in enumerate(cells):
        lines.append(f"{c[0]:<{w[0]}}  {c[1]:<{w[1]}}  {c[2]:>{w[2]}}")
        if i and results[i - 1].verified:
            lines += _wrapped(results[i - 1].verified)
    lines.insert(1, "-" * max(len(line) for line in lines))
    return lines


def summary_line(results: list[Result]) -> str:
    """The last line: the counts, and the name of every row that failed."""
    counts = {s: sum(r.status == s for r in results) for s in (PASSED, FAILED, SKIPPED)}
    text = f"{counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped"
    failed = [r.name for r in results if r.status == FAILED]
    return f"check: FAILED: {', '.join(failed)} ({text})" if failed else f"check: OK ({text})"


def exit_code(results: list[Result]) -> int:
    return 1 if any(r.status == FAILED for r in results) else 0


def json_object(results: list[Result]) -> dict:
    return {
        "rows": [{**asdict(r), "result": r.result} for r in results],
        "exit_code": exit_code(results),
        "summary": summary_line(results),
    }


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """Bad flags: one line on stderr and exit status 2, like `python -m fitcore`."""
        self.exit(2, f"fitcore check: error: {message} (see python -m fitcore check --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m fitcore check",
        description=(
            "Run every training path this machine can run (CPU, emulated devices, CUDA GPUs, DDP on gloo "
            "and nccl), each against tensor.chunk, one-device training and least squares, and print one "
            "row per path. Exit status: 0 all that ran passed, 1 a row failed, 2 bad arguments."
        ),
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (a list of rows) and nothing else"
    )
    return p


def main(argv: list[str] | None = None, machine: Machine | None = None) -> int:
    """`python -m fitcore check [--json]`; returns the exit status."""
    args = build_parser().parse_args(argv)
    machine = safe_probe() if machine is None else machine
    results = [run_row(row) for row in plan_rows(machine)]
    if args.json:
        print(json.dumps(json_object(results)), flush=True)
    else:
        print("\n".join(table_lines(results) + [summary_line(results)]), flush=True)
    return exit_code(results)
