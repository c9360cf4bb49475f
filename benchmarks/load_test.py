"""Many students on one server: sessions press Start training on `streamlit run app.py`.

Each session is a client of its own: with `--client websocket` (the default) a client of Streamlit's own
websocket protocol (benchmarks/session_client.py: what the browser's frontend sends and applies, without
drawing anything) with the page's live view beside it (benchmarks/live_client.py: what the fitcore_live
component asks the server: `GET /fitcore/live` every 0.4 s while the run trains, every second while it is
queued or paused, one script rerun when the run's status changes), each with its own `fitcore_owner` cookie,
so that 30 sessions fit on 2 cores beside the server; with `--client browser` a headless Chromium page (one
browser context each), which also draws every chart: 20 of them on 2 cores starve the server and one another
(docs/reliability.md).

The server runs on a free loopback port with a cap on runs training at once (FITCORE_MAX_ACTIVE_RUNS), a
short idle timeout (FITCORE_IDLE_TIMEOUT) and goodbye grace (FITCORE_CLOSED_GRACE), so that closed sessions
are reaped within seconds.

1. One session loads the app and closes: the server has imported torch and built its pool (RSS "start").
2. `sessions` sessions open their own link: the tutorial (200 rows, one batch, 200 epochs of Adam) with W
   and b shifted by 0.1 per session, so that every session must show its own answer. Each presses Start
   training, and every answer of its live view is recorded: its status, any queue position, the time since
   the previous answer, the latest parameters; every status change reruns the page once. With `hold` (the
   default), the first `cap` sessions start at 1 step/s and so hold every slot; the others press Start only
   once those train, so each of them must show a queue position. When all of them do, the holders move
   their Pace to "as fast as possible" and the queue drains: a queue is seen by construction, not by
   the luck of timing.
3. Each session's run must end "Finished" with the learned parameters of its results table (drawn by the
   rerun that the end of the run asked for) and of its live view's last answer within TOLERANCE of
   torch.linalg.lstsq on that session's data, its live view never more than MAX_GAP_S without an answer
   while the run was active. Then the sessions close, each saying goodbye as a closing page does.
4. `abandoned` more sessions start a long, slow run and are closed while it trains, without a goodbye (a
   browser that crashed or lost its network): the pool must stop and free those runs once nobody has read
   them for the idle timeout.
5. A reload, and a goodbye: a session starts a long, slow run, says goodbye and closes, and a new session
   with the same owner cookie opens at once and finds that run through `GET /fitcore/live` without a run
   id (a session with another cookie gets 404); the run must still train after the goodbye grace. Then that
   session says goodbye and closes too: the run must be gone within the grace and GOODBYE_SLACK_S.
6. After the idle timeout and `settle` seconds: no training thread is left, and RSS is read again ("end").

Throughout, /_stcore/health is timed every 100 ms and the server's training threads (named fitcore-run-N
at OS level) and resident memory are sampled from /proc every 100 ms.

    python -m benchmarks.load_test [--quick] [--client websocket|browser] [--sessions 20] [--cap 4]
        [--idle-timeout 10] [--closed-grace 5] [--wave 0] [--no-hold] [--pace max]
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from benchmarks import common
from benchmarks.browser import CHROMIUM, CHROMIUM_ARGS, App, streamlit_app
from benchmarks.live_client import LIVE_PATH, POLL_S
from benchmarks.session_client import OWNER_COOKIE
from fitcore.view.controls import pace_label

CLIENTS = ("websocket", "browser")

PAGE_ARGS = [
    *CHROMIUM_ARGS,
    # each page stands for a student's own tab in the foreground: no throttled timers in background pages
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
RUN_SECONDS = re.compile(r"finished \d+ steps in ([\d.]+) s")  # in a finished run's status line
TOLERANCE = 5e-3  # learned vs lstsq; the page shows 4 decimals and 200 Adam steps get within 3e-4
SAMPLE_EVERY = 0.1  # seconds between health requests, and between /proc readings
# the OS name of a run's thread (fitcore/runs/runner.py), "fitcore-ended" after
TRAINING_PREFIX = "fitcore-run-"
END_STATUSES = ("Finished", "Stopped", "Diverged", "Failed")
# the abandoned sessions' run: one step a second for hours, so only the pool's reaper can end it
ABANDONED_FIELDS = {"epochs": "10000"}
ABANDONED_PACE = "1"
ABANDON_START_S = 60.0  # the most the abandoned sessions may take to open and start their runs
HOLD_PACE = "1"  # the holders' pace until the queue is full: 200 steps would take minutes
# The longest a live view may go without an answer while its run is active: the page's picture is that stale.
MAX_GAP_S = 2.0
# What one answer may take, on average, for the least number of answers a run of known length must get:
# a running run is asked about every POLL_S (benchmarks/live_client.py), so a run of t s gets at least
# floor(t / (POLL_S + ANSWER_ALLOWANCE_S)) answers while it runs.
ANSWER_ALLOWANCE_S = 0.6
# A run whose page said goodbye must be gone within the grace and this: the reaper looks once a second, and
# a stopped run's thread ends at its next step.
GOODBYE_SLACK_S = 3.0
HEALTH_P95_MS = 500.0  # /_stcore/health during the runs: a page's own requests answer this fast
MIB = 2**20
# The server's RSS after every session has gone may exceed its start by this much: the allocator and Streamlit
# keep 27 to 40 MiB after 20 sessions (docs/reliability.md); a run or a session kept alive would add more.
RSS_GROWTH_MIB = 100

# Installed in every page before Streamlit's own scripts: every answer the page's live view gets from
# /fitcore/live is read as it arrives (window.fetch wrapped) and kept in window.__fitcore, in the shape of
# benchmarks.live_client.LiveState: what the websocket client records of its own answers.
RECORDER_JS = r"""
(() => {
  const seen = {statuses: [], max_queue: 0, status: "", active: false, step: 0, total: 0, text: "",
                max_gap_s: 0, updates: 0, learned: [], learned_step: 0, run_id: null};
  let last = 0;  // performance.now() of the latest answer
  window.__fitcore = seen;
  const record = (body) => {
    const run = body.run, now = performance.now();
    if (seen.updates && seen.active) seen.max_gap_s = Math.max(seen.max_gap_s, (now - last) / 1000);
    seen.updates += 1;
    last = now;
    const status = run.status_line.split("\u00b7")[0].trim();
    if (!seen.statuses.includes(status)) seen.statuses.push(status);
    const q = run.status_line.match(/position (\d+) in the queue/);
    if (q) seen.max_queue = Math.max(seen.max_queue, Number(q[1]));
    Object.assign(seen, {status: status, active: run.active, step: run.step, total: run.total_steps,
                         text: run.status_line, run_id: run.id});
    if (body.params.length) [seen.learned_step, seen.learned] = body.params[body.params.length - 1];
  };
  const fetch = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetch(...args);
    if (String(args[0].url || args[0]).includes("/fitcore/live") && response.ok)
      response.clone().json().then(record, () => {});
    return response;
  };
})();
"""

# The results table under the "Results" heading (shown once the run has ended): one {column: text} per row.
RESULTS_JS = r"""() => {
  const heading = [...document.querySelectorAll("h3")].find(h => h.textContent.trim() === "Results");
  if (!heading) return null;
  for (const table of document.querySelectorAll('[data-testid="stTable"] table')) {
    const head = [...table.querySelectorAll("thead th")].map(th => th.textContent.trim());
    if (!head.includes("Learned") || !head.includes("Least squares")) continue;
    return [...table.querySelectorAll("tbody tr")].map(tr => {
      const cells = [...tr.querySelectorAll("th, td")].map(td => td.textContent.trim());
      return Object.fromEntries(head.map((h, i) => [h, cells[i]]));
    });
  }
  return null;
}"""


@dataclass(frozen=True)
class LoadSettings:
    """One load test: how many sessions, which client drives them, the server's limits, its bounds in time."""

    sessions: int = 20  # sessions that each train one run to its end
    cap: int = 4  # FITCORE_MAX_ACTIVE_RUNS: runs training at once
    # FITCORE_IDLE_TIMEOUT: seconds unread before a run is stopped and dropped. An open page reads its run
    # 2.5 times a second; when every page reran a script to read it, gaps of over 5 s were seen on 2 loaded
    # cores, and 5 s reaped an open page's run
    idle_timeout: float = 10.0
    closed_grace: float = 5.0  # FITCORE_CLOSED_GRACE: seconds a run outlives its page's goodbye
    abandoned: int = 2  # more sessions that start a long run and are closed while it trains
    wave: int = 0  # sessions loading at once (0: all of them)
    hold: bool = True  # the first `cap` sessions hold every slot until all others show a queue position
    pace: str = "max"  # the sessions' pace, one of fitcore.view.controls.PACE_CHOICES
    timeout: float = 600.0  # the whole test, from `streamlit run` to the last reading
    settle: float = 3.0  # seconds after the last run has gone before the closing RSS reading
    client: str = "websocket"  # one of CLIENTS: Streamlit's websocket protocol, or Chromium pages


