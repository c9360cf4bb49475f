"""What every benchmark shares: the machine, the devices to measure, interleaved repeats, the output.

Each benchmark prints a table, then one line of JSON (its last line), which `run_all.py` collects. Run them
from the repository root as modules: `python -m benchmarks.data_path`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from fitcore.core.config import FitConfig, validate
from fitcore.core.events import RunEnded, RunStarted
from fitcore.core.train import warm_up
from fitcore.strategies.dataparallel.train import train

ROOT = Path(__file__).resolve().parents[1]  # the repository: `python -m benchmarks.x` runs from here
clock = time.perf_counter


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats: a smoke run")
    p.add_argument(
        "--threads", type=int, default=None, help="torch's intra-op threads (default: torch's own choice)"
    )
    return p


def parse_args(p: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse, and apply --threads before anything is measured."""
    args = p.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return args


# -- the machine ------------------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine() -> dict:
    """What the figures were taken on, and how busy the machine was when they were."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": _memory_gib(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available()
        else [],
        "load_average": [round(x, 2) for x in load] if load else None,
    }


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def single_devices() -> list[str]:
    """One device of each kind this machine has: the CPU, and the first CUDA GPU where there is one."""
    return ["cpu"] + (["cuda:0"] if gpu_count() else [])


def sync(device: str) -> None:
    """Wait for queued GPU work, so that a timer read afterwards includes it."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# -- runs and repeats -------------------------------------------------------------------------------------
def config(**fields) -> FitConfig:
    return validate(FitConfig(**fields))


def time_fitcore(cfg: FitConfig, on_event: Callable = lambda event: None) -> dict:
    """One call of DataParallel's train: its whole time, the set-up (data, reference, model) and the loop.

    The loop runs from RunStarted to RunEnded, so it holds every step and its event, and nothing else.
    """
    marks = {}

    def consumer(event):
        if isinstance(event, (RunStarted, RunEnded)):
            marks[type(event)] = clock()
        on_event(event)

    warm_up()
    t0 = clock()
    ended = train(cfg, consumer)
    total = clock() - t0
    if ended.status != "finished":
        raise RuntimeError(f"the benchmark run did not finish: {ended.status}: {ended.message}")
    loop = marks[RunEnded] - marks[RunStarted]
    return {"total_s": total, "setup_s": marks[RunStarted] - t0, "loop_s": loop, "steps": ended.steps}


def interleave(candidates: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, list]:
    """Call every candidate once per round, in an order that alternates, and keep every sample.

    On a shared machine the load drifts: alternating A B, B A, ... puts each candidate in every position,
    so drift moves all samples alike and the medians stay comparable. The first `warmup` rounds are
    thrown away (first calls pay for lazy initialisation and for growing the allocator's pools).
    """
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    samples: dict[str, list] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            gc.collect()
            samples[name].append(candidates[name]())
    return samples


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """min..max of the samples, for the table."""
    return f"{min(values):.4g}..{max(values):.4g}"


def target(value: float, at_least: float | None = None, below: float | None = None) -> dict:
    """A figure against its target: {"value", "target", "met"}."""
    if at_least is not None:
        return {"value": value, "target": f">= {at_least:g}", "met": value >= at_least}
    return {"value": value, "target": f"< {below:g}", "met": value < below}


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM where /proc has it, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


# -- output -----------------------------------------------------------------------------------------------
def table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table, columns padded so that it also reads in a terminal."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def emit(name: str, result: dict, quick: bool) -> None:
    """Print the JSON line that closes every benchmark's output."""
    result = {"benchmark": name, "quick": quick, "machine": machine(), **result}
    sys.stdout.flush()
    print(json.dumps(result, default=str), flush=True)
