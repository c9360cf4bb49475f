"""The page's live view without a browser: what the fitcore_live component asks the server, and when.

In the browser the live view (status line, step picture, loss and parameter charts) polls the server's
`GET /fitcore/live?run=<id>&since=<step>` every 0.4 s while the run is active, and every second while it is
queued; when the run's status changes it asks the page's script for one rerun, and when the page closes
while its run is active it says `POST /fitcore/bye?run=<id>` (frontend/mount.js). Every request carries the
browser's `fitcore_owner` cookie. `LiveView` does the same over one keep-alive HTTP/1.1 connection (asyncio
streams, as a browser keeps one for a page's requests), beside a benchmarks.session_client.Session with the
same owner, and records what a load test asks about: the answers, the longest wait between two of them while
the run was active, every status and queue position shown, and the latest parameters.

    live = LiveView(session, Http(url, owner))
    await session.click("Start training")
    live.start()
    while not live.settled:   # the run has ended, and the rerun its status change asked for has finished
        await asyncio.sleep(0.1)
    await live.close(goodbye=True)
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from dataclasses import dataclass, field

from benchmarks.session_client import Session, owner_headers

LIVE_PATH, BYE_PATH = "/fitcore/live", "/fitcore/bye"
POLL_S, QUIET_POLL_S = 0.4, 1.0  # app.py's POLL_MS and QUEUED_POLL_MS
QUIET_STATUSES = ("queued",)  # a run that changes only its place in the queue: the slower rate
QUEUE_POSITION = re.compile(r"position (\d+) in the queue")
MAX_ERRORS = 5  # messages kept of a view's failed requests (all are counted)
REQUEST_TIMEOUT_S = 10.0  # a browser's fetch has none; an answer this late is recorded as an error


class HttpError(RuntimeError):
    """The server's answer could not be read (closed early, malformed, or too late)."""


