"""The ranked strategies' speed on the command line, this checkout against another one, side by side.

    python -m benchmarks.engine_ab --before /path/to/other/checkout [--repeats 3] [--epochs 50]

Runs `python -m fitcore --strategy S --workers 2 --devices cpu --epochs E --batch-size 20 --json` for DDP,
FSDP and TP in each checkout, alternating them `--repeats` times, and this checkout a second time as an A/A
row (the machine's own noise). Prints each one's median steps per second and its runs. A change to the
engine's loop should leave "after" within the A/A spread of "before".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("ddp", "fsdp", "tp")


def steps_per_second(tree: Path, strategy: str, epochs: int) -> float:
    argv = [sys.executable, "-m", "fitcore", "--strategy", strategy, "--workers", "2", "--devices", "cpu",
            "--epochs", str(epochs), "--batch-size", "20", "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, env=env, timeout=600, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["steps"] / result["elapsed"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.engine_ab", description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the other checkout (a git worktree or clone)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=50)
    args = p.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": ROOT, "after (A/A)": ROOT}
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for strategy in STRATEGIES:
            for name, tree in trees.items():
                runs.setdefault((strategy, name), []).append(steps_per_second(tree, strategy, args.epochs))
    print(f"{'strategy':<9}{'checkout':<13}{'median steps/s':>15}  runs")
    for (strategy, name), values in runs.items():
        print(f"{strategy:<9}{name:<13}{statistics.median(values):>15.1f}  {[round(v) for v in values]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
