"""A run across two hosts, replayed: the picture's payload names each rank's host
(fitcore.kit.live.with_hosts).

examples/ddp-2hosts.fitrec was recorded by `python -m benchmarks.multinode` (2 namespace hosts, 2 ranks each,
torchrun's c10d rendezvous, rank 0 recording); the timeline and the ring draw from these fields
(frontend/tests/hosts.test.js)."""

from __future__ import annotations

from pathlib import Path

from fitcore.core.events import Status
from fitcore.kit import live
from fitcore.runs.recording import read, replayer
from fitcore.runs.runner import Run

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp-2hosts.fitrec"


def test_the_replayed_picture_groups_the_ranks_by_host():
    rec = read(str(EXAMPLE))
    run = Run(rec.config, trainer=replayer(rec))
    run.start()
    assert run.wait(20)
    snap = run.snapshot()
    assert snap.status == Status.FINISHED and snap.step == 40
    pic = live.payload(snap)["picture"]
    assert pic["hosts"] == ["node0", "node1"]
    assert [(d["label"], d["host"]) for d in pic["devices"]] == [
        ("rank 0 · cpu · gloo", "node0"), ("rank 1 · cpu · gloo", "node0"),
        ("rank 2 · cpu · gloo", "node1"), ("rank 3 · cpu · gloo", "node1"),
    ]  # fmt: skip
    assert [d["rows"] for d in pic["devices"]] == [50, 50, 50, 50]


def test_one_host_or_no_hosts_leaves_the_picture_as_it_was():
    pic = {"devices": [{"label": "a"}, {"label": "b"}]}
    assert live.with_hosts(pic, ["h", "h"]) == {**pic, "hosts": None}
    assert live.with_hosts(pic, None)["hosts"] is None
    assert live.with_hosts(pic, ["h"])["hosts"] is None  # not one host per rank: not drawn
    assert "host" not in pic["devices"][0]