# -- the server and what /proc says about it ---------------------------------------------------------------
def health_seconds(url: str, timeout: float = 10.0) -> float | None:
    """Seconds one GET of /_stcore/health took, or None if it failed."""
    t0 = common.clock()
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=timeout) as response:
            ok = response.read().strip() == b"ok"
    except OSError:
        return None
    return common.clock() - t0 if ok else None


@contextmanager
def server(settings: LoadSettings, log_dir: Path, deadline: float) -> Iterator[App]:
    """`streamlit run app.py` with the settings' cap and idle timeout, healthy by the deadline."""
    env = {
        "FITCORE_MAX_ACTIVE_RUNS": str(settings.cap),
        "FITCORE_IDLE_TIMEOUT": f"{settings.idle_timeout:g}",
        "FITCORE_CLOSED_GRACE": f"{settings.closed_grace:g}",
    }
    with streamlit_app(log_dir / "server.log", env, timeout=deadline - common.clock()) as app:
        yield app


def training_names(pid: int) -> dict[int, str]:
    """The OS name of every thread of process `pid`, by thread id, from /proc/<pid>/task/*/comm."""
    names = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names[int(task.name)] = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended between listing and reading
    return names


class TrainingThreads:
    """Counts (runs training, OS threads carrying their names) in a process, one reading per call.

    Linux copies a thread's name to the threads it starts, so a run's helper threads (its replica threads
    and the OpenMP workers torch starts for it) carry the run's name "fitcore-run-N" too, and the OpenMP
    workers of a run's own thread live until that thread exits, a moment after it has renamed itself
    "fitcore-ended" and started the next queued run. Counting distinct names alone then sees one run too
    many for that moment. So a run counts as training while the thread that first carried its name (the
    lowest thread id seen with it: the run's own thread, which started the others) still carries it.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._first: dict[str, int] = {}  # run name -> lowest thread id ever seen with it

    def __call__(self, pid: int) -> tuple[int, int]:
        names = {tid: n for tid, n in training_names(pid).items() if n.startswith(TRAINING_PREFIX)}
        with self._lock:
            for tid, name in sorted(names.items()):
                self._first.setdefault(name, tid)
            runs = {name for name in names.values() if names.get(self._first[name]) == name}
        return len(runs), len(names)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Two daemon threads, every SAMPLE_EVERY seconds: one times /_stcore/health, one reads /proc."""

    def __init__(self, srv: App):
        self.srv = srv
        self.health: list[tuple[float, float | None]] = []  # (time, seconds; None: the request failed)
        self.proc: list[tuple[float, int, int, int]] = []  # (time, runs training, their OS threads, RSS)
        self.training = TrainingThreads()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(self._health,), name="load-health", daemon=True),
            threading.Thread(target=self._loop, args=(self._read_proc,), name="load-proc", daemon=True),
        ]

    def __enter__(self) -> "Sampler":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)

    def _loop(self, sample) -> None:
        while not self._stop.is_set():
            t0 = common.clock()
            sample()
            self._stop.wait(max(0.0, SAMPLE_EVERY - (common.clock() - t0)))

    def _health(self) -> None:
        self.health.append((common.clock(), health_seconds(self.srv.url)))

    def _read_proc(self) -> None:
        try:
            runs, threads = self.training(self.srv.pid)
            self.proc.append((common.clock(), runs, threads, rss_bytes(self.srv.pid)))
        except (OSError, RuntimeError):
            pass  # the server has exited; the test reports it

    def now(self) -> tuple[int, int, int]:
        """(runs training, their OS threads, RSS) read at once, not from the samples."""
        runs, threads = self.training(self.srv.pid)
        return runs, threads, rss_bytes(self.srv.pid)

    def proc_between(self, t0: float, t1: float) -> list[tuple[float, int, int, int]]:
        return [s for s in list(self.proc) if t0 <= s[0] <= t1]

    def health_between(self, t0: float, t1: float) -> dict:
        return latency_figures([s for t, s in list(self.health) if t0 <= t <= t1])


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def latency_figures(samples: list[float | None]) -> dict:
    ok = [s for s in samples if s is not None]
    figures = {"requests": len(samples), "failed": len(samples) - len(ok)}
    if ok:
        figures |= {f"p{q}_ms": percentile(ok, q) * 1000 for q in (50, 95)} | {"max_ms": max(ok) * 1000}
    return figures


