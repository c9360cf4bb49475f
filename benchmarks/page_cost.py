"""Server CPU per live page: what one student's open page costs the server while its run trains.

`streamlit run app.py` (benchmarks.browser.streamlit_app) with room for every run to train at once. Pages are
opened in steps (1, then 10, then 30 by default); each is a websocket session (benchmarks/session_client.py)
with its own owner cookie that starts a long run at a slow pace (PACE steps/s, epochs enough to outlast the
benchmark), and its live view (benchmarks/live_client.py) asks GET /fitcore/live for news every 0.4 s, as
the page does. With every page's run training, the server process's CPU time (utime + stime of all its
threads, /proc/<pid>/stat) is read over WINDOW_S seconds twice:

- "live": every live view polling: divided by the pages and the window, the % of one core per page (the
  target: at most 1 %). It holds the page's run's own training at the slow pace.
- "quiet": the same pages open and their runs training, but no live view asking: what the runs and the
  open sessions cost without the polling. ("live" - "quiet") / pages is the polling's own share of a page,
  held to the same target.

With the most pages, one more window has one projected page polling every 0.1 s beside the others at 0.4 s;
its own polling is its share of that window's answers times the window's polling CPU (the window less the
quiet one).

The CPU time is counted in clock ticks (10 ms): a short window (--quick) gives coarse figures.

    python -m benchmarks.page_cost [--quick] [--pages 1,10,30] [--window 30] [--pace 5]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common
from benchmarks.browser import streamlit_app
from benchmarks.live_client import POLL_S
from benchmarks.load_test import ABANDONED_FIELDS, WebsocketClient, cpu_seconds, link
from fitcore.view.controls import PACE_CHOICES

PACE = "5"  # steps per second of every page's run by default: slow, so that the runs' training stays small
FAST_POLL_S = 0.1  # the projected page's variant
TARGET_PERCENT = 1.0  # of one core, per page
SETTLE_S = 2.0  # after a change (pages opened, live views stopped or started) before a window starts
SERVER_ENV = {
    "FITCORE_IDLE_TIMEOUT": "3600",  # a quiet window must not reap a run
    "FITCORE_MAX_SECONDS": "3600",  # nor the classroom limit of 600 s end one
}


class Pages:
    """Open pages on one server, their runs training, their live views polling or not."""

    def __init__(self, client: WebsocketClient, url: str, deadline: float, pace: str):
        self.client, self.url, self.deadline, self.pace = client, url, deadline, pace
        self.tabs: list = []

    def open_more(self, count: int) -> None:
        """Open `count` more pages and press Start in each; return once every live view has an answer."""
        tabs = self.client.open([link(self.url, ABANDONED_FIELDS, self.pace)] * count, 0, self.deadline)
        self.client.press(tabs, self.deadline)
        self.tabs += tabs
        if not self._wait(lambda: all(self.client.state(t)["status"] == "Running" for t in self.tabs), 60):
            statuses = [self.client.state(t)["status"] for t in self.tabs]
            raise RuntimeError(f"not every page's run trains: {statuses}")

    def polling(self, on: bool) -> None:
        """Start or stop every page's live view."""
        self.client.live_views(self.tabs, on)

    def set_poll(self, index: int, seconds: float) -> None:
        self.client.set_poll(self.tabs[index], seconds)

    def answers(self, index: int | None = None) -> int:
        """Answers received so far by every page's live view, or by page `index`'s."""
        tabs = self.tabs if index is None else self.tabs[index : index + 1]
        return sum(self.client.state(t)["updates"] for t in tabs)

    def failed(self) -> int:
        return sum(self.client.state(t)["failed"] for t in self.tabs)

    @staticmethod
    def _wait(predicate, timeout: float) -> bool:
        end = common.clock() + timeout
        while common.clock() < end:
            if predicate():
                return True
            time.sleep(0.2)
        return False


