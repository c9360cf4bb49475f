"""Seconds to a run's first picture: DataParallel, DDP (2 and 3 ranks) and FSDP, cold and warm, side by side.

The first picture is the run's first Step event, timed from the trainer's call. Cold is the first run of a
process that has imported fitcore (for DDP, the forkserver of fitcore.engine.warmstart starts then, and
imports torch), warm the second run of the same process (the page's every run after its first, on a server
whose page had DDP chosen a few seconds before Start). Each sample is a fresh process, so every cold run is
cold. The "spawn" rows start DDP's ranks as fitcore did before the warm start, each importing torch afresh.

    python -m benchmarks.ddp_start [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time

from benchmarks import common

# name -> the run's settings: the tutorial's 200 rows at batch 200, one step per epoch
CASES = {
    "DataParallel, virtual:2": {"strategy": "dataparallel", "devices": "virtual:2"},
    "DDP, 2 ranks": {"strategy": "ddp", "devices": "cpu", "workers": 2},
    "DDP, 3 ranks": {"strategy": "ddp", "devices": "cpu", "workers": 3},
    "FSDP, 2 ranks": {"strategy": "fsdp", "devices": "cpu", "workers": 2},
}
STARTS = {"DataParallel, virtual:2": ("threads",), "DDP, 2 ranks": ("forkserver", "spawn")}
STARTS["DDP, 3 ranks"] = STARTS["DDP, 2 ranks"]
STARTS["FSDP, 2 ranks"] = ("forkserver",)  # fully_shard's ranks fork from the same warm server
TARGET_S = 2.5  # the first picture of a 2-rank run, warm


def first_picture(case: str) -> float:
    """Seconds from the trainer's call to the run's first Step event (the run then goes on to its end)."""
    from fitcore.core.events import Step
    from fitcore.runs.runner import trainer_for

    cfg = common.config(epochs=3, **CASES[case])
    t0, first = common.clock(), []

    def on_event(event) -> None:
        if isinstance(event, Step) and not first:
            first.append(common.clock() - t0)

    ended = trainer_for(cfg)(cfg, on_event)
    if ended.status != "finished" or not first:
        raise RuntimeError(f"{case}: the run did not finish: {ended.status}: {ended.message}")
    return first[0]


def use_spawn() -> None:
    """Start DDP's ranks with spawn, as before the warm start: each rank imports torch itself."""
    from fitcore.engine import warmstart

    warmstart.context = lambda: multiprocessing.get_context("spawn")
    warmstart.server_pid = os.getpid  # a spawned rank's parent is this process


def child(case: str, start: str) -> None:
    """One sample, in this fresh process: the cold run, then the warm one; one JSON line."""
    if start == "spawn":
        use_spawn()
    cold = first_picture(case)
    warm = first_picture(case)
    print(json.dumps({"cold_s": cold, "warm_s": warm}), flush=True)


def sample(case: str, start: str, threads: int | None) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.ddp_start", "--child", case, "--start", start]
    cmd += ["--threads", str(threads)] if threads else []
    done = subprocess.run(cmd, cwd=common.ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{case} ({start}) failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=None, help="fresh processes per case (default 3, quick 1)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--start", default="forkserver", help=argparse.SUPPRESS)
    args = common.parse_args(p)
    if args.child:
        child(args.child, args.start)
        return
    repeats = args.repeats or (1 if args.quick else 3)
    load_before = os.getloadavg()
    candidates = {
        f"{case} | {start}": (lambda c=case, s=start: sample(c, s, args.threads))
        for case, starts in STARTS.items()
        for start in starts
    }
    t0 = time.monotonic()
    samples = common.interleave(candidates, repeats, warmup=0)
    rows, figures = [], {}
    for name, values in samples.items():
        cold, warm = [v["cold_s"] for v in values], [v["warm_s"] for v in values]
        figures[name] = {"cold_s": common.median(cold), "warm_s": common.median(warm)}
        rows.append([*name.split(" | "), common.median(cold), common.spread(cold), common.median(warm),
                     common.spread(warm)])  # fmt: skip
    print(common.table(["run", "ranks start by", "cold s", "cold range", "warm s", "warm range"], rows))
    warm2 = figures["DDP, 2 ranks | forkserver"]["warm_s"]
    met = common.target(warm2, below=TARGET_S)
    print(
        f"First Step event after the trainer's call; medians of {repeats} fresh processes each, "
        f"{time.monotonic() - t0:.0f} s in all; load average {load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after. DDP on 2 ranks, warm: {warm2:.2f} s "
        f"(target < {TARGET_S:g} s: {'met' if met['met'] else 'MISSED'})."
    )
    common.emit("ddp_start", {"figures": figures, "samples": samples, "warm_2_ranks": met}, args.quick)


if __name__ == "__main__":
    main()
