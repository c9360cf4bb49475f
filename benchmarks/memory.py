"""Memory of a long headless run: peak resident memory of 1,000,000 steps against 1,000; the snapshot's size.

Each run is a runner.Run (background thread, bounded History) on tiny data (10 rows, batch 10, one step per
epoch), in a fresh subprocess, so each peak (VmHWM) is that run's own. Targets: the peaks differ by less than
50 MB, and the Snapshot handed to the UI stays under 1 MB (pickled, and as JSON).

    python -m benchmarks.memory [--quick] [--steps N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import subprocess
import sys

from benchmarks import common
from fitcore.runs.runner import Run

RSS_TARGET_MB = 50
SNAPSHOT_TARGET_BYTES = 1_000_000


def snapshot_sizes(snap) -> dict:
    """Bytes of the snapshot pickled (what crosses a process boundary) and as JSON (what a page is sent)."""
    as_json = json.dumps(dataclasses.asdict(snap), default=str)
    return {
        "pickle_bytes": len(pickle.dumps(snap)),
        "json_bytes": len(as_json.encode()),
        "loss_points": len(snap.loss_history),
        "param_points": len(snap.param_history),
    }


def child(steps: int) -> None:
    """Run `steps` steps headless and print one JSON line: peak memory, pace, snapshot sizes."""
    common.warm_up()
    cfg = common.config(data_size=10, batch_size=10, epochs=steps, devices="cpu")
    before = common.peak_rss_bytes()
    t0 = common.clock()
    run = Run(cfg).start()
    largest = {"pickle_bytes": 0}
    while not run.wait(5.0):  # a UI reads snapshots during the run; so do we, now and then
        sizes = snapshot_sizes(run.snapshot())
        largest = max(largest, sizes, key=lambda s: s["pickle_bytes"])
    seconds = common.clock() - t0
    snap = run.snapshot()
    final = snapshot_sizes(snap)
    result = {
        "steps": snap.step,
        "status": snap.status,
        "seconds": seconds,
        "steps_per_s": snap.step / seconds,
        "peak_rss_bytes": common.peak_rss_bytes(),
        "rss_before_run_bytes": before,
        "snapshot": max(final, largest, key=lambda s: s["pickle_bytes"]),
    }
    print(json.dumps(result))


def measure(steps: int, threads: int | None) -> dict:
    command = [sys.executable, "-m", "benchmarks.memory", "--child", str(steps)]
    if threads is not None:
        command += ["--threads", str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=common.ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="steps of the long run (default 1,000,000)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = common.parse_args(p)
    if args.child is not None:
        child(args.child)
        return
    long_steps = args.steps or (20_000 if args.quick else 1_000_000)
    short, long = measure(1_000, args.threads), measure(long_steps, args.threads)
    diff_mb = (long["peak_rss_bytes"] - short["peak_rss_bytes"]) / 1e6
    largest = max(short["snapshot"], long["snapshot"], key=lambda s: s["pickle_bytes"])
    rows = [
        [
            f"{r['steps']:,}",
            r["status"],
            f"{r['seconds']:.1f}",
            f"{r['steps_per_s']:.0f}",
            f"{r['peak_rss_bytes'] / 1e6:.1f}",
            f"{r['snapshot']['pickle_bytes']:,}",
            f"{r['snapshot']['json_bytes']:,}",
            f"{r['snapshot']['loss_points']:,}",
        ]
        for r in (short, long)
    ]
    print(
        common.table(
            [
                "steps",
                "status",
                "seconds",
                "steps/s",
                "peak RSS MB",
                "snapshot pickle B",
                "JSON B",
                "loss pts",
            ],
            rows,
        )
    )
    targets = {
        "rss_difference_mb": common.target(diff_mb, below=RSS_TARGET_MB),
        "snapshot_pickle_bytes": common.target(largest["pickle_bytes"], below=SNAPSHOT_TARGET_BYTES),
        "snapshot_json_bytes": common.target(largest["json_bytes"], below=SNAPSHOT_TARGET_BYTES),
    }
    for name, t in targets.items():
        print(f"{name}: {t['value']:,.1f} (target {t['target']}): {'met' if t['met'] else 'MISSED'}")
    common.emit("memory", {"short": short, "long": long, "targets": targets}, args.quick)


if __name__ == "__main__":
    main()
