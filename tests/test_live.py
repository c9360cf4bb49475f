"""The live view's server side: the payload, the /fitcore/live and /fitcore/bye routes, the pool's reattach.

The routes are called as Starlette calls them, with a request built from an ASGI scope: no server, no
network, and no HTTP client library.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from starlette.requests import Request

from fitcore import api
from fitcore.core import i18n, identity
from fitcore.core.config import FitConfig, check
from fitcore.kit import live
from fitcore.runs.pool import PoolSettings, RunNotFound, RunPool
from fitcore.runs.runner import Run
from tests.helpers import wait_for
from tests.test_pool import FAR, Gates, small

ALICE, BOB = "a" * 32, "b" * 32


@pytest.fixture
def pool(no_leftover_threads, fake_clock):
    gates = Gates()
    settings = PoolSettings(max_active=2, idle_timeout=60, closed_grace=5)
    pool = RunPool(settings, fake_clock, FAR, gates.factory)
    pool.gates = gates
    yield pool
    pool.shutdown()


def call(handler, method: str = "GET", query: str = "", owner: str | None = ALICE, signed: bool = True):
    """(status, JSON body or None) of one request to a route handler, from a browser whose page this server
    signed (`signed`: the `fitcore_signed` cookie beside the owner id, as the page sets it)."""
    cookies = "" if owner is None else f"{api.OWNER_COOKIE}={owner}"
    if owner is not None and signed:
        cookies += f"; {api.SIGNED_COOKIE}={identity.sign(owner)}"
    headers = [(b"cookie", cookies.encode())] if cookies else []
    scope = {"type": "http", "method": method, "path": "/", "query_string": query.encode()}
    scope["headers"] = headers
    response = asyncio.run(handler(Request(scope)))
    body = json.loads(response.body) if response.body else None
    return response.status_code, body


# -- the pool: each browser's latest run, its numbers, a page's goodbye --------------------------------


def test_each_owner_numbers_its_own_runs_and_finds_its_latest(pool):
    a1 = pool.submit(ALICE, small(1)).run_id
    b1 = pool.submit(BOB, small(2)).run_id
    a2 = pool.submit(ALICE, small(3)).run_id
    assert [pool.run_number(ALICE, a1), pool.run_number(BOB, b1), pool.run_number(ALICE, a2)] == [1, 1, 2]
    assert pool.latest_run(ALICE) == a2 and pool.latest_run(BOB) == b1
    assert pool.latest_run("c" * 32) is None
    with pytest.raises(RunNotFound):
        pool.run_number(BOB, a1)  # another owner's run is not even acknowledged
    pool.forget(ALICE, a2)
    assert pool.latest_run(ALICE) is None  # its latest run is gone: a reload starts afresh


def test_a_closed_page_frees_its_run_after_the_grace(pool, fake_clock):
    run_id = pool.submit(ALICE, small(1)).run_id
    wait_for(lambda: pool.gates.started == [1])
    pool.page_closed(ALICE, run_id)
    fake_clock.advance(4.9)
    assert pool.reap() == []
    fake_clock.advance(0.2)
    assert pool.reap() == [run_id]
    run = pool.gates.runs[0]
    assert run.wait(30)
    assert str(run.snapshot().message) == "stopped: its page was closed (not read again for 5 s)"
    assert pool.counts()["kept"] == 0


def test_a_reload_reads_the_run_again_and_keeps_it(pool, fake_clock):
    run_id = pool.submit(ALICE, small(1)).run_id
    pool.page_closed(ALICE, run_id)  # the old page's goodbye
    fake_clock.advance(2)
    assert pool.snapshot(ALICE, pool.latest_run(ALICE)).run_id == run_id  # the reloaded page
    fake_clock.advance(30)
    assert pool.reap() == []  # still under the idle timeout: kept
    with pytest.raises(RunNotFound):
        pool.page_closed(BOB, run_id)


# -- the payload ---------------------------------------------------------------------------------------


def test_payload_of_a_finished_run_holds_its_series_and_its_last_step():
    cfg = FitConfig(data_size=200, batch_size=200, epochs=30, devices="virtual:3")
    run = Run(cfg).start()
    assert run.wait(60)
    snap = run.snapshot()
    body = live.payload(snap, 0, number=2)
    json.dumps(body, allow_nan=False)  # plain JSON only
    assert body["run"]["label"] == "Run 2 · DataParallel · virtual:3"
    with i18n.using("zh"):  # a Chinese page's legend and overlay; the strategy and devices stay code names
        assert live.run_title(snap, 2) == "第 2 次训练 · DataParallel · virtual:3"
    assert (body["run"]["status"], body["run"]["step"], body["run"]["total_steps"]) == ("finished", 30, 30)
    assert body["run"]["active"] is False and body["run"]["kind"] == "success"
    assert body["names"] == ["w1", "w2", "b"] and body["true"] == [5.2, 9.6, 3.4]
    assert [s for s, _ in body["loss"]] == list(range(1, 31))
    assert body["loss"][-1][1] == pytest.approx(snap.final_loss)
    assert body["params"][-1] == [30, pytest.approx(list(snap.weights) + [snap.bias])]
    pic = body["picture"]
    assert (pic["step"], pic["batch_rows"]) == (30, 200)
    assert (pic["input_shape"], pic["output_shape"]) == ([200, 2], [200, 1])
    assert [d["rows"] for d in pic["devices"]] == [len(c) for c in torch.arange(200).chunk(3)]  # 67, 67, 66
    assert [(d["start"], d["stop"]) for d in pic["devices"]] == [(0, 67), (67, 134), (134, 200)]
    assert [d["input_shape"] for d in pic["devices"]] == [[67, 2], [67, 2], [66, 2]]
    assert all(d["busy"] for d in pic["devices"]) and pic["emulated"] is True

    later = live.payload(snap, 25)
    assert [s for s, _ in later["loss"]] == [26, 27, 28, 29, 30]
    assert [s for s, _ in later["params"]] == [26, 27, 28, 29, 30]


def test_payload_marks_idle_devices():
    cfg = FitConfig(data_size=40, batch_size=5, epochs=1, devices="virtual:8")
    run = Run(cfg).start()
    assert run.wait(60)
    pic = live.payload(run.snapshot())["picture"]
    assert [d["busy"] for d in pic["devices"]] == [True] * 5 + [False] * 3  # 5 rows: 5 chunks of 1
    assert [d["rows"] for d in pic["devices"]] == [1, 1, 1, 1, 1, 0, 0, 0]
    assert [d["label"] for d in pic["devices"]] == [f"virtual:{i}" for i in range(8)]
    assert len([p for p in pic["phases"] if p["name"] == "scatter"]) == 5  # one per busy device


def test_a_diverged_run_sends_null_not_nan():
    cfg = FitConfig(data_size=5, batch_size=5, epochs=3, devices="virtual:2", lr=1e30, optimizer="sgd")
    run = Run(cfg).start()
    assert run.wait(60)
    snap = run.snapshot()
    assert snap.status == "diverged" and snap.step >= 1
    body = live.payload(snap)
    text = json.dumps(body, allow_nan=False)  # raises on NaN or infinity
    assert "NaN" not in text and "Infinity" not in text
    assert body["run"]["kind"] == "warning" and body["picture"]["step"] == snap.step
    assert [s for s, _ in body["loss"]] == [s for s, _ in snap.loss_history]


# -- the routes ----------------------------------------------------------------------------------------


def test_live_route_answers_only_the_owner(pool):
    run_id = pool.submit(ALICE, small(1)).run_id
    handler = api.live_handler(lambda: pool)
    status, body = call(handler, query=f"run={run_id}&since=0")
    assert status == 200 and body["run"]["id"] == run_id and body["run"]["label"].startswith("Run 1 ·")
    status, body = call(handler, query="since=0")  # no run: the owner's latest, as a reloaded page asks
    assert status == 200 and body["run"]["id"] == run_id
    status, body = call(handler, query=f"run={run_id}", owner=BOB)
    assert status == 404
    assert body == {"error": f"run: got '{run_id}'; allowed: one of this browser's runs"}
    assert call(handler, query="", owner=BOB)[0] == 404  # bob has no run at all


@pytest.mark.parametrize(
    "query, owner, status, field",
    [
        ("since=0", None, 403, "fitcore_owner"),
        ("since=0", "not-hex", 403, "fitcore_owner"),
        ("since=-1", ALICE, 400, "since"),
        ("since=abc", ALICE, 400, "since"),
        ("since=" + "9" * 14, ALICE, 400, "since"),
        ("run=../etc&since=0", ALICE, 400, "run"),
        ("run=run-1x", ALICE, 400, "run"),
    ],
)
def test_live_route_refuses_bad_parameters_with_4xx(pool, query, owner, status, field):
    got, body = call(api.live_handler(lambda: pool), query=query, owner=owner)
    assert got == status
    assert body["error"].startswith(f"{field}: got ")
    assert "allowed: " in body["error"]


def test_bye_route_starts_the_grace_for_the_owner_only(pool, fake_clock):
    run_id = pool.submit(ALICE, small(1)).run_id
    handler = api.run_action_handler("page_closed", lambda: pool)
    assert call(handler, "POST", f"run={run_id}", owner=BOB)[0] == 404
    assert call(handler, "POST", "", owner=ALICE)[0] == 400
    assert call(handler, "POST", f"run={run_id}", owner=ALICE) == (204, None)
    fake_clock.advance(6)
    assert pool.reap() == [run_id]


def test_routes_are_mounted_at_their_paths():
    routes = api.routes(lambda: None)
    # each route claims every method, and answers 405 to those its handler does not take (tests/test_api.py)
    assert [(r.path, r.methods, r.endpoint.methods) for r in routes] == [
        ("/fitcore/live", None, ("GET", "HEAD")),
        ("/fitcore/bye", None, ("POST",)),
        ("/fitcore/pause", None, ("POST",)),
        ("/fitcore/room", None, ("GET", "HEAD")),
        ("/fitcore/room/answer", None, ("POST",)),
        ("/fitcore/room/walk", None, ("POST",)),
        ("/fitcore/room/reveal", None, ("POST",)),
        ("/fitcore/static/{name}", None, ("GET", "HEAD")),
        ("/fitcore/static/drawers/{name}", None, ("GET", "HEAD")),
    ]


@pytest.mark.parametrize(
    "label, where",
    [("virtual:0 (emulated on CPU)", "the CPU"), ("virtual:2 (emulated on cuda:1)", "cuda:1")],
)
def test_the_picture_says_where_an_emulation_runs(label, where):
    assert live.emulated_on(label) == where
    assert live.short_label(label) == label.split(" ")[0]
    with i18n.using("zh"):  # the CPU in the page's words; a device's name is a name in either language
        assert live.emulated_on(label) == ("本机 CPU" if where == "the CPU" else where)


def test_planned_payload_before_a_run_for_each_strategy():
    dp = live.planned_payload(check(FitConfig(devices="virtual:6"), gpus=[]))
    assert dp["run"]["status"] == "ready" and dp["run"]["active"] is False
    assert dp["run"]["status_line"] == "Ready · step 0 / 200 · press Start training"
    pic = dp["picture"]
    assert pic["planned"] is True and pic["phases"] == []
    assert [d["rows"] for d in pic["devices"]] == [len(c) for c in torch.arange(200).chunk(6)]  # 34 x5, 30
    assert [d["label"] for d in pic["devices"]] == [f"virtual:{i}" for i in range(6)]
    assert pic["emulated_on"] == "the CPU"
    cfg = FitConfig(strategy="ddp", devices="cpu", workers=3, data_size=10, batch_size=10)
    ddp = live.planned_payload(check(cfg, gpus=[]))
    assert [d["rows"] for d in ddp["picture"]["devices"]] == [4, 4, 4]  # ceil(10 / 3) rows of each shard
    # FSDP: 3 ranks, shards of ceil(2/3) + ceil(1/3) = 2 numbers, 3 collectives of 2 * 8 bytes each per rank
    # TP on the step's 12 rows (4 of each shard): each of 3 ranks all-reduces a (12, 1) partial output
    tp = 3 * round(2 * 2 / 3 * 12 * 4)
    pp = 2 * 2 * 12 * 2 * 4  # 3 stages: the 12 rows' activations down 2 links and their gradients back
    fsdp = 3 * 3 * 2 * 8
    assert ddp["picture"]["bytes"] == {"dataparallel": 176, "ddp": 48, "fsdp": fsdp, "tp": tp, "pp": pp}


def test_the_picture_carries_what_each_device_holds_for_dataparallel():
    # 3 virtual devices, W of 2 and b: device 0 holds the model, its gradients and Adam's state (two moments
    # of 3 numbers and a 4-byte step count per tensor); the replicas a copy and its gradients, no state
    cfg = FitConfig(data_size=30, batch_size=30, epochs=2, devices="virtual:3")
    assert all("memory" not in d for d in live.planned_payload(check(cfg, gpus=[]))["picture"]["devices"])
    run = Run(cfg).start()
    assert run.wait(60)
    pic = live.payload(run.snapshot())["picture"]
    whole = 3 * 4
    assert pic["memory_measured"] is True
    assert [d["memory"] for d in pic["devices"]] == [
        {"parameters": whole, "gradients": whole, "optimizer_state": 2 * whole + 2 * 4}
    ] + [{"parameters": whole, "gradients": whole, "optimizer_state": 0}] * 2


def test_the_picture_carries_what_each_rank_holds_for_ddp():
    from fitcore.core.memory import whole_model
    from fitcore.protocols import registry

    cfg = FitConfig(strategy="ddp", devices="cpu", workers=2, data_size=10, batch_size=10)
    pic = live.planned_payload(check(cfg, gpus=[]))["picture"]
    assert pic["memory_measured"] is False and all("memory" not in d for d in pic["devices"])
    rows = [{"rank": r, **whole_model(cfg)} for r in range(2)]  # what the ranks report after step 1
    devices = [dict(d) for d in pic["devices"]]
    step, _ = registry.of(cfg).planned_step(cfg, check(cfg, gpus=[]).plan)
    part = registry.of(cfg).picture(cfg, step, devices, {"memory": rows})
    assert part["memory_measured"] is True
    assert [d["memory"] for d in devices] == [{"parameters": 12, "gradients": 12, "optimizer_state": 32}] * 2
