"""The two routes as a server routes them: mounted in front of a catch-all, as st.App mounts them in front of
Streamlit's own routes, and driven in-process through the ASGI interface (no socket, no HTTP client), so
that a test can send any bytes a hostile client could.

tests/test_live.py calls the handlers themselves; tests/test_fuzz.py throws arbitrary input at `call` below.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from fitcore import api
from fitcore.core import identity
from fitcore.core.config import FitConfig
from fitcore.runs.pool import PoolSettings, RunPool
from tests.helpers import wait_for

ALICE, BOB = "a" * 32, "b" * 32
PAGE = "the page"
FAR = 3600.0  # no reaping, idle timeout or grace ends during a test


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def server(pool: RunPool | None) -> Starlette:
    """fitcore's routes first, then a catch-all that answers every path and method with the page, as
    Streamlit's static files do behind st.App's user routes."""
    page = Starlette(routes=[Route("/{path:path}", lambda _: PlainTextResponse(PAGE))])
    return Starlette(routes=[*api.routes(lambda: pool), Mount("/", page)])


def call(app, method: str, path: str, query: bytes = b"", headers: list[tuple[bytes, bytes]] = ()) -> Answer:
    """One request through the ASGI interface; an exception inside the app fails the test, as a 500 would."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
        "method": method, "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query,
        "headers": list(headers), "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8501),
    }  # fmt: skip
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    headers_out = {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]}
    return Answer(start["status"], headers_out, body)


def owner_cookie(owner: str) -> list[tuple[bytes, bytes]]:
    """The cookies of a browser whose page this server signed: its owner id and the signature of it."""
    return [(b"cookie", f"{api.OWNER_COOKIE}={owner}; {api.SIGNED_COOKIE}={identity.sign(owner)}".encode())]


def finished_pool() -> tuple[RunPool, str]:
    """A real pool holding one real run of ALICE's, trained to its end (6 steps on 2 emulated devices)."""
    settings = PoolSettings(max_active=1, idle_timeout=FAR, closed_grace=FAR)
    pool = RunPool(settings, reap_interval=FAR)
    cfg = FitConfig(data_size=20, batch_size=10, epochs=3, devices="virtual:2", seed=1)
    run_id = pool.submit(ALICE, cfg).run_id
    wait_for(lambda: pool.snapshot(ALICE, run_id).status == "finished", what="the run to finish")
    return pool, run_id


@pytest.fixture(scope="module")
def real():
    pool, run_id = finished_pool()
    yield server(pool), run_id
    pool.shutdown()


def test_the_live_route_answers_the_owner_with_the_runs_steps(real):
    app, run_id = real
    got = call(app, "GET", api.LIVE_PATH, f"run={run_id}&since=0".encode(), owner_cookie(ALICE))
    assert got.status == 200 and got.headers["cache-control"] == "no-store"
    body = got.json()
    assert body["run"]["id"] == run_id and body["run"]["label"].startswith("Run 1 ·")
    assert [s for s, _ in body["loss"]] == [1, 2, 3, 4, 5, 6]  # 3 epochs of 2 batches
    # after step 4 only the steps not yet seen come
    later = call(app, "GET", api.LIVE_PATH, f"run={run_id}&since=4".encode(), owner_cookie(ALICE)).json()
    assert (later["run"]["id"], [s for s, _ in later["loss"]]) == (run_id, [5, 6])


# Unicode digits: str.isdigit() took them, and int() refused some (a 500 with a traceback) and silently
# read the others; each is now a 400 naming `since`
@pytest.mark.parametrize("since", ["²", "①", "٣", "１", "١٢", "𝟙", "1_0", " 1", "+1", "-0", "0x1", "1e3", ""])
@pytest.mark.parametrize("method, path", [("GET", api.LIVE_PATH), ("POST", api.BYE_PATH)])
def test_since_takes_ascii_digits_only(real, method, path, since):
    app, run_id = real
    got = call(app, method, path, urlencode({"run": run_id, "since": since}).encode(), owner_cookie(ALICE))
    assert got.status == 400
    assert got.json() == {"error": f"since: got {since!r}; allowed: a step number from 0 to {api.MAX_SINCE}"}


