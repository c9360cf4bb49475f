"""Where the overhead benchmark's ratio comes from: the time of each step, fitcore's loop against a bare loop.

A whole run's steps per second mixes every step with the machine's noise. The spread of single steps
separates them: the fastest steps (min, 10th percentile) are the step's own cost with nothing else in the
way, so their difference is what fitcore's recording and events add; the median and the mean add the
epoch's batch gathering and whatever else the machine was doing.

fitcore's steps are timed by the consumer, from one Step event to the next (each interval holds one whole
step of DataParallel's real train loop and its event); the bare loop of benchmarks.overhead takes the same
clock reading after every step. Both run in alternating rounds; the first round is thrown away.

    python -m benchmarks.step_times [--quick]
"""

from __future__ import annotations

import gc

import torch

from benchmarks import common
from benchmarks.overhead import bare_loop
from fitcore.core.data import make_data
from fitcore.core.events import Step
from fitcore.strategies.dataparallel.train import train

FIGURES = ("min", "p10", "p50", "mean")  # µs a step


def bare_steps(cfg, X: torch.Tensor, y: torch.Tensor) -> list[float]:
    """benchmarks.overhead.bare_loop, with a clock reading after every step; the seconds of each step."""
    marks = []
    bare_loop(cfg, X, y, marks)
    return [b - a for a, b in zip(marks, marks[1:])]  # from the end of the first step, as fitcore's


def fitcore_steps(cfg) -> list[float]:
    """DataParallel's train, timed from one Step event to the next; the seconds of each step but the first."""
    marks = []
    train(cfg, lambda event: marks.append(common.clock()) if type(event) is Step else None)
    return [b - a for a, b in zip(marks, marks[1:])]


def summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    n = len(ordered)
    return {
        "steps": n,
        "min": ordered[0] * 1e6,
        "p10": ordered[n // 10] * 1e6,
        "p50": ordered[n // 2] * 1e6,
        "mean": sum(ordered) / n * 1e6,
    }


def measure(batch: int, repeats: int, epochs: int) -> dict:
    cfg = common.config(data_size=10 * batch, batch_size=batch, epochs=epochs, devices="cpu")
    X, y = make_data(cfg, torch.device("cpu"))
    times = {"bare": [], "fitcore": []}
    for r in range(repeats + 1):
        for who in ("bare", "fitcore") if r % 2 else ("fitcore", "bare"):
            gc.collect()
            seconds = bare_steps(cfg, X, y) if who == "bare" else fitcore_steps(cfg)
            if r:  # the first round pays for lazy initialisation
                times[who].extend(seconds)
    bare, fit = summary(times["bare"]), summary(times["fitcore"])
    added = {k: fit[k] - bare[k] for k in FIGURES}
    return {"batch": batch, "bare": bare, "fitcore": fit, "added": added}


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    repeats = 3 if args.quick else 15
    rows = [measure(batch, repeats, epochs) for batch, epochs in ((200, 100), (10_000, 30))]
    print(
        common.table(
            ["batch", "loop", "steps", "min µs", "p10 µs", "median µs", "mean µs"],
            [
                [r["batch"], who, r[who].get("steps", "")] + [f"{r[who][k]:.1f}" for k in FIGURES]
                for r in rows
                for who in ("bare", "fitcore", "added")
            ],
        )
    )
    print(
        f"{repeats} alternating rounds, CPU. 'added' is fitcore minus bare; its min and p10 are what the "
        "recording and the events cost a step, the median and mean also hold the machine's noise."
    )
    common.emit("step_times", {"repeats": repeats, "rows": rows}, args.quick)


if __name__ == "__main__":
    main()