def window(pid: int, pages: Pages, seconds: float) -> dict:
    """Server CPU over `seconds`, with what the pages got and what this process spent meanwhile."""
    time.sleep(SETTLE_S)
    answers0, first0, own0 = pages.answers(), pages.answers(0), time.process_time()
    t0, cpu0 = common.clock(), cpu_seconds(pid)
    time.sleep(seconds)
    t1, cpu1 = common.clock(), cpu_seconds(pid)
    elapsed, cpu = t1 - t0, cpu1 - cpu0
    n = len(pages.tabs)
    return {
        "pages": n,
        "seconds": elapsed,
        "server_cpu_s": cpu,
        "server_percent": 100 * cpu / elapsed,
        "per_page_percent": 100 * cpu / elapsed / n,
        "answers_per_s": (pages.answers() - answers0) / elapsed,
        "first_page_answers_per_s": (pages.answers(0) - first0) / elapsed,
        "client_percent": 100 * (time.process_time() - own0) / elapsed,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def measure(counts: list[int], seconds: float, pace: str = PACE) -> dict:
    """Every window, for each number of pages in `counts` (ascending), and the fast-poll variant."""
    deadline = common.clock() + 120 + len(counts) * (2 * seconds + 60) + seconds
    rows, variant = [], None
    env = SERVER_ENV | {"FITCORE_MAX_ACTIVE_RUNS": str(max(counts))}
    with tempfile.TemporaryDirectory(prefix="fitcore-page-cost-") as tmp:
        with streamlit_app(Path(tmp) / "server.log", env) as srv, WebsocketClient() as client:
            client.close(client.open([srv.url], 1, deadline))  # the app's first run: torch, the pool
            pages = Pages(client, srv.url, deadline, pace)
            for n in counts:
                pages.open_more(n - len(pages.tabs))
                live = window(srv.pid, pages, seconds)
                pages.polling(False)
                quiet = window(srv.pid, pages, seconds)
                pages.polling(True)
                rows.append(row(live, quiet))
            pages.set_poll(0, FAST_POLL_S)
            variant = window(srv.pid, pages, seconds)
            variant["fast_pages"] = 1
            variant["fast_page_percent"] = fast_page(variant, rows[-1])
            polling = variant["server_percent"] - rows[-1]["quiet"]["server_percent"]
            variant["ms_per_answer"] = 10 * polling / max(1e-9, variant["answers_per_s"])
            failed = pages.failed()
            client.close(pages.tabs, goodbye=True)
    return {"rows": rows, "fast_variant": variant, "failed_requests": failed}


def row(live: dict, quiet: dict) -> dict:
    """One number of pages: polling and quiet, and the polling's share per page."""
    n = live["pages"]
    polling = live["per_page_percent"] - quiet["per_page_percent"]
    return {
        "pages": n,
        "live": live,
        "quiet": quiet,
        "polling_per_page_percent": polling,
        # the server's CPU per answer, from the same two windows
        "ms_per_answer": 10
        * (live["server_percent"] - quiet["server_percent"])
        / max(1e-9, live["answers_per_s"]),
        "per_page": at_most(live["per_page_percent"]),
        "polling_per_page": at_most(polling),
    }


def at_most(value: float) -> dict:
    return {"value": value, "target": f"<= {TARGET_PERCENT:g}", "met": value <= TARGET_PERCENT}


def fast_page(variant: dict, last: dict) -> float:
    """The projected page's own polling, % of one core: its share of the answers of the variant window.

    The polling's CPU in that window is the server's less the same pages' quiet window (their runs and
    sessions); each answer costs about the same, so the page's share is its share of the answers.
    """
    polling = variant["server_percent"] - last["quiet"]["server_percent"]
    return polling * variant["first_page_answers_per_s"] / max(1e-9, variant["answers_per_s"])


def table(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        live, quiet = r["live"], r["quiet"]
        rows.append([
            r["pages"], f"{POLL_S:g}", f"{live['server_percent']:.1f}", f"{live['per_page_percent']:.2f}",
            f"{quiet['per_page_percent']:.2f}", f"{r['polling_per_page_percent']:.2f}",
            f"{live['answers_per_s']:.1f}", f"{r['ms_per_answer']:.2f}", _load(live), r["per_page"]["met"],
            r["polling_per_page"]["met"],
        ])  # fmt: skip
    v = result["fast_variant"]
    if v is not None:
        rows.append([
            f"{v['pages']} (1 at {FAST_POLL_S:g} s)", f"{POLL_S:g} / {FAST_POLL_S:g}",
            f"{v['server_percent']:.1f}", f"{v['per_page_percent']:.2f}", "-",
            f"{v['fast_page_percent']:.2f} (the 0.1 s page)",
            f"{v['answers_per_s']:.1f} ({v['first_page_answers_per_s']:.1f} to the 0.1 s page)",
            f"{v['ms_per_answer']:.2f}", _load(v),
            v["per_page_percent"] <= TARGET_PERCENT, v["fast_page_percent"] <= TARGET_PERCENT,
        ])  # fmt: skip
    headers = ["pages", "poll s", "server % of a core", "per page %", "quiet per page %"]
    headers += ["polling per page %", "answers/s", "ms per answer", "load (1 min)"]
    headers += [f"per page <= {TARGET_PERCENT:g} %", f"polling <= {TARGET_PERCENT:g} %"]
    return common.table(headers, rows)


def _load(window: dict) -> str:
    return f"{window['load_average'][0]:.2f}"


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--pages", default=None, help="numbers of pages, ascending (1,10,30; quick: 1,3)")
    p.add_argument("--window", type=float, default=None, help="seconds per window (30; quick: 5)")
    p.add_argument("--pace", default=PACE, choices=PACE_CHOICES[:-1], help="the runs' steps per second")
    args = common.parse_args(p)
    try:
        counts = [int(x) for x in (args.pages or ("1,3" if args.quick else "1,10,30")).split(",")]
    except ValueError:
        counts = []
    if not counts or counts != sorted(set(counts)) or counts[0] < 1:
        p.error(f"--pages: got {args.pages!r}; allowed: ascending page counts such as 1,10,30")
    seconds = args.window or (5.0 if args.quick else 30.0)
    result = measure(counts, seconds, args.pace)
    result |= {"pace": args.pace, "poll_s": POLL_S, "fast_poll_s": FAST_POLL_S, "window_s": seconds}
    result["target_percent"] = TARGET_PERCENT
    result["met"] = all(r["per_page"]["met"] for r in result["rows"])
    result["polling_met"] = all(r["polling_per_page"]["met"] for r in result["rows"])
    print(table(result))
    print(f"\nserver CPU over {seconds:g} s windows; runs at {args.pace} steps/s", end="; ")
    print(f"failed live requests: {result['failed_requests']}")
    common.emit("page_cost", result, args.quick)
    if result["failed_requests"]:
        print(f"page_cost: FAILED: {result['failed_requests']} live requests failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