# -- the sessions ------------------------------------------------------------------------------------------
def session_fields(i: int) -> dict[str, str]:
    """Session i's settings as URL parameters: the tutorial with W and b shifted by 0.1·i, seed i."""
    w1, w2, b = round(5.2 + 0.1 * i, 6), round(9.6 - 0.1 * i, 6), round(3.4 + 0.1 * i, 6)
    return {"weights": f"{w1:g},{w2:g}", "bias": f"{b:g}", "seed": str(i)}


def reference(fields: dict[str, str]) -> tuple[float, ...]:
    """(w1, ..., wd, b): torch.linalg.lstsq on these settings' data, computed here, not read from the page."""
    from fitcore.core.config import FitConfig, validate
    from fitcore.core.data import least_squares, make_data

    cfg = validate(FitConfig.from_mapping(fields))
    weights, bias = least_squares(*make_data(cfg))
    return (*weights, bias)


def session_links(url: str, fields: list[dict[str, str]], settings: LoadSettings) -> list[str]:
    """Each session's link: the holders' at HOLD_PACE, the others' at the settings' pace."""
    k = holders(settings)
    return [link(url, f, HOLD_PACE if i < k else settings.pace) for i, f in enumerate(fields)]


def link(url: str, fields: dict[str, str], pace: str) -> str:
    return url + "/?" + urllib.parse.urlencode({**fields, "pace": pace})


def _ms_left(deadline: float) -> float:
    left = deadline - common.clock()
    if left <= 0:
        raise TimeoutError("the load test ran out of time")
    return left * 1000


def _s_left(deadline: float) -> float:
    return _ms_left(deadline) / 1000


# -- the clients: each opens sessions, presses Start, reads the status line and the results, closes ---------
# Both offer: open(links, wave, deadline) -> tabs, press(tabs, deadline) -> press times, release(tab,
# deadline), state(tab) -> what the status recorder saw, results(tab) -> the results table's rows or None,
# close(tabs); and they are context managers that close everything they opened.


class BrowserClient:
    """Headless Chromium pages, one browser context each; RECORDER_JS records every status they show."""

    def __enter__(self) -> "BrowserClient":
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=PAGE_ARGS)
        except BaseException:
            self._pw.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._browser.close()
        finally:
            self._pw.stop()

    def open(self, links: list[str], wave: int, deadline: float, owners: list[str] | None = None) -> list:
        """One context and page per link, `wave` loading at once; each waits for its Start button.

        A context with an owner id from `owners` starts with that `fitcore_owner` cookie; without, the page
        makes one.
        """
        pages = []
        size = wave or len(links)
        owners = owners or [None] * len(links)
        for first in range(0, len(links), size):
            opened = []
            for address, owner in zip(links[first : first + size], owners[first : first + size]):
                context = self._browser.new_context(viewport={"width": 1280, "height": 800})
                if owner is not None:
                    context.add_cookies([{"name": OWNER_COOKIE, "value": owner, "url": address}])
                context.add_init_script(RECORDER_JS)
                page = context.new_page()
                page.goto(address, wait_until="commit", timeout=_ms_left(deadline))
                opened.append(page)
            for page in opened:
                page.get_by_role("button", name="Start training").wait_for(timeout=_ms_left(deadline))
            pages += opened
        return pages

    def press(self, pages: list, deadline: float) -> list[float]:
        """Press Start training on every page, one after the other; the time of each press."""
        pressed = []
        for page in pages:
            page.get_by_role("button", name="Start training").click(timeout=_ms_left(deadline))
            pressed.append(common.clock())
        return pressed

    def release(self, page, deadline: float, tries: int = 5) -> None:
        """Choose "as fast as possible" in the page's Pace box (its option reads "Pace: as fast as possible").

        A full rerun may redraw the box between the click and the choice, so it is chosen again until the box
        shows the new pace.
        """
        shown = f"Pace: {pace_label('max')}"
        box = page.locator('[data-testid="stSelectbox"] input[aria-label="Pace"]')  # its label is hidden
        for _ in range(tries):
            box.click(timeout=_ms_left(deadline))
            page.get_by_role("option", name=shown, exact=True).click(timeout=_ms_left(deadline))
            if wait_until(lambda: box.input_value() == shown, 5):
                return
        raise RuntimeError(f"the Pace box did not show {shown!r}")

    def watch(self, page) -> None:
        pass  # the page's own live view asks for news

    def state(self, page) -> dict:
        return page.evaluate("() => window.__fitcore")

    def settled(self, page) -> bool:
        seen = self.state(page)
        return seen["updates"] > 0 and not seen["active"]

    def runs(self, page) -> dict:
        return {}  # a page's script runs are not counted

    def results(self, page) -> list[dict] | None:
        return page.evaluate(RESULTS_JS)

    def fetch(self, url: str, owner: str, target: str) -> int:
        return fetch_status(url, owner, target)

    def close(self, pages: list, goodbye: bool = False) -> list[int | None]:
        """Close the pages' contexts; with `goodbye` each page is closed first with its unload handlers run.

        The page's own goodbye (a beacon) is not awaited, so no status of it is reported.
        """
        for page in pages:
            if goodbye:
                page.close(run_before_unload=True)
            page.context.close()
        return [None] * len(pages)


