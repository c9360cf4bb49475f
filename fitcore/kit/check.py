"""`python -m fitcore check`: run every training path this machine can run, each against a reference.

One row per path. The rows are planned from what the machine reports (`Machine`, from
`fitcore.core.devices.cuda_gpus()` and torch.distributed), so a test can pass a fake machine and see which
rows would run and which are skipped, without running them. Every path is checked by the same two functions,
`check_dataparallel(spec, ...)` and `check_ddp(spec, ...)`: the CUDA rows are the CPU rows with another
device spec and a looser tolerance.

A row verifies real figures: the rows each replica (or rank) received against `tensor.chunk` of the batch
(DistributedSampler's rule for ddp), the learned parameters against training on one CPU device, and against
the exact least-squares answer (the check's config converges to it within its 40 steps).
"""

from __future__ import annotations

import argparse
import functools
import math
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import torch
import torch.distributed as dist

from fitcore.core.chunks import columns
from fitcore.core.cliparse import Parser, command
from fitcore.core.config import Checked, FitConfig, check
from fitcore.core.data import least_squares, make_data
from fitcore.core.devices import GPU, cuda_gpus
from fitcore.core.events import Detail, Step
from fitcore.core.i18n import t
from fitcore.core.schema import dumps
from fitcore.core.text import pad, width
from fitcore.engine.hosts import available as hosts_available
from fitcore.protocols import registry
from fitcore.protocols.mesh import DP, TP

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
    no_hosts: str = ""  # why network-namespace hosts cannot be made here (registry.ddp.hosts), or ''


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
        status = t(f"cli.check.status.{self.status}")
        return t("cli.check.result", status=status, reason=self.reason) if self.reason else status


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
        no_hosts=hosts_available(),
    )