def test_since_is_read_up_to_its_bound(real):
    app, run_id = real
    top = api.MAX_SINCE
    for since, status in [("0", 200), ("0000", 200), (str(top), 200), (str(top + 1), 400), ("9" * 14, 400)]:
        query = f"run={run_id}&since={since}".encode()
        assert call(app, "GET", api.LIVE_PATH, query, owner_cookie(ALICE)).status == status, since


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("GET", api.BYE_PATH, "POST"),  # was 200 with the page, from the catch-all behind the route
        ("HEAD", api.BYE_PATH, "POST"),
        ("PUT", api.BYE_PATH, "POST"),
        ("POST", api.LIVE_PATH, "GET, HEAD"),
        ("DELETE", api.LIVE_PATH, "GET, HEAD"),
        ("OPTIONS", api.LIVE_PATH, "GET, HEAD"),
        ("BREW", api.LIVE_PATH, "GET, HEAD"),
        ("GET", api.ANSWER_PATH, "POST"),  # a class's room: an answer is a POST, the room a GET
        ("POST", api.ROOM_PATH, "GET, HEAD"),
    ],
)
def test_other_methods_answer_405_with_allow(real, method, path, allow):
    app, run_id = real
    got = call(app, method, path, f"run={run_id}".encode(), owner_cookie(ALICE))
    assert (got.status, got.headers["allow"]) == (405, allow)
    assert got.json() == {"error": f"method: got {method!r}; allowed: {allow.replace(', ', ' or ')}"}
    assert PAGE.encode() not in got.body


def test_the_catch_all_still_answers_every_other_path(real):
    app, _ = real
    assert call(app, "GET", "/fitcore/other").body == PAGE.encode()
    assert call(app, "GET", "/").body == PAGE.encode()


def test_bye_frees_only_the_owners_run(real):
    app, run_id = real
    query = f"run={run_id}".encode()
    assert call(app, "POST", api.BYE_PATH, query, owner_cookie(BOB)).status == 404
    assert call(app, "POST", api.BYE_PATH, b"", owner_cookie(ALICE)).status == 400
    got = call(app, "POST", api.BYE_PATH, query, owner_cookie(ALICE))
    assert (got.status, got.body) == (204, b"")
    # a page that reads the run again keeps it (a reload): the live route still answers
    assert call(app, "GET", api.LIVE_PATH, query, owner_cookie(ALICE)).status == 200


def test_pause_pauses_only_the_owners_running_run():
    settings = PoolSettings(max_active=1, idle_timeout=FAR, closed_grace=FAR)
    pool = RunPool(settings, reap_interval=FAR)
    try:
        run_id = pool.submit(ALICE, FitConfig(devices="virtual:2", epochs=2000), pace=50.0).run_id
        app = server(pool)
        query = f"run={run_id}".encode()
        assert call(app, "POST", api.PAUSE_PATH, query, owner_cookie(BOB)).status == 404
        assert pool.snapshot(ALICE, run_id).status == "running"  # Bob's press changed nothing
        assert call(app, "POST", api.PAUSE_PATH, b"", owner_cookie(ALICE)).status == 400
        got = call(app, "POST", api.PAUSE_PATH, query, owner_cookie(ALICE))
        assert (got.status, got.body) == (204, b"")
        # paused once a step under way has ended (at 50 steps/s, at once or within that step): then it holds
        held = wait_for(lambda: (s := pool.snapshot(ALICE, run_id)).status == "paused" and s, what="the hold")
        time.sleep(0.1)
        assert pool.snapshot(ALICE, run_id).step == held.step
        assert call(app, "GET", api.PAUSE_PATH, query, owner_cookie(ALICE)).status == 405
    finally:
        pool.shutdown()


def test_a_poll_of_a_run_its_owner_reset_is_answered_204_and_anyone_elses_404():
    """Reset on a replay: the poll already on its way asks for the run just forgotten. Its owner is told it
    was reset (204, no console error, no "the server dropped it"); another browser learns nothing (404)."""
    pool, run_id = finished_pool()
    try:
        app = server(pool)
        query = f"run={run_id}&since=0".encode()
        pool.forget(ALICE, run_id)
        got = call(app, "GET", api.LIVE_PATH, query, owner_cookie(ALICE))
        assert (got.status, got.body) == (204, b"")
        assert call(app, "GET", api.LIVE_PATH, query, owner_cookie(BOB)).status == 404
        assert call(app, "GET", api.LIVE_PATH, b"run=run-99&since=0", owner_cookie(ALICE)).status == 404
    finally:
        pool.shutdown()
