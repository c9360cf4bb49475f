"""What several test modules share: a clock that moves only when told to, a bounded wait for a condition,
and a watch on a paused Control that says when it has held its run through some polls."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"  # the browser tests' screenshots


class FakeClock:
    """A monotonic clock for Control, Run and RunPool: `clock()` reads it, `clock.advance(s)` moves it.

    Safe to read and move from many threads (the pool's reaper reads it while sessions move it).
    """

    def __init__(self, start: float = 1000.0):
        self._now, self._lock = start, threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def wait_for(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.01, what: str = "condition"
) -> T:
    """Call predicate() every `interval` seconds until it returns something true, and return that.

    `timeout` is a generous bound against hanging, not a timing assertion: past it the test fails.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)


def shadow_texts(selector: str) -> str:
    """A page function: the texts of the elements matching `selector` inside any shadow root (the live view
    sits in its component's), or null while there are none. With page.wait_for_function(..., polling="raf")
    it sees what a phase shows for a frame or two, which a locator's wait (polled every 0.5 to 1 s) misses."""
    return f"""() => {{
  const found = [...document.querySelectorAll("*")].filter((e) => e.shadowRoot).flatMap((e) =>
    [...e.shadowRoot.querySelectorAll({json.dumps(selector)})]);
  return found.length ? found.map((e) => e.textContent) : null;
}}"""


class _CountingEvent(threading.Event):
    """A threading.Event that counts its timed waits that ran out, and lets a test wait for more of them."""

    def __init__(self, is_set: bool):
        super().__init__()
        if is_set:
            self.set()
        self._timeouts = 0
        self._counted = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        flag = super().wait(timeout)
        if not flag:
            with self._counted:
                self._timeouts += 1
                self._counted.notify_all()
        return flag

    def wait_timeouts(self, n: int, timeout: float) -> bool:
        with self._counted:
            target = self._timeouts + n
            return self._counted.wait_for(lambda: self._timeouts >= target, timeout)


class PauseWatch:
    """Says when a paused Control has held its run through `n` more of its polls (one every 0.05 s).

    A paused Control.wait loops on `_running.wait(0.05)`, and only there do those waits run out; a
    trainer (or ddp's granter) calls Control.wait before each step, so while it polls every step it was
    allowed has already been reported. Watch before pausing: `watch = PauseWatch(run.control)`.
    """

    def __init__(self, control):
        self._event = _CountingEvent(control._running.is_set())
        control._running = self._event  # before pause(): nothing else sets or clears it meanwhile

    def held(self, n: int = 2, timeout: float = 30.0) -> bool:
        """Block until the paused run has gone through n more polls without a step; False past timeout."""
        return self._event.wait_timeouts(n, timeout)


def installed_site(folder: Path) -> Path:
    """A folder that, on a process's PYTHONPATH, holds what `pip install` of a package declaring the tests'
    strategies would leave: its dist-info and the `fitcore.strategies` entry points (tests/solo_strategy.py's
    one-device strategy, tests/zero_strategy.py's ranked one), which fitcore registers when it is imported."""
    info = folder / "fitcore_tests_strategies-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fitcore-tests-strategies\nVersion: 0\n")
    points = "solo = tests.solo_strategy:STRATEGY\nzero_ddp = tests.zero_strategy:STRATEGY\n"
    (info / "entry_points.txt").write_text("[fitcore.strategies]\n" + points)
    return folder


def require_browser() -> None:
    """Fail, not skip, without Chromium or Playwright (FITCORE_SKIP_BROWSER=1 leaves the browser tests out on
    purpose)."""
    from benchmarks.browser import CHROMIUM

    if os.environ.get("FITCORE_SKIP_BROWSER") == "1":
        pytest.skip("FITCORE_SKIP_BROWSER=1: browser tests left out on purpose")
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} not found: install Chromium (apt-get install chromium) or set FITCORE_SKIP_BROWSER=1"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail(
            "playwright is not installed: pip install -r requirements-dev.txt, or set FITCORE_SKIP_BROWSER=1"
        )