def safe_probe() -> Machine:
    """probe(), or where reading the machine raises (a broken CUDA driver), a CPU-only machine saying why."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - the environment row reports it; the CPU rows still run
        return Machine(
            platform.python_version(), torch.__version__, None, None, (), False, _gloo_available(),
            error=f"{type(exc).__name__}: {exc}", no_hosts=hosts_available(),
        )  # fmt: skip


def check_environment(machine: Machine) -> Verified:
    """The versions and devices the other rows run on."""
    if machine.error:
        raise CheckFailed(t("cli.check.fail.probe", error=machine.error))
    gpus = "; ".join(g.label for g in machine.gpus) or t("cli.check.skip.no_gpu")
    none, yes, no = t("cli.check.none"), t("cli.check.yes"), t("cli.check.no")
    text = t(
        "cli.check.environment", python=machine.python, torch=machine.torch,
        cuda=machine.cuda_runtime or none, driver=machine.driver or none, gpus=gpus,
        nccl=yes if machine.nccl else no, gloo=yes if machine.gloo else no,
    )  # fmt: skip
    figures = asdict(machine)
    figures["gpus"] = [asdict(g) for g in machine.gpus]
    return Verified(text, figures)


# ---------------------------------------------------------------------------------------------------------
# The comparisons, one per strategy, each taking a device spec.


def _train(checked: Checked):
    """Run a checked config with its strategy's trainer, on the device plan the check made (the trainer is
    imported when a row runs, not when rows are planned); return (its events, its RunEnded)."""
    events: list = []
    cfg = checked.config
    ended = registry.of(cfg).train(cfg, events.append, plan=checked.plan)
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
    checked = check(replace(cfg, strategy=registry.DEFAULT, devices="cpu"), gpus=[])
    cfg = checked.config
    _, ended = _train(checked)
    _require_finished(cfg, ended)
    return _params(ended)


def _require_finished(cfg: FitConfig, ended) -> None:
    if ended.steps != cfg.total_steps:
        raise CheckFailed(
            t("cli.check.fail.steps", steps=ended.steps, total=cfg.total_steps, status=ended.status,
              message=ended.message)
        )  # fmt: skip


def _within(what: str, diff: float, tol: float) -> str:
    text = f"|W - {what}| = {diff:.1g}"
    if not diff <= tol:  # also catches NaN
        raise CheckFailed(t("cli.check.fail.within", text=text, tol=f"{tol:.0e}"))
    return f"{text} <= {tol:.0e}"


def _sizes(sizes) -> str:
    return "/".join(map(str, sizes))


def _lstsq(cfg: FitConfig, learned: tuple[float, ...], figures: dict) -> str:
    w, b = least_squares(*make_data(cfg))
    diff = _max_diff(learned, tuple(w) + (b,))
    figures.update(lstsq_diff=diff, lstsq_tol=LSTSQ_TOL, learned=list(learned))
    return _within("W_lstsq", diff, LSTSQ_TOL)


# ---------------------------------------------------------------------------------------------------------
# The rows.


def check_ranks(
    spec: str, workers: int, gpus: tuple[GPU, ...], base: FitConfig, strategy: str
) -> tuple[Verified, list]:
    """A strategy whose ranks each take their own rows (DistributedSampler's: DDP's, FSDP's), trained on
    `base` on `workers` ranks: each rank's rows per step, identical parameters on every rank, and the
    parameters against one process and least squares. (What it verified, the run's events), for the
    strategy's own checks on top."""
    rows = workers * math.ceil(base.data_size / workers)
    base = replace(base, data_size=rows, batch_size=rows)
    checked = check(replace(base, strategy=strategy, devices=spec, workers=workers), gpus=list(gpus))
    cfg = checked.config
    events, ended = _train(checked)
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


MESH_CHECK = f"{DP}=2,{TP}=2"  # 4 gloo ranks: a strategy over dp, RowwiseParallel over tp


def check_mesh(
    strategy: str, bytes_of: Callable[[int, int], dict[str, int]], words: str
) -> Verified:
    """`strategy` over dp on a dp=2 x tp=2 mesh of gloo ranks, RowwiseParallel over tp: each rank's block
    of the batch (its dp coordinate's rows, its tp coordinate's columns), each collective's bytes against
    bytes_of(rows, columns) (the strategy's ring formulas, by phase), and the parameters against one process
    on the same rows and against least squares. `words`: the row's catalog key of what it verified."""
    checked = check(replace(CHECK_CONFIG, strategy=strategy, devices="cpu", mesh=MESH_CHECK, workers=4))
    cfg = checked.config
    events, ended = _train(checked)
    _require_finished(cfg, ended)
    step = _steps(events)[0]
    rows, cuts = cfg.batch_size // 2, columns(cfg.n_features, 2)
    blocks = [(r.start, r.stop, r.columns) for r in step.replicas]
    expected = [(dp * rows, dp * rows + rows, cuts[tp]) for dp in range(2) for tp in range(2)]
    if blocks != expected:
        raise CheckFailed(f"blocks {blocks}, expected {expected}")
    sent: dict[tuple[str, str], int] = {}  # by rank and phase, summed (ZeRO-3 all-gathers twice a step)
    for phase in step.phases.phases() if step.phases else ():
        sent[phase.device, phase.name] = sent.get((phase.device, phase.name), 0) + phase.bytes
    for r, (lo, hi) in enumerate(cuts[tp] for _ in range(2) for tp in range(2)):
        want = bytes_of(rows, hi - lo)
        got = {name: sent.get((step.replicas[r].device, name)) for name in want}
        if got != want:
            raise CheckFailed(f"rank {r}'s bytes {got}, the formulas {want}")
    learned = _params(ended)
    diff = _max_diff(learned, _cpu_reference(replace(CHECK_CONFIG, devices="cpu")))
    figures = {"blocks": [list(b[:2]) + [list(b[2])] for b in blocks], "reference_diff": diff}
    parts = [t(words, mesh=MESH_CHECK, rows=rows, bytes=", ".join(f"{k} {v} B" for k, v in want.items())),
             _within("W_1proc", diff, SAME_DEVICE_TOL), _lstsq(cfg, learned, figures)]  # fmt: skip
    return Verified("; ".join(parts), figures)


def plan_rows(machine: Machine) -> list[Row]:
    """Every path, in order: a runnable Row where the machine allows it, a skipped one where not."""
    rows = [Row(t("cli.check.row.environment"), lambda: check_environment(machine))]
    for s in registry.STRATEGIES.values():
        rows += s.check_rows(machine)
    return rows


def rank_skips(machine: Machine) -> tuple[str, str]:
    """Why a strategy with ranks skips its rows here: (its gloo rows' reason, its nccl rows' reason); ""
    where the row runs. nccl rows need the backend and two GPUs."""
    no_gloo = "" if machine.gloo else t("cli.check.skip.unavailable", backend="gloo")
    no_nccl = "" if machine.nccl else t("cli.check.skip.unavailable", backend="nccl")
    two_gpus = "" if len(machine.gpus) >= 2 else t("cli.check.skip.two_gpus")
    return no_gloo, no_nccl or two_gpus


def row(name: str, run: Callable[[], Verified], skip: str = "") -> Row:
    """A Row that runs, or one that is skipped with its reason when `skip` is not empty."""
    return Row(name, None if skip else run, skip)


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

HEADERS = ("cli.check.header.path", "cli.check.header.result", "cli.check.header.time")
WIDTH = 100  # a terminal's width for what a row verified, on the lines under it


def _time(seconds: float) -> str:
    return t("cli.check.seconds", seconds=f"{seconds:.2f}") if seconds else "-"


def _wrapped(verified: str) -> list[str]:
    """What a row verified, indented, a figure never cut: its "; "-separated parts packed into lines."""
    lines = [""]
    for part in verified.split("; "):
        if lines[-1] and width(lines[-1]) + 2 + width(part) > WIDTH - 4:
            lines.append("")
        lines[-1] += ("; " if lines[-1] else "") + part
    return ["    " + line for line in lines]


def table_lines(results: list[Result]) -> list[str]:
    """An aligned text table: a line per row (path, result, time), and what it verified indented beneath,
    wrapped to a terminal's width."""
    cells = [tuple(map(t, HEADERS))] + [(r.name, r.result, _time(r.seconds)) for r in results]
    w = [max(width(c[i]) for c in cells) for i in range(3)]
    lines = []
    for i, c in enumerate(cells):
        lines.append(f"{pad(c[0], w[0])}  {pad(c[1], w[1])}  {pad(c[2], w[2], right=True)}")
        if i and results[i - 1].verified:
            lines += _wrapped(results[i - 1].verified)
    lines.insert(1, "-" * max(width(line) for line in lines))
    return lines


def summary_line(results: list[Result]) -> str:
    """The last line: the counts, and the name of every row that failed."""
    counts = {s: sum(r.status == s for r in results) for s in (PASSED, FAILED, SKIPPED)}
    text = t("cli.check.counts", passed=counts[PASSED], failed=counts[FAILED], skipped=counts[SKIPPED])
    failed = [r.name for r in results if r.status == FAILED]
    if failed:
        return t("cli.check.summary.failed", names=", ".join(failed), counts=text)
    return t("cli.check.summary.ok", counts=text)


def exit_code(results: list[Result]) -> int:
    return 1 if any(r.status == FAILED for r in results) else 0


def json_object(results: list[Result]) -> dict:
    return {
        "rows": [{**asdict(r), "result": r.result} for r in results],
        "exit_code": exit_code(results),
        "summary": summary_line(results),
    }


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m fitcore check", description=t("cli.check.description"))
    p.add_argument("--json", action="store_true", help=t("cli.check.help.json"))
    return p


@command
def main(argv: list[str], machine: Machine | None = None) -> int:
    """`python -m fitcore check [--json] [--lang zh]`; returns the exit status."""
    args = build_parser().parse_args(argv)
    machine = safe_probe() if machine is None else machine
    results = [run_row(row) for row in plan_rows(machine)]
    if args.json:
        print(dumps(json_object(results)), flush=True)
    else:
        print("\n".join(table_lines(results) + [summary_line(results)]), flush=True)
    return exit_code(results)
