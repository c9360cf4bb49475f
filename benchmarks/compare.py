"""What `python -m fitcore compare` costs: the tutorial's config, in-process and as a whole command.

The lab trains three models step by step (one device, DataParallel, DDP's arithmetic), and each toggle that
is measured against a run without it trains more. The target: the tutorial's config (200 rows, batch 200,
200 epochs, Adam, virtual:2) in under 10 s on 2 CPU cores, the command's start-up included.

    python -m benchmarks.compare [--quick]
"""

from __future__ import annotations

import subprocess
import sys

from benchmarks import common
from fitcore import compare
from fitcore.config import FitConfig, validate

# (name, config changes, toggles): the tutorial, and the toggles that train more than the three models
CASES = (
    ("tutorial (virtual:2)", {}, compare.Toggles()),
    ("tutorial on virtual:3 (padding)", {"devices": "virtual:3"}, compare.Toggles()),
    ("--loss-reduction sum", {}, compare.Toggles(loss_reduction="sum")),
    ("--no-set-epoch", {}, compare.Toggles(set_epoch=False)),
    ("--drop-last on virtual:3", {"devices": "virtual:3"}, compare.Toggles(drop_last=True)),
    ("virtual:8", {"devices": "virtual:8"}, compare.Toggles()),
)


def command_seconds() -> float:
    """The whole `python -m fitcore compare` of the tutorial: interpreter, imports, the lab, the table."""
    t0 = common.clock()
    subprocess.run(
        [sys.executable, "-m", "fitcore", "compare"], check=True, capture_output=True, cwd=common.ROOT
    )
    return common.clock() - t0


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    repeats = 3 if args.quick else 7
    candidates = {
        name: (lambda cfg=validate(FitConfig(**changes)), t=toggles: compare.run(cfg, t))
        for name, changes, toggles in CASES
    }
    timed = {name: (lambda fn=fn: _seconds(fn)) for name, fn in candidates.items()}
    timed["whole command, tutorial"] = command_seconds
    samples = common.interleave(timed, repeats)
    rows = [
        {"case": name, "seconds": common.median(runs), "samples_s": runs} for name, runs in samples.items()
    ]
    print(common.table(["case", "seconds (median)", "samples"], [
        [r["case"], f"{r['seconds']:.3f}", common.spread(r["samples_s"])] for r in rows
    ]))  # fmt: skip
    whole = next(r["seconds"] for r in rows if r["case"].startswith("whole"))
    print(f"Medians of {repeats} alternating samples; the target is the whole command under 10 s.")
    common.emit(
        "compare",
        {"repeats": repeats, "rows": rows, "whole_command_s": common.target(whole, below=10.0)},
        args.quick,
    )


def _seconds(fn) -> float:
    t0 = common.clock()
    fn()
    return common.clock() - t0


if __name__ == "__main__":
    main()
