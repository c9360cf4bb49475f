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
from fitcore.core.config import FitConfig, validate
from fitcore.lab import compare
from fitcore.lab.traps import Traps

# (name, config changes, toggles, traps): the tutorial, the toggles that train more than the three models,
# and the traps of fitcore.lab.traps, two of them with DDP spawned on gloo
CASES = (
    ("tutorial (virtual:2)", {}, compare.Toggles(), Traps()),
    ("tutorial on virtual:3 (padding)", {"devices": "virtual:3"}, compare.Toggles(), Traps()),
    ("--loss-reduction sum", {}, compare.Toggles(loss_reduction="sum"), Traps()),
    ("--no-set-epoch", {}, compare.Toggles(set_epoch=False), Traps()),
    ("--drop-last on virtual:3", {"devices": "virtual:3"}, compare.Toggles(drop_last=True), Traps()),
    ("virtual:8", {"devices": "virtual:8"}, compare.Toggles(), Traps()),
    ("--batchnorm", {}, compare.Toggles(), Traps(batchnorm=True)),
    ("--sync-batchnorm", {}, compare.Toggles(), Traps(sync_batchnorm=True)),
    ("--accumulate 4 (DDP spawned on gloo)", {}, compare.Toggles(), Traps(accumulate=4)),
    ("--accumulate 4 --no-no-sync", {}, compare.Toggles(), Traps(accumulate=4, no_sync=False)),
)
COMMANDS = ((), ("--accumulate", "4"))  # the whole command: the tutorial, and with a real run on gloo


def command_seconds(*flags: str) -> float:
    """The whole `python -m fitcore compare` of the tutorial: interpreter, imports, the lab, the table."""
    t0 = common.clock()
    subprocess.run(
        [sys.executable, "-m", "fitcore", "compare", *flags], check=True, capture_output=True, cwd=common.ROOT
    )
    return common.clock() - t0


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    repeats = 3 if args.quick else 7
    candidates = {
        name: (lambda cfg=validate(FitConfig(**changes)), t=toggles, q=traps: compare.run(cfg, t, traps=q))
        for name, changes, toggles, traps in CASES
    }
    timed = {name: (lambda fn=fn: _seconds(fn)) for name, fn in candidates.items()}
    for flags in COMMANDS:
        timed[" ".join(("whole command, tutorial", *flags))] = lambda f=flags: command_seconds(*f)
    samples = common.interleave(timed, repeats)
    rows = [
        {"case": name, "seconds": common.median(runs), "samples_s": runs} for name, runs in samples.items()
    ]
    print(common.table(["case", "seconds (median)", "samples"], [
        [r["case"], f"{r['seconds']:.3f}", common.spread(r["samples_s"])] for r in rows
    ]))  # fmt: skip
    whole = max(r["seconds"] for r in rows if r["case"].startswith("whole"))
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
