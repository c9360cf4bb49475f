"""Generic fixtures: a clock that moves only when told to; a check that no fitcore thread outlives a test;
the Hypothesis profile of the property tests (tests/test_fuzz.py); the browser tests' page server (one a
worker), Chromium (one a module) and contexts.

The clock and `wait_for` live in tests/helpers.py, which test modules import (a conftest is not importable
by name in every pytest import mode).
"""

from __future__ import annotations

import contextlib
import threading

import pytest
from hypothesis import settings

from fitcore.core import i18n
from tests.helpers import ARTIFACTS, FakeClock, require_browser

# The same examples on every run and every machine, and no example database written into the tree: a
# property test that fails in CI fails the same way here. Each test bounds its own number of examples.
settings.register_profile("fitcore", database=None, derandomize=True, deadline=None)
settings.load_profile("fitcore")


@pytest.fixture(autouse=True)
def english_unless_asked(monkeypatch):
    """The tests read English unless they ask for Chinese (--lang zh, LANG=zh_CN in their own env): on a
    machine whose locale is Chinese, the command line would otherwise answer in Chinese."""
    if i18n.from_env() != "en":
        monkeypatch.setenv("LC_ALL", "C.UTF-8")


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def no_leftover_threads():
    """Fail the test if a `fitcore-` thread it started is still alive 10 s after it ends."""
    before = set(threading.enumerate())
    yield
    leftover = [t for t in threading.enumerate() if t not in before and t.name.startswith("fitcore-")]
    for t in leftover:
        t.join(10)
    alive = [t.name for t in leftover if t.is_alive()]
    assert not alive, f"threads still running after the test: {alive}"


# How the two workers share the suite (--dist loadfile): each takes whole files, so that a module's server,
# browser or namespaces stay in one process, in this order: the longest first, as a long one left for last
# would run alone while the other worker idles.
FIRST = ("test_load.py", "test_browser_start.py", "test_multinode.py", "test_browser_lecture.py",
         "test_browser_restart.py", "test_check.py", "test_page_state.py")  # fmt: skip


def pytest_collection_modifyitems(items):
    """Long files first (FIRST, then every file with slow tests), each file's tests in their own order."""
    slow: dict[str, bool] = {}
    for item in items:
        slow[item.path.name] = slow.get(item.path.name, False) or item.get_closest_marker("slow") is not None

    def weight(item) -> tuple[int, int]:
        if item.path.name in FIRST:
            return (0, FIRST.index(item.path.name))
        return (1, 0) if slow[item.path.name] else (2, 0)

    items.sort(key=weight)  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def fitcore_wheel(tmp_path_factory):
    """This checkout's wheel, built once per session (benchmarks/wheel.py: about a second)."""
    from benchmarks.wheel import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def fitcore_venv(fitcore_wheel, tmp_path_factory):
    """A venv with the wheel installed and this interpreter's torch visible: its python."""
    from benchmarks.wheel import install_venv

    return install_venv(fitcore_wheel, tmp_path_factory.mktemp("venv") / "v")


# The browser tests' page: one `streamlit run app.py` for every browser test a worker runs (a server started
# for each file took about 4 s of a CI core each time, its first page another second). Each test still opens
# contexts of its own, so each is another browser to the server, with its own cookies and its own runs; a test
# that needs a server set up otherwise (a time limit, a restart, the network's address) starts its own. The
# Chromium is a module's: Playwright's sync API holds an event loop in this thread while a browser is open,
# which a later module's asyncio.run() (Starlette's test client) and another browser of its own may not meet.
@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """`streamlit run app.py` on a free loopback port; stopped when the worker's tests are done."""
    from benchmarks.browser import streamlit_app

    require_browser()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with contextlib.ExitStack() as stack:
        try:
            app = stack.enter_context(streamlit_app(log, timeout=90))
        except (RuntimeError, TimeoutError) as exc:  # exited, or not healthy in time: with its log
            pytest.fail(str(exc))
        yield app.url


@pytest.fixture(scope="module")
def browser(server):
    from benchmarks.browser import chromium

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        yield browser


@pytest.fixture
def context(browser):
    """A browser context: its own cookies, as another browser would have."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(30_000)
    try:
        yield context
    finally:
        context.close()