@dataclass(frozen=True)
class WebsocketTab:
    session: object  # benchmarks.session_client.Session
    live: object  # benchmarks.live_client.LiveView: the page's live view, with the same owner cookie
    owner: str


class WebsocketClient:
    """Sessions of Streamlit's websocket protocol and their live views, all on one event loop in a thread."""

    def __enter__(self) -> "WebsocketClient":
        from benchmarks.session_client import LoopThread

        self._loop = LoopThread("load-sessions").__enter__()
        self._open: list[WebsocketTab] = []
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close(list(self._open))
        finally:
            self._loop.__exit__(*exc)

    def open(
        self, links: list[str], wave: int, deadline: float, owners: list[str] | None = None
    ) -> list[WebsocketTab]:
        """One session per link, `wave` connecting at once; each returns once its first run has finished.

        Each session is a browser of its own (a new owner cookie) unless `owners` gives its owner id.
        """
        from benchmarks.live_client import Http, LiveView
        from benchmarks.session_client import Session, new_owner

        owners = owners or [new_owner() for _ in links]
        tabs = []
        size = wave or len(links)
        for first in range(0, len(links), size):
            opened = []
            for address, owner in zip(links[first : first + size], owners[first : first + size]):
                parts = urllib.parse.urlsplit(address)
                url = f"{parts.scheme}://{parts.netloc}"
                session = Session(url, parts.query, owner=owner)
                opened.append(WebsocketTab(session, LiveView(session, Http(url, owner)), owner))
            self._open += opened
            self._gather([tab.session.open(_s_left(deadline)) for tab in opened], deadline)
            tabs += opened
        return tabs

    def press(self, tabs: list[WebsocketTab], deadline: float) -> list[float]:
        """Press Start training in every session at once; the time each press's run had finished.

        The live view starts asking for news once the page shows the run, as the component does once the
        rerun that started it has drawn it.
        """
        pressed: dict[int, float] = {}

        async def press(i: int, tab: WebsocketTab) -> None:
            await tab.session.click("Start training", _s_left(deadline))
            tab.live.start()
            pressed[i] = common.clock()

        self._gather([press(i, tab) for i, tab in enumerate(tabs)], deadline)
        return [pressed[i] for i in range(len(tabs))]

    def watch(self, tab: WebsocketTab) -> None:
        """Start the live view of a page that shows a run it did not start (a reloaded page)."""
        self._loop.call(tab.live.start)

    def live_views(self, tabs: list[WebsocketTab], on: bool) -> None:
        """Start or stop the live views of these pages (a browser tab shown again, or hidden)."""

        async def switch() -> None:
            for tab in tabs:
                if on:
                    tab.live.start()
                else:
                    await tab.live.stop()

        self._loop.run(switch(), 30)

    def set_poll(self, tab: WebsocketTab, seconds: float) -> None:
        """The seconds between an answer and the next request of this page's live view, from now on."""
        self._loop.call(setattr, tab.live, "poll_s", seconds)

    def release(self, tab: WebsocketTab, deadline: float) -> None:
        """Choose "as fast as possible" in the Pace control; wait for the run that applied it."""

        async def release() -> None:
            session = tab.session
            await session.wait_for(lambda: session.options("Pace"), _s_left(deadline))
            # the select box shows "Pace: as fast as possible", a select slider "as fast as possible"
            option = next(o for o in session.options("Pace") if o.endswith(pace_label("max")))
            await session.select("Pace", option, _s_left(deadline))

        self._gather([release()], deadline)

    def state(self, tab: WebsocketTab) -> dict:
        """What the live view has shown (benchmarks.live_client.LiveState), with its longest gap until now."""
        return self._loop.call(
            lambda: dataclasses.asdict(tab.live.state) | {"max_gap_s": tab.live.longest_gap_s()}
        )

    def settled(self, tab: WebsocketTab) -> bool:
        """The run has ended and the page's rerun for it has finished."""
        return self._loop.call(lambda: tab.live.settled)

    def runs(self, tab: WebsocketTab) -> dict:
        """The session's script runs, as its ForwardMsgs reported them."""
        return self._loop.call(lambda: dataclasses.asdict(tab.session.runs))

    def results(self, tab: WebsocketTab) -> list[dict] | None:
        return self._loop.call(_results_rows, tab.session)

    def fetch(self, url: str, owner: str, target: str) -> int:
        """The status of one GET of `target` by a browser with this owner cookie (no page behind it)."""
        return fetch_status(url, owner, target)

    def close(self, tabs: list[WebsocketTab], goodbye: bool = False) -> list[int | None]:
        """Close the sessions; with `goodbye` each first says POST /fitcore/bye: the answers' statuses."""
        statuses: dict[int, int | None] = {}

        async def close(i: int, tab: WebsocketTab) -> None:
            statuses[i] = await tab.live.close(goodbye)
            await tab.session.close()

        self._gather([close(i, tab) for i, tab in enumerate(tabs)], None)
        self._open = [tab for tab in self._open if tab not in tabs]
        return [statuses[i] for i in range(len(tabs))]

    def _gather(self, coroutines: list, deadline: float | None) -> None:
        async def every():
            await asyncio.gather(*coroutines)

        self._loop.run(every(), None if deadline is None else _s_left(deadline) + 5)


def fetch_status(url: str, owner: str, target: str) -> int:
    """The status of one GET of url + target with this `fitcore_owner` cookie."""
    from benchmarks.session_client import owner_headers

    request = urllib.request.Request(url + target, headers=owner_headers(owner))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _results_rows(session) -> list[dict] | None:
    """The table under the "Results" heading (drawn once the run has ended): one {column: text} a row."""
    if ("heading", "Results") not in session.texts():
        return None
    for table in session.tables():
        if {"Learned", "Least squares"} <= set(table.columns):
            return table.astype(str).to_dict("records")
    return None


def make_client(name: str):
    if name not in CLIENTS:
        raise ValueError(f"client: got {name!r}; allowed: one of {', '.join(CLIENTS)}")
    return WebsocketClient() if name == "websocket" else BrowserClient()


