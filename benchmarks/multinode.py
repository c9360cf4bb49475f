"""DDP across hosts on one machine: network namespaces as hosts, torchrun on each, and the checks.

    python -m benchmarks.multinode --nodes 2 --procs-per-node 2 --strategy ddp [--rate 100mbit]

Makes `--nodes` hosts (registry.ddp.hosts: 192.0.2.10, .11, ... on a bridge, each with its own hostname),
runs `torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint 192.0.2.10:29500 -m fitcore
--strategy S ...` on each, and prints one line per check (the world size and the hosts; every rank's rows per
step as DistributedSampler cuts them; identical parameters on every rank; against one process; against
least squares) and one JSON line. `--python` runs an installed fitcore (a venv's python) on every host.
`--kill-after K` kills the last host's processes once rank 0 has recorded K steps, and checks that the
others end within the collective timeout, naming the lost host. Exit status 0 when every check passed,
1 when one failed, 2 when hosts cannot be made here (the reason on one line). Every namespace and process
made is removed at the end, also on failure and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import replace

from fitcore.core.cliparse import Parser
from fitcore.core.config import validate
from fitcore.core.errors import ConfigError
from fitcore.core.schema import shown
from fitcore.engine import across
from fitcore.engine.hosts import HostsError, available
from fitcore.kit.flags import flag_error
from fitcore.protocols import registry

MAX_SECONDS = 3600.0  # --timeout and --collective-timeout: an hour at most


def parse(argv: list[str]) -> argparse.Namespace:
    p = Parser(prog="python -m benchmarks.multinode", description=__doc__.split("\n")[0])  # one-line errors
    p.add_argument("--nodes", type=int, default=2, help="hosts (namespaces), 2 to 8")
    p.add_argument("--procs-per-node", type=int, default=2, help="ranks per host, 1 to 4")
    p.add_argument("--strategy", default="ddp", help="passed to fitcore as it is: one with processes")
    p.add_argument("--mesh", default="", help="the ranks' mesh, dp=2,tp=2 (its product: nodes x procs)")
    p.add_argument("--rate", default="", help="tbf rate on every host's link (100mbit); none by default")
    p.add_argument("--epochs", type=int, default=None, help="the strategy's check config's by default")
    p.add_argument("--python", default=None, help="the interpreter on every host (an installed fitcore)")
    p.add_argument("--kill-after", type=int, default=0, help="kill the last host after K recorded steps")
    p.add_argument("--collective-timeout", type=float, default=10.0, help="seconds, with --kill-after")
    p.add_argument("--timeout", type=float, default=across.RUN_TIMEOUT, help="seconds for the whole run")
    args = p.parse_args(argv)
    if not 2 <= args.nodes <= 8 or not 1 <= args.procs_per_node <= 4:
        p.error(f"--nodes 2 to 8 and --procs-per-node 1 to 4; got {args.nodes} and {args.procs_per_node}")
    across_hosts = [s.name for s in registry.STRATEGIES.values() if s.processes and s.torchrun]
    if args.strategy not in across_hosts:  # one process (DataParallel) has no ranks to put on hosts
        p.error(f"--strategy: got {shown(args.strategy)}; allowed: {', '.join(across_hosts)}")
    try:
        cfg = across.config(args.nodes * args.procs_per_node, args.strategy)
        cfg = replace(cfg, epochs=args.epochs or cfg.epochs, mesh=args.mesh)
        validate(cfg)
    except ConfigError as exc:
        p.error(flag_error(exc))
    if not 0 <= args.kill_after < cfg.total_steps:
        last = cfg.total_steps - 1
        p.error(f"--kill-after: got {args.kill_after}; allowed: 0 (none) to {last} recorded steps")
    for flag, value in (("--timeout", args.timeout), ("--collective-timeout", args.collective_timeout)):
        if not 0 < value <= MAX_SECONDS:
            p.error(f"--{flag[2:]}: got {value:g}; allowed: seconds, more than 0 and at most {MAX_SECONDS:g}")
    args.config = cfg
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    reason = available()
    if reason:
        print(f"multinode: cannot make hosts here: {reason}", file=sys.stderr)
        return 2
    # SIGTERM ends the run as Ctrl-C does, through the finally blocks that remove the hosts
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    cfg = args.config
    try:
        outcome = across.run(
            cfg, args.nodes, args.procs_per_node, args.rate, args.python, args.timeout,
            kill_after_steps=args.kill_after,
            collective_timeout=args.collective_timeout if args.kill_after else 0,
        )  # fmt: skip
    except HostsError as exc:
        print(f"multinode: cannot make hosts here: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("multinode: interrupted; every host removed", file=sys.stderr)
        return 130
    if args.kill_after:
        results = across.lost_checks(outcome, args.collective_timeout)
    else:
        results = across.checks(cfg, outcome, args.nodes, args.procs_per_node, across.reference(cfg))
    for name, ok, text in results:
        print(f"{'passed' if ok else 'FAILED'}  {name:<14} {text}")
    passed = all(ok for _, ok, _ in results)
    if not passed:
        for i, err in enumerate(outcome.errors):
            tail = [line for line in err.splitlines() if line.strip()][-6:]
            print(f"host {i} stderr (last lines):\n  " + "\n  ".join(tail), file=sys.stderr)
    print(json.dumps({
        "nodes": args.nodes, "procs_per_node": args.procs_per_node, "strategy": args.strategy,
        "mesh": args.mesh,
        "rate": args.rate, "seconds": round(outcome.seconds, 2), "exit_codes": outcome.codes,
        "lost": outcome.lost, "passed": passed,
        "checks": [{"name": n, "passed": ok, "figures": text} for n, ok, text in results],
    }))  # fmt: skip
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