class Http:
    """One keep-alive HTTP/1.1 connection to the server with a browser's owner cookie; one request at a time.

    A connection the server has closed between two requests is opened again once, as a browser does.
    """

    def __init__(self, url: str, owner: str | None, timeout: float = REQUEST_TIMEOUT_S):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.owner = owner
        self.timeout = timeout
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    async def request(self, method: str, target: str) -> tuple[int, bytes]:
        """(status, body) of one request; HttpError if no answer could be read within the timeout."""
        async with self._lock:
            for attempt in range(2):
                fresh = self._streams is None
                try:
                    return await asyncio.wait_for(self._exchange(method, target), self.timeout)
                except asyncio.CancelledError:
                    self._abandon()  # an answer may be half read: the connection cannot be reused
                    raise
                except (OSError, asyncio.IncompleteReadError, HttpError, TimeoutError) as exc:
                    await self._drop()
                    if fresh or attempt or isinstance(exc, TimeoutError):
                        raise HttpError(f"{method} {target}: {exc!r}") from exc
            raise AssertionError("unreachable")

    async def get_json(self, target: str) -> tuple[int, dict | None]:
        status, body = await self.request("GET", target)
        return status, json.loads(body) if status == 200 else None

    async def _exchange(self, method: str, target: str) -> tuple[int, bytes]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._streams
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}:{self.port}", "Content-Length: 0"]
        lines += [f"{k}: {v}" for k, v in owner_headers(self.owner).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise HttpError("the server closed the connection")
        status = int(status_line.split()[1])
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await self._body(reader, headers, status)
        if headers.get("connection", "").lower() == "close":
            await self._drop()
        return status, body

    @staticmethod
    async def _body(reader: asyncio.StreamReader, headers: dict, status: int) -> bytes:
        if status in (204, 304) or 100 <= status < 200:
            return b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)  # the CRLF after each chunk
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        if "content-length" in headers:
            return await reader.readexactly(int(headers["content-length"]))
        raise HttpError(f"an answer without a length (status {status}) on a kept-alive connection")

    def _abandon(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()

    async def _drop(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()
            try:
                await streams[1].wait_closed()
            except OSError:
                pass

    async def close(self) -> None:
        async with self._lock:
            await self._drop()


@dataclass
class LiveState:
    """What the live view has shown so far (changed on the event loop only)."""

    run_id: str | None = None
    updates: int = 0  # answers with a payload (status 200)
    run_status: str = ""  # the payload's: "queued", "running", "finished", ...
    status: str = ""  # as the status line starts: "Queued", "Running", "Finished", ...
    statuses: list[str] = field(default_factory=list)  # every status shown, in order of first sight
    active: bool = False
    step: int = 0
    total: int = 0
    text: str = ""  # the latest status line
    max_queue: int = 0  # the largest queue position shown
    # the longest time between two answers while the run was active: how stale the page's picture got
    max_gap_s: float = 0.0
    last_answer_at: float = 0.0  # time.monotonic() of the latest answer
    active_since: float = 0.0  # time.monotonic() of the first answer
    ended_at: float = 0.0  # time.monotonic() of the first answer showing the run ended
    learned: tuple[float, ...] = ()  # the latest parameters point: (w1, ..., wd, b)
    learned_step: int = 0
    since: int = 0  # the latest step of the loss points received
    status_reruns: int = 0  # reruns asked for because the status changed
    reruns_done: int = 0  # of them, those whose script run has finished
    gone: bool = False  # the server answered 404: the run is not (or no longer) this owner's
    failed: int = 0  # requests and reruns that failed
    errors: list[str] = field(default_factory=list)  # the first MAX_ERRORS of their messages

    def error(self, text: str) -> None:
        self.failed += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(text)


class LiveView:
    """The fitcore_live component of one page: polls while the run is active, reruns the page on news.

    Args:
        session: the page's Streamlit session (the same owner's); None for a view with no page behind it.
        http: the page's connection, with the browser's owner cookie.
        run_id: the run the page shows; None: the owner's latest run (what a reloaded page finds).
        poll_s: seconds between an answer and the next request while the run trains (the page's POLL_S).
    """

    def __init__(
        self, session: Session | None, http: Http, run_id: str | None = None, poll_s: float = POLL_S
    ):
        self.session = session
        self.http = http
        self.poll_s = poll_s
        self.state = LiveState(run_id=run_id)
        self._task: asyncio.Task | None = None
        self._reruns: list[asyncio.Task] = []

    def start(self) -> None:
        """Start polling (again, after stop(): from the latest step it has)."""
        if self._task is None or self._task.done():
            self.state.last_answer_at = 0.0  # the time it was stopped is no gap of the server's
            self._task = asyncio.create_task(self._poll(), name="live-view")

    async def _poll(self) -> None:
        st = self.state
        while True:
            try:
                status, payload = await self.http.get_json(self._target())
            except (HttpError, ValueError) as exc:  # a failed fetch: the browser asks again next time
                st.error(str(exc))
                await asyncio.sleep(self.poll_s)
                continue
            if status != 200:
                st.gone = status == 404
                st.error(f"GET {self._target()}: status {status}")
                if st.gone:
                    self._rerun()  # the page says what happened to its run
                    return
                await asyncio.sleep(self.poll_s)
                continue
            self._record(payload)
            if not st.active:
                return  # the run has ended: nothing will change
            await asyncio.sleep(QUIET_POLL_S if payload["run"]["status"] in QUIET_STATUSES else self.poll_s)

    def _target(self) -> str:
        query = {"since": str(self.state.since)}
        if self.state.run_id is not None:
            query["run"] = self.state.run_id
        return LIVE_PATH + "?" + urllib.parse.urlencode(query)

    def _record(self, payload: dict) -> None:
        st, run, now = self.state, payload["run"], time.monotonic()
        if st.last_answer_at and st.active:
            st.max_gap_s = max(st.max_gap_s, now - st.last_answer_at)
        if not st.updates:
            st.active_since = now
        changed = st.updates > 0 and run["status"] != st.run_status
        st.updates += 1
        st.last_answer_at = now
        st.run_id = run["id"]
        status = run["status_line"].split("\u00b7")[0].strip()
        if status not in st.statuses:
            st.statuses.append(status)
        queue = QUEUE_POSITION.search(run["status_line"])
        if queue:
            st.max_queue = max(st.max_queue, int(queue.group(1)))
        st.run_status, st.status, st.active = run["status"], status, run["active"]
        st.text, st.step, st.total = run["status_line"], run["step"], run["total_steps"]
        if payload["loss"]:
            st.since = max(st.since, payload["loss"][-1][0])
        if payload["params"]:
            st.learned_step, values = payload["params"][-1]
            st.learned = tuple(values)
        if not st.active and not st.ended_at:
            st.ended_at = now
        if changed:
            self._rerun()

    def _rerun(self) -> None:
        """One full rerun of the page with its widget states, as the component's status trigger asks."""
        if self.session is None or self.session.closed:
            return
        self.state.status_reruns += 1
        self._reruns.append(asyncio.create_task(self._rerun_page(), name="live-rerun"))

    async def _rerun_page(self) -> None:
        try:
            await self.session.rerun_full([])
        except Exception as exc:  # recorded with the figures: the page missed a status change
            self.state.error(f"rerun after a status change: {exc!r}")
            return
        self.state.reruns_done += 1

    def longest_gap_s(self) -> float:
        """LiveState.max_gap_s, counting the wait still open now if the run was active at the last answer."""
        st = self.state
        if st.last_answer_at and st.active and self._task is not None and not self._task.done():
            return max(st.max_gap_s, time.monotonic() - st.last_answer_at)
        return st.max_gap_s

    @property
    def settled(self) -> bool:
        """The run has ended (or gone), polling stopped, and every rerun asked for has finished."""
        done = self._task is not None and self._task.done()
        return done and all(t.done() for t in self._reruns) and (not self.state.active or self.state.gone)

    async def stop(self) -> None:
        """Stop polling and forget pending reruns, as a page being closed does."""
        tasks = [t for t in [self._task, *self._reruns] if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def goodbye(self) -> int:
        """POST /fitcore/bye for the page's run, as the page does when it closes; the answer's status."""
        if self.state.run_id is None:
            return 0
        target = BYE_PATH + "?" + urllib.parse.urlencode({"run": self.state.run_id})
        try:
            status, _ = await self.http.request("POST", target)
        except HttpError as exc:
            self.state.error(str(exc))
            return 0
        return status

    async def close(self, goodbye: bool = False) -> int | None:
        """Stop; say goodbye first if asked and the run is active, as the page does; close the connection.

        The goodbye's answer status, or None where none was sent.
        """
        await self.stop()
        status = await self.goodbye() if goodbye and self.state.active else None
        await self.http.close()
        return status