# -- the phases --------------------------------------------------------------------------------------------
def holders(settings: LoadSettings) -> int:
    """How many sessions hold the slots: `cap`, if there are more sessions than that (else none)."""
    return settings.cap if settings.hold and settings.sessions > settings.cap else 0


def press_holding(
    client, tabs: list, settings: LoadSettings, sampler: Sampler, deadline: float
) -> tuple[list[float], dict]:
    """Press Start in every session; with holders, fill the slots first and the queue after; the press times.

    The holders' runs crawl at HOLD_PACE until every other session has shown its place in the queue; then
    each holder's Pace is set to "as fast as possible" and the queue drains.
    """
    k = holders(settings)
    if k == 0:
        return client.press(tabs, deadline), {"holders": 0}
    pressed = client.press(tabs[:k], deadline)
    statuses = lambda: [client.state(t)["status"] for t in tabs[:k]]
    settled = lambda: all(s == "Running" for s in statuses()) or any(s in END_STATUSES for s in statuses())
    wait_until(settled, min(120.0, _s_left(deadline)))
    held = all(s == "Running" for s in statuses())  # if not, one was dropped: the others may not queue
    pressed += client.press(tabs[k:], deadline)
    all_queued = lambda: all(client.state(t)["max_queue"] > 0 for t in tabs[k:])
    queued = wait_until(all_queued, min(60.0, _s_left(deadline)))
    hold = {
        "holders": k,
        "all_holders_trained": held,
        "all_others_queued": bool(queued),
        "training_while_held": sampler.now()[0],
        "held_s": common.clock() - pressed[0],
    }
    released = 0
    for tab in tabs[:k]:
        try:
            client.release(tab, deadline)
            released += 1
        except (TimeoutError, RuntimeError) as exc:  # reported with the figures, not as a crash
            hold.setdefault("release_errors", []).append(str(exc))
    hold["released"] = released
    return pressed, hold


