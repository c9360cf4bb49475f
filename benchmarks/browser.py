"""The system Chromium and `streamlit run app.py` on a free loopback port: browser tests and benchmarks."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]  # the repository, where app.py is

CHROMIUM = "/usr/bin/chromium"  # Debian's package; Playwright's own download is never used
# headless on a closed network: without the background-networking flags Chromium's connections are refused
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator:
    """The system Chromium through Playwright, closed when the block ends."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_room(teacher, timeout: float = 10.0) -> str:
    """On a teacher's page (English): open the sidebar's Teacher's link and press "Open a room for the class";
    the room's code, once the page's link holds it."""
    summary = teacher.locator("summary", has_text="Teacher's link").first
    summary.scroll_into_view_if_needed()
    summary.click()
    teacher.get_by_role("button", name="Open a room for the class").click()
    deadline = time.monotonic() + timeout
    while (found := re.search(r"room=([A-Za-z0-9_-]{22})", teacher.content())) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no room's code on the teacher's page in {timeout:g} s")
        time.sleep(0.05)
    return found[1]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    """Whether the Streamlit server at url answers its health endpoint with ok."""
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as response:
            return response.read().strip() == b"ok"
    except OSError:
        return False


@dataclass(frozen=True)
class App:
    """A running `streamlit run app.py`."""

    url: str  # "http://127.0.0.1:<port>"
    pid: int
    log: Path  # its stdout and stderr
    started: float  # time.perf_counter() just before the command started
    healthy_s: float  # seconds from then until /_stcore/health answered ok


@contextmanager
def streamlit_app(
    log: Path, env: dict[str, str] | None = None, timeout: float = 120.0, port: int | None = None,
    address: str = "127.0.0.1",
) -> Iterator[App]:
    """`streamlit run app.py` on a free loopback port (or `port`: a server restarted where it was), its
    output in `log`, `env` added to this process's. `address` is where it listens ("0.0.0.0": every
    interface, as for a class); it is always reached on loopback.

    Yields once the server is healthy; terminates it (kills it after 10 s) on the way out. Raises
    RuntimeError if it exits first and TimeoutError if it is not healthy within `timeout` s, both with the
    end of its log.
    """
    port = port or free_port()
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.address", address, "--server.headless", "true"]
    command += ["--server.fileWatcherType", "none"]
    started = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while not healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.perf_counter() - started > timeout:
                raise TimeoutError(
                    f"streamlit was not healthy after {timeout:g} s:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.05)
        yield App(url, proc.pid, log, started, time.perf_counter() - started)
    finally:
        end(proc, 10)


def end(proc: subprocess.Popen, grace_s: float) -> None:
    """Terminate a server; kill it if it has not exited after `grace_s` seconds."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
