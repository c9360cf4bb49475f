"""DDP, FSDP and TP across two hosts on this machine (namespaces, torchrun on each), and a host that dies.

Each test runs `python -m benchmarks.multinode` as a user would, and then checks that none of the namespaces
it made is left, nor any process in them. Where namespaces cannot be made (no root, no iproute2), the tests
fail with that reason: they do not skip.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fitcore.engine import hosts

pytestmark = pytest.mark.slow


def multinode(*args: str, timeout: float = 240) -> tuple[int, list[str], dict, int]:
    """Run the benchmark; return its exit status, its check lines, its JSON line and its pid."""
    reason = hosts.available()
    assert not reason, f"cannot make network namespaces here: {reason}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.multinode", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=timeout)
    lines = out.splitlines()
    assert lines and lines[-1].startswith("{"), err[-3000:]
    return proc.returncode, lines[:-1], json.loads(lines[-1]), proc.pid


def left_behind(pid: int) -> list[str]:
    """The namespaces that run made which still exist (with the processes in them)."""
    return [name for name in hosts.namespaces() if name.startswith(f"{hosts.PREFIX}{pid}-")]


def test_ddp_across_two_hosts_from_the_installed_wheel(fitcore_venv):
    code, lines, result, pid = multinode(
        "--nodes", "2", "--procs-per-node", "2", "--strategy", "ddp", "--python", str(fitcore_venv)
    )
    assert code == 0, "\n".join(lines)
    assert [line.split()[:2] for line in lines] == [
        ["passed", "finished"], ["passed", "ranks"], ["passed", "rows"], ["passed", "identical"],
        ["passed", "one"], ["passed", "least"],
    ]  # fmt: skip
    figures = {c["name"]: c["figures"] for c in result["checks"]}
    assert figures["ranks"] == "4 ranks on 2 hosts: node0 2, node1 2"
    assert figures["rows"] == "rows per rank 50/50/50/50 = DistributedSampler's shards on all 40 steps"
    assert result["passed"] and result["exit_codes"] == [0, 0]
    assert left_behind(pid) == []


@pytest.mark.parametrize(
    "strategy, rows",
    [
        ("fsdp", "rows per rank 100/100 = DistributedSampler's shards on all 40 steps"),
        ("tp", "every rank every row, columns 1/1 = torch.chunk on all 40 steps"),
        ("pp", "every rank every row and column on all 300 steps"),  # a stage each host, 1F1B
    ],
)
def test_every_ranked_strategy_runs_across_two_hosts_under_torchrun(strategy, rows):
    """The engine's torchrun launcher carries FSDP, TP and a pipeline as it carries DDP: one rank on each
    host (a pipeline's stages then send their activations from one host to the other)."""
    code, lines, result, pid = multinode("--nodes", "2", "--procs-per-node", "1", "--strategy", strategy)
    assert code == 0, "\n".join(lines)
    figures = {c["name"]: c["figures"] for c in result["checks"]}
    assert all(c["passed"] for c in result["checks"]) and len(result["checks"]) == 6
    assert figures["ranks"] == "2 ranks on 2 hosts: node0 1, node1 1" and figures["rows"] == rows
    assert left_behind(pid) == []


def test_a_host_that_dies_ends_the_others_and_is_named():
    code, lines, result, pid = multinode(
        "--procs-per-node", "1", "--epochs", "3000", "--kill-after", "10", "--collective-timeout", "10"
    )
    assert code == 0, "\n".join(lines)
    checks = {c["name"]: c for c in result["checks"]}
    assert all(c["passed"] for c in checks.values()), lines
    assert result["exit_codes"][0] not in (0, None) and result["exit_codes"][1] == -9
    named = checks["named"]["figures"]
    assert named.startswith("lost host node1 (192.0.2.11), ranks 1: rank 0 failed"), named
    assert left_behind(pid) == []
