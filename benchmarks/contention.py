"""Why a run slows down while the dashboard is open: a training thread next to a busy Python thread.

Streamlit reruns the page's live panels in a thread of the same process as the training thread. While that
thread runs Python (building figures and dataframes), the training thread, which lets go of the GIL in every
torch call, waits up to the interpreter's switch interval (5 ms) to take it back, many times a step. This
script measures a runner.Run alone and next to a thread that only runs Python, at the default switch interval
and at a shorter one, in one process, alternating.

    python -m benchmarks.contention [--quick]
"""

from __future__ import annotations

import sys
import threading

from benchmarks import common
from fitcore.runs.runner import Run

INTERVALS = (0.005, 0.0005)  # seconds: Python's default, and a tenth of it


def busy(stop: threading.Event) -> None:
    """Pure Python work, as a script rerun building a chart is, until told to stop."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def rate(cfg, interval: float, contended: bool) -> float:
    """The run's own steps per second, with or without the busy thread, at `interval`."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    stop = threading.Event()
    other = threading.Thread(target=busy, args=(stop,), daemon=True) if contended else None
    try:
        if other:
            other.start()
        run = Run(cfg).start()
        run.wait()
        return run.snapshot().steps_per_second
    finally:
        stop.set()
        if other:
            other.join()
        sys.setswitchinterval(previous)


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    cfg = common.config(data_size=2000, batch_size=200, epochs=50 if args.quick else 200, devices="virtual:2")
    repeats = 3 if args.quick else 7
    common.warm_up()
    candidates = {
        f"{label} @ {interval * 1e3:g} ms": (lambda i=interval, c=contended: rate(cfg, i, c))
        for interval in INTERVALS
        for label, contended in (("alone", False), ("busy thread", True))
    }
    samples = common.interleave(candidates, repeats)
    rates = {name: common.median(values) for name, values in samples.items()}
    rows = []
    for interval in INTERVALS:
        alone, contended = (rates[f"{who} @ {interval * 1e3:g} ms"] for who in ("alone", "busy thread"))
        rows.append([f"{interval * 1e3:g} ms", alone, contended, f"{contended / alone:.2f}"])
    print(common.table(["switch interval", "alone steps/s", "next to a busy thread", "ratio"], rows))
    print(
        f"Run: {cfg.data_size} rows, batch {cfg.batch_size}, {cfg.epochs} epochs on virtual:2; "
        f"medians of {repeats}."
    )
    common.emit("contention", {"rates": rates, "samples_steps_per_s": samples}, args.quick)


if __name__ == "__main__":
    main()