def read_learned(rows: list[dict]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(learned, least squares as the page shows it), in the table's order: w1, ..., wd, b."""
    return tuple(float(r["Learned"]) for r in rows), tuple(float(r["Least squares"]) for r in rows)


def wait_for_ends(client, tabs: list, pressed: list[float], deadline: float) -> list[dict]:
    """Poll every session until its run has ended, the page has rerun for it and drawn its results table.

    Or until the deadline passes.
    """
    outcomes: dict[int, dict] = {}
    while len(outcomes) < len(tabs) and common.clock() < deadline:
        for i, tab in enumerate(tabs):
            if i in outcomes or not client.settled(tab):
                continue
            seen = client.state(tab)
            rows = client.results(tab)
            if rows is None and seen["status"] == "Finished":
                continue  # the rerun that draws the results has not arrived yet
            seconds = common.clock() - pressed[i]
            outcomes[i] = {"seen": seen, "rows": rows or [], "seconds": seconds, "runs": client.runs(tab)}
        time.sleep(0.25)
    for i, tab in enumerate(tabs):
        if i not in outcomes:
            outcomes[i] = {"seen": client.state(tab), "rows": [], "seconds": None, "runs": client.runs(tab)}
    return [outcomes[i] for i in range(len(tabs))]


def least_updates(run_s: float | None) -> int:
    """The fewest answers a live view must have got from a run that trained `run_s` seconds (at least 1)."""
    return max(1, math.floor((run_s or 0.0) / (POLL_S + ANSWER_ALLOWANCE_S)))


def judge(i: int, fields: dict[str, str], want: tuple[float, ...], outcome: dict) -> dict:
    """One session's record: what its page showed, and whether it is `want`, the lstsq answer."""
    seen, runs = outcome["seen"], outcome["runs"]
    learned, page_lstsq = read_learned(outcome["rows"]) if outcome["rows"] else ((), ())
    live = tuple(seen["learned"])  # the live view's last parameters point
    error = max((abs(a - b) for a, b in zip(learned, want)), default=math.inf)
    live_error = max((abs(a - b) for a, b in zip(live, want)), default=math.inf)
    finished = seen["status"] == "Finished" and seen["step"] == seen["total"] > 0
    run_s = float(match.group(1)) if (match := RUN_SECONDS.search(seen["text"])) else None
    return {
        "session": i,
        "fields": fields,
        "statuses": seen["statuses"],
        "max_queue_position": seen["max_queue"],
        # the live view: answers received, the longest wait between two while the run was active
        "updates": seen["updates"],
        "least_updates": least_updates(run_s),
        "max_gap_s": seen["max_gap_s"],
        "gone": bool(seen.get("gone")),  # the server answered 404 for an open page's run
        "failed_requests": seen.get("failed", 0),
        "errors": seen.get("errors", []),
        # websocket sessions: every script run, and the reruns asked for because the run's status changed
        "script_runs": runs.get("full_started", 0) + runs.get("fragment_started", 0) if runs else None,
        "status_reruns": seen.get("status_reruns"),
        "status": seen["status"],
        "step": seen["step"],
        "total": seen["total"],
        "learned": learned,
        "page_lstsq": page_lstsq,
        "live_learned": live,
        "live_learned_step": seen["learned_step"],
        "lstsq": want,
        "max_error": max(error, live_error),
        "ok": finished
        and len(learned) == len(live) == len(want)
        and max(error, live_error) <= TOLERANCE
        and seen["learned_step"] == seen["total"],
        "seconds": outcome["seconds"],
        "run_s": run_s,
        "status_text": seen["text"],
    }


def wait_until(predicate, timeout: float, every: float = 0.1):
    """Poll predicate until it returns something true; that value, or None after `timeout` seconds."""
    end = common.clock() + timeout
    while common.clock() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None


def abandon_tabs(client, srv: App, settings: LoadSettings, sampler: Sampler, deadline: float) -> dict:
    """Open sessions that start a long run, close them while it trains, time how long the runs outlive it.

    Opening and starting them gets ABANDON_START_S at most: a server that cannot do that is reported with
    the figures (`error`), not as a crash of the whole test.
    """
    if settings.abandoned == 0:
        return {"tabs": 0}
    links = [link(srv.url, ABANDONED_FIELDS, ABANDONED_PACE)] * settings.abandoned
    start_by = min(deadline, common.clock() + ABANDON_START_S)
    try:
        tabs = client.open(links, settings.wave, start_by)
    except TimeoutError as exc:  # the client closes what it opened when it exits
        return _not_started(settings, exc)
    try:
        client.press(tabs, start_by)
        want = min(settings.abandoned, settings.cap)

        def all_started():
            shown = [client.state(tab)["status"] in ("Running", "Queued") for tab in tabs]
            return all(shown) and sampler.now()[0] >= want

        wait_until(all_started, 30)
        training = sampler.now()[0]
        statuses = [client.state(tab)["status"] for tab in tabs]
    except TimeoutError as exc:
        return _not_started(settings, exc)
    finally:
        client.close(tabs)
    closed = common.clock()
    gone = wait_until(lambda: sampler.now()[:2] == (0, 0), settings.idle_timeout + 30)
    return {
        "tabs": settings.abandoned,
        "statuses_when_closed": statuses,
        "training_when_closed": training,
        "gone_after_s": common.clock() - closed if gone else None,
    }


def run_trains(pid: int, run_id: str) -> bool:
    """Whether the run's own thread still carries its name (fitcore-run-N, cut to Linux's 15 bytes)."""
    return f"fitcore-{run_id}"[:15] in training_names(pid).values()


def reload_and_goodbye(client, srv: App, settings: LoadSettings, deadline: float) -> dict:
    """A page reloaded, then closed: the run survives the reload's goodbye, and goes after the last one.

    1. A session starts a long, slow run; once its live view shows it training, the page says goodbye and
       closes, and a session with the same owner cookie opens at once (a reload): its live view asks for
       the owner's latest run without a run id and must get that run, still training.
    2. A browser with another cookie asks the same: 404, with or without the run id.
    3. The reloaded page keeps reading the run past the goodbye grace: the run must still train.
    4. The reloaded page says goodbye and closes: the run must be gone within the grace + GOODBYE_SLACK_S.
    """
    from benchmarks.session_client import new_owner

    owner, address = new_owner(), link(srv.url, ABANDONED_FIELDS, ABANDONED_PACE)
    out: dict = {"measured": True}
    try:
        first = client.open([address], 1, deadline, owners=[owner])
        client.press(first, deadline)
        running = wait_until(lambda: client.state(first[0])["status"] == "Running", 30)
        run_id = client.state(first[0])["run_id"]
        out |= {"run_id": run_id, "trained_before_reload": bool(running)}
        out["reload_bye_status"] = client.close(first, goodbye=True)[0]
        bye_at = common.clock()
        second = client.open([address], 1, deadline, owners=[owner])
        client.watch(second[0])
        wait_until(lambda: client.state(second[0])["updates"] > 0, 10)
        found = client.state(second[0])
        out |= {"reload_found": found["run_id"], "reload_status": found["status"]}
        stranger = new_owner()
        out["stranger_statuses"] = [
            client.fetch(srv.url, stranger, f"{LIVE_PATH}?since=0"),
            client.fetch(srv.url, stranger, f"{LIVE_PATH}?since=0&run={run_id}"),
        ]
        time.sleep(max(0.0, bye_at + settings.closed_grace + GOODBYE_SLACK_S - common.clock()))
        out["trains_after_grace"] = run_trains(srv.pid, run_id) and not client.state(second[0]).get("gone")
        out["bye_status"] = client.close(second, goodbye=True)[0]
        closed = common.clock()
        bound = settings.closed_grace + GOODBYE_SLACK_S
        gone = wait_until(lambda: not run_trains(srv.pid, run_id), bound + 30)
        out["gone_after_s"] = common.clock() - closed if gone else None
    except (TimeoutError, RuntimeError) as exc:  # reported with the figures, not as a crash
        out["error"] = str(exc)
    return out


def _not_started(settings: LoadSettings, exc: TimeoutError) -> dict:
    """abandon_tabs' figures when its sessions could not be opened or started in time."""
    return {"tabs": settings.abandoned, "training_when_closed": 0, "gone_after_s": None, "error": str(exc)}


# -- the whole test ----------------------------------------------------------------------------------------
def run_load(settings: LoadSettings) -> dict:
    """Run the load test; every figure and every session's record, as one dict."""
    t0 = common.clock()
    deadline = t0 + settings.timeout
    # kept back for the abandoned tabs, the reload and the end
    reserve = settings.idle_timeout + settings.closed_grace + settings.settle + 60
    fields = [session_fields(i) for i in range(settings.sessions)]
    wants = [reference(f) for f in fields]  # before the server starts: torch's import is not part of the load
    with tempfile.TemporaryDirectory(prefix="fitcore-load-") as tmp:
        with server(settings, Path(tmp), deadline) as srv, Sampler(srv) as sampler:
            healthy_s = common.clock() - t0
            cold_rss = rss_bytes(srv.pid)
            with make_client(settings.client) as client:
                client.close(client.open([srv.url], 1, deadline))  # the app's first run: torch, pool
                time.sleep(settings.settle)  # let the first run's allocations settle, as at the end
                start_rss = rss_bytes(srv.pid)
                t_open = common.clock()
                tabs = client.open(session_links(srv.url, fields, settings), settings.wave, deadline)
                t_press, cpu0 = common.clock(), cpu_seconds(srv.pid)
                own0 = time.process_time()  # this process: the websocket sessions and the samplers
                pressed, hold = press_holding(client, tabs, settings, sampler, deadline)
                outcomes = wait_for_ends(client, tabs, pressed, deadline - reserve)
                t_ended, cpu1, own1 = common.clock(), cpu_seconds(srv.pid), time.process_time()
                sessions = [judge(i, *row) for i, row in enumerate(zip(fields, wants, outcomes))]
                client.close(tabs, goodbye=True)
                t_closed = common.clock()
                abandoned = abandon_tabs(client, srv, settings, sampler, deadline)
                reloaded = reload_and_goodbye(client, srv, settings, deadline)
            time.sleep(max(0.0, t_closed + settings.idle_timeout + 1.5 - common.clock()))  # one reap after
            wait_until(lambda: sampler.now()[:2] == (0, 0), max(0.0, deadline - common.clock()))
            time.sleep(settings.settle)
            end_runs, end_threads, end_rss = sampler.now()
            samples = sampler.proc_between(t_open, common.clock())
            figures = {
                "health_during_runs": sampler.health_between(t_press, t_ended),
                "health_all": sampler.health_between(t0, common.clock()),
            }
            log_tail = _log_problems(srv.log)
    return {
        "settings": dataclasses.asdict(settings),
        "client": settings.client,
        "sessions": settings.sessions,
        "runs": settings.sessions + settings.abandoned,
        "finished_right": sum(s["ok"] for s in sessions),
        "sessions_queued": sum(s["max_queue_position"] > 0 for s in sessions),
        # runs the pool dropped while their session was still open: their live view got 404
        "dropped_while_open": sum(s["gone"] for s in sessions),
        "max_queue_position": max((s["max_queue_position"] for s in sessions), default=0),
        "max_gap_s": max((s["max_gap_s"] for s in sessions), default=0.0),
        "updates": {
            "min": min((s["updates"] for s in sessions), default=0),
            "total": sum(s["updates"] for s in sessions),
            "below_least": [s["session"] for s in sessions if s["updates"] < s["least_updates"]],
        },
        "failed_requests": sum(s["failed_requests"] for s in sessions),
        "max_concurrent_runs": max((s[1] for s in samples), default=0),
        "max_training_os_threads": max((s[2] for s in samples), default=0),
        "end_training_runs": end_runs,
        "end_training_os_threads": end_threads,
        "rss_mib": {
            "cold": cold_rss / MIB,
            "start": start_rss / MIB,
            "peak": max((s[3] for s in samples), default=start_rss) / MIB,
            "end": end_rss / MIB,
        },
        **figures,
        "seconds": {
            "server_healthy": healthy_s,
            "sessions_open": t_press - t_open,
            "presses": pressed[-1] - pressed[0] if pressed else 0.0,
            "runs": t_ended - t_press,
            "total": common.clock() - t0,
        },
        "server_cpu_percent_during_runs": 100 * (cpu1 - cpu0) / max(1e-9, t_ended - t_press),
        # not Chromium's own processes: with the browser client this is the samplers and Playwright only
        "load_test_cpu_percent_during_runs": 100 * (own1 - own0) / max(1e-9, t_ended - t_press),
        "tolerance": TOLERANCE,
        "hold": hold,
        "abandoned": abandoned,
        "reload": reloaded,
        "server_log_problems": log_tail,
        "per_session": sessions,
    }


def _log_problems(log: Path) -> str:
    """The server log's last 3000 characters if it holds a traceback or an error, else ""."""
    text = log.read_text(errors="replace")
    return text[-3000:] if "Traceback" in text or "Error" in text else ""


# -- output ------------------------------------------------------------------------------------------------
def problems(result: dict) -> list[str]:
    """What the test promises and did not see; empty when every promise held."""
    cap, out = result["settings"]["cap"], []
    if result["finished_right"] != result["sessions"]:
        wrong = [s["session"] for s in result["per_session"] if not s["ok"]]
        out.append(f"sessions {wrong} did not finish with the lstsq parameters")
    if result["max_concurrent_runs"] > cap:
        out.append(f"{result['max_concurrent_runs']} runs trained at once, over the cap of {cap}")
    if result["dropped_while_open"]:
        out.append(f"{result['dropped_while_open']} runs were reaped while their session was open")
    if result["hold"]["holders"] and not result["hold"]["all_others_queued"]:
        out.append("not every session behind the holders showed a queue position")
    if result["hold"].get("released", 0) < result["hold"]["holders"]:
        out.append(f"{result['hold'].get('release_errors')}: holders whose pace could not be raised")
    if result["hold"]["holders"] and result["max_concurrent_runs"] < cap:
        out.append(f"the holders filled {result['max_concurrent_runs']} of the {cap} slots")
    if (result["end_training_runs"], result["end_training_os_threads"]) != (0, 0):
        out.append(f"{result['end_training_os_threads']} training threads left after the idle timeout")
    grown = result["rss_mib"]["end"] - result["rss_mib"]["start"]
    if grown > RSS_GROWTH_MIB:
        out.append(f"the server's RSS ended {grown:.0f} MiB above its start (bound {RSS_GROWTH_MIB} MiB)")
    if result["abandoned"]["tabs"] and result["abandoned"].get("gone_after_s") is None:
        out.append(f"the abandoned sessions' runs were not reaped {result['abandoned'].get('error', '')}")
    if result["max_gap_s"] >= MAX_GAP_S:
        out.append(f"a live view went {result['max_gap_s']:.1f} s without an answer (bound {MAX_GAP_S:g} s)")
    if result["updates"]["below_least"]:
        below = result["updates"]["below_least"]
        out.append(f"sessions {below} got fewer live answers than their runs' length asks for")
    p95 = result["health_during_runs"].get("p95_ms", math.inf)
    if p95 >= HEALTH_P95_MS:
        out.append(f"/_stcore/health p95 during the runs was {p95:.0f} ms (bound {HEALTH_P95_MS:g} ms)")
    out += reload_problems(result["reload"], result["settings"]["closed_grace"])
    return out


def reload_problems(reload: dict, grace: float) -> list[str]:
    """What the reload and goodbye case promises and did not see."""
    if "error" in reload:
        return [f"the reload case did not run through: {reload['error']}"]
    out = []
    if reload["reload_found"] != reload["run_id"]:
        out.append(f"a reload with the same cookie found {reload['reload_found']}, not {reload['run_id']}")
    if reload["stranger_statuses"] != [404, 404]:
        out.append(f"another cookie got {reload['stranger_statuses']} for that run, not 404")
    if not reload["trains_after_grace"]:
        out.append("the reloaded run did not outlive its first page's goodbye")
    gone, bound = reload["gone_after_s"], grace + GOODBYE_SLACK_S
    if gone is None or gone > bound:
        out.append(f"a run was gone {_num(gone)} s after its page's goodbye (bound {bound:g} s)")
    return out


def summary(result: dict) -> str:
    s, h, m = result["settings"], result["health_during_runs"], result["rss_mib"]
    ab = result["abandoned"]
    rows = [
        ["client", result["client"]],
        ["sessions (one run each)", result["sessions"]],
        ["runs (sessions + abandoned sessions)", result["runs"]],
        ["runs finished with the right parameters", f"{result['finished_right']} / {result['sessions']}"],
        [
            "sessions that saw a queue position",
            f"{result['sessions_queued']} (max position {result['max_queue_position']})",
        ],
        [
            "holders / all others queued while held",
            f"{result['hold']['holders']} / {_yes(result['hold'].get('all_others_queued'))}",
        ],
        ["max concurrent training runs (cap)", f"{result['max_concurrent_runs']} ({s['cap']})"],
        ["max OS threads named fitcore-run-*", result["max_training_os_threads"]],
        [
            "health p50 / p95 / max during runs (ms)",
            " / ".join(f"{h.get(k, math.nan):.1f}" for k in ("p50_ms", "p95_ms", "max_ms")),
        ],
        ["runs dropped under an open session", result["dropped_while_open"]],
        ["longest a live view went without an answer (s)", f"{result['max_gap_s']:.2f} (< {MAX_GAP_S:g})"],
        [
            "live answers: fewest in a session / all / failed requests",
            f"{result['updates']['min']} / {result['updates']['total']} / {result['failed_requests']}",
        ],
        ["health requests (failed)", f"{h['requests']} ({h['failed']})"],
        ["abandoned sessions: training when closed", f"{ab.get('training_when_closed', 0)} of {ab['tabs']}"],
        ["abandoned runs gone after close (s)", _num(ab.get("gone_after_s"))],
        ["reload: same cookie finds the run / another cookie gets", _reload_found(result["reload"])],
        ["reload: still training after the goodbye grace", _yes(result["reload"].get("trains_after_grace"))],
        ["run gone after its page's goodbye (s)", _num(result["reload"].get("gone_after_s"))],
        [
            "training runs / threads at the end",
            f"{result['end_training_runs']} / {result['end_training_os_threads']}",
        ],
        [
            "server RSS cold / start / peak / end (MiB)",
            f"{m['cold']:.0f} / {m['start']:.0f} / {m['peak']:.0f} / {m['end']:.0f}",
        ],
        ["server CPU during runs (% of one core)", f"{result['server_cpu_percent_during_runs']:.0f}"],
        [
            "this process's CPU during runs (% of one core)",
            f"{result['load_test_cpu_percent_during_runs']:.0f}",
        ],
        [
            "sessions open / presses / runs / total (s)",
            " / ".join(f"{result['seconds'][k]:.1f}" for k in ("sessions_open", "presses", "runs", "total")),
        ],
    ]
    return common.table(["figure", "value"], rows)


def session_table(result: dict) -> str:
    rows = [
        [
            s["session"],
            s["status"],
            " > ".join(s["statuses"]),
            s["max_queue_position"],
            f"{s['updates']} (>= {s['least_updates']})",
            f"{s['max_gap_s']:.2f}",
            "-" if s["script_runs"] is None else f"{s['script_runs']} ({s['status_reruns']})",
            ", ".join(f"{v:.4f}" for v in s["learned"]),
            f"{s['max_error']:.1e}",
            _num(s["seconds"]),
            s["ok"],
        ]
        for s in result["per_session"]
    ]
    headers = ["session", "status", "statuses seen", "queue", "answers", "gap s", "script runs (status)"]
    headers += ["learned w1, w2, b", "max |err|"]
    headers += ["s", "ok"]
    return common.table(headers, rows)


def _yes(value) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _num(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _reload_found(reload: dict) -> str:
    if "error" in reload:
        return f"error: {reload['error']}"
    same = "yes" if reload["reload_found"] == reload["run_id"] else f"NO ({reload['reload_found']})"
    return f"{same} / {reload['stranger_statuses']}"


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument(
        "--client",
        choices=CLIENTS,
        default="websocket",
        help="what drives each session: Streamlit's websocket protocol (default) or a Chromium page",
    )
    p.add_argument("--sessions", type=int, default=None, help="sessions that each train a run (20; quick: 6)")
    p.add_argument("--cap", type=int, default=None, help="FITCORE_MAX_ACTIVE_RUNS (4; quick: 2)")
    p.add_argument("--idle-timeout", type=float, default=10.0, help="FITCORE_IDLE_TIMEOUT in seconds")
    p.add_argument(
        "--closed-grace", type=float, default=5.0, help="FITCORE_CLOSED_GRACE: seconds after a goodbye"
    )
    p.add_argument("--abandoned", type=int, default=2, help="sessions closed while their run trains")
    p.add_argument("--wave", type=int, default=0, help="sessions loading at once (0: all)")
    p.add_argument("--no-hold", action="store_true", help="press every Start at once, no slot holders")
    p.add_argument("--pace", default="max", help="the runs' pace: steps per second or max")
    p.add_argument("--timeout", type=float, default=600.0, help="hard limit for the whole test, seconds")
    args = common.parse_args(p)
    settings = LoadSettings(
        sessions=args.sessions or (6 if args.quick else 20),
        cap=args.cap or (2 if args.quick else 4),
        idle_timeout=args.idle_timeout,
        closed_grace=args.closed_grace,
        abandoned=args.abandoned,
        wave=args.wave,
        hold=not args.no_hold,
        pace=args.pace,
        timeout=args.timeout,
        client=args.client,
    )

    def out_of_time(signum, frame):
        raise TimeoutError(f"the load test ran past its hard limit of {settings.timeout:g} s")

    signal.signal(signal.SIGALRM, out_of_time)  # the finally blocks still stop the server and the clients
    signal.alarm(int(settings.timeout) + 30)
    try:
        result = run_load(settings)
    finally:
        signal.alarm(0)
    print(summary(result))
    print()
    print(session_table(result))
    common.emit("load_test", result, args.quick)
    for problem in problems(result):
        print(f"load_test: FAILED: {problem}", file=sys.stderr)
    sys.exit(1 if problems(result) else 0)


if __name__ == "__main__":
    main()
