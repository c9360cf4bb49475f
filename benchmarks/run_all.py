"""Run every benchmark, one subprocess each, and collect their JSON lines into benchmarks/results.json.

    python -m benchmarks.run_all [--quick] [--threads N] [--only data_path,overhead,...]

Each benchmark's table streams through as it runs. A benchmark that fails is recorded with its exit status
and the end of its output, and the others still run; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common

BENCHMARKS = (
    "data_path",
    "overhead",
    "step_times",
    "emulation",
    "memory",
    "scaling",
    "dashboard",
    "contention",
    "page_cost",
    "compare",
    "ddp_start",
)
HERE = Path(__file__).resolve().parent


def run(name: str, extra: list[str]) -> dict:
    """Run one benchmark, echo its output, and return its JSON line (or what went wrong)."""
    print(f"\n## {name}\n", flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", f"benchmarks.{name}", *extra],
        stdout=subprocess.PIPE,
        text=True,
        cwd=common.ROOT,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if not line.startswith("{"):
            print(line, end="", flush=True)
    status = proc.wait()
    seconds = time.monotonic() - t0
    try:
        result = json.loads(lines[-1]) if status == 0 and lines else None
    except json.JSONDecodeError:
        result = None
    if result is None:
        return {
            "benchmark": name,
            "error": f"exit status {status}",
            "output_tail": lines[-20:],
            "seconds": seconds,
        }
    result["seconds"] = seconds
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    p.add_argument("--threads", type=int, default=None, help="pass --threads N to every benchmark")
    p.add_argument("--only", default=None, help="a comma-separated subset of " + ", ".join(BENCHMARKS))
    p.add_argument("--out", default=str(HERE / "results.json"), help="where to write the results")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        p.error(f"unknown benchmark {', '.join(unknown)}; allowed: {', '.join(BENCHMARKS)}")
    extra = (["--quick"] if args.quick else []) + (["--threads", str(args.threads)] if args.threads else [])
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results = {}
    if args.only and Path(args.out).exists():  # a partial run updates the file's other entries in place
        results = json.loads(Path(args.out).read_text()).get("results", {})
    results.update({name: run(name, extra) for name in names})
    out = {"started": started, "machine": common.machine(), "options": extra, "results": results}
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    failed = [name for name in names if "error" in results[name]]
    print(f"\nwrote {args.out}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
