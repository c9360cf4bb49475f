"""The live page in a real browser: `streamlit run app.py` driven by Playwright through the system Chromium.

Without /usr/bin/chromium or Playwright these tests fail, they do not skip; set FITCORE_SKIP_BROWSER=1 to
leave them out on purpose. Screenshots go to artifacts/.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import pytest

from benchmarks.browser import CHROMIUM, CHROMIUM_ARGS, streamlit_app
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
STEP = re.compile(r"step (\d+) / (\d+)")
# True while the loss chart shows a drawn line: some plotly chart under the `loss_chart` key (one, or a stack
# of them) is visible and has a path with points in it
LOSS_LINE_SHOWN_JS = """() => {
    const plots = [...document.querySelectorAll('[class*="st-key-loss_chart"] .js-plotly-plot')];
    return plots.some(plot => plot.getBoundingClientRect().height > 100
        && [...plot.querySelectorAll('.scatterlayer path.js-line')].some(line =>
            (line.getAttribute('d') || '').length > 20 && getComputedStyle(line).visibility === 'visible'));
}"""

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _require_browser() -> None:
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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run app.py` on a free loopback port; stopped when the module's tests are done."""
    _require_browser()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with contextlib.ExitStack() as stack:
        try:
            app = stack.enter_context(streamlit_app(log, timeout=90))
        except (RuntimeError, TimeoutError) as exc:  # exited, or not healthy in time: with its log
            pytest.fail(str(exc))
        yield app.url


@pytest.fixture
def page(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


def _step(page) -> tuple[int, int]:
    """The first `step n / total` on the page: the status line."""
    match = STEP.search(page.inner_text("body"))
    assert match, "no `step n / total` on the page"
    return int(match.group(1)), int(match.group(2))


def test_a_run_updates_by_itself_splits_67_67_66_and_stops(server, page):
    page.goto(server + "/?pace=5")  # 5 steps/s: the run is still going when the test presses Stop
    start = page.get_by_role("button", name="Start training")
    start.wait_for(timeout=90_000)  # the first session imports torch, torch.distributed and plotly
    assert _step(page) == (0, 200)  # idle: "Ready · step 0 / 200"

    # the Uneven split preset: 200 rows on 3 virtual devices
    page.get_by_test_id("stSelectbox").filter(has_text="Preset").click()
    page.get_by_role("option", name="Uneven split").click()
    page.get_by_text("Uneven split.", exact=False).first.wait_for()
    page.get_by_text("virtual:2: 66 rows (134–199)").first.wait_for()  # the planned split, before any run

    start.click()
    # the live panels refresh on their own: two readings, no click in between
    first, total = wait_for(
        lambda: _step(page)[0] >= 2 and _step(page), 20, interval=0.2, what="the first steps"
    )
    assert total == 200
    page.locator("[data-testid=stPlotlyChart]").first.wait_for()
    wait_for(lambda: page.evaluate(LOSS_LINE_SHOWN_JS), 10, interval=0.2, what="the loss line to be drawn")
    page.screenshot(path=str(ARTIFACTS / "browser-running.png"))
    second, _ = wait_for(
        lambda: _step(page)[0] > first and _step(page), 10, interval=0.2, what="the step count to grow"
    )
    assert first < second < 200
    # once the run is under way the chart updates without going blank: sampled between and across
    # refreshes (2.5 a second), the line is always on screen
    blank = []
    for i in range(30):
        if not page.evaluate(LOSS_LINE_SHOWN_JS):
            blank.append(i)
        time.sleep(0.07)
    assert blank == [], f"the loss chart was blank at {len(blank)} of 30 samples over about 3 s"

    # the split, in the picture and in the table of shapes
    for block in ("virtual:0: 67 rows (0–66)", "virtual:1: 67 rows (67–133)", "virtual:2: 66 rows (134–199)"):
        page.get_by_text(block).first.wait_for()  # .first: a chart may be drawn as a stack of two
    shapes = page.get_by_test_id("stTable").filter(has_text="Outside (gathered)").inner_text()
    for text in ("virtual:0 (emulated on CPU)", "[67, 2]", "[66, 2]", "[200, 2]", "[66, 1]"):
        assert text in shapes

    page.get_by_role("button", name="Stop").click()
    stopped = wait_for(
        lambda: re.search(r"Stopped · .*step (\d+) / 200 · stopped by the user", page.inner_text("body")),
        15,
        interval=0.2,
        what="the status to say stopped",
    )
    at_stop = int(stopped.group(1))
    assert second <= at_stop < 200
    page.get_by_role("button", name="Start training").wait_for()
    assert page.get_by_role("button", name="Stop").is_disabled()
    page.screenshot(path=str(ARTIFACTS / "browser-stopped.png"))
    # the page offers no event for "nothing changed": watch it for 1 s, in which the live panels' 0.4 s
    # timer (app.REFRESH_SECONDS) would have redrawn them twice had it stayed on
    time.sleep(1.0)
    assert _step(page) == (at_stop, 200)  # nothing moves once the run has ended
    page.set_viewport_size({"width": 1280, "height": 2000})
    page.screenshot(path=str(ARTIFACTS / "browser-stopped-full.png"))

    # DistributedDataParallel, before any run: each rank's planned shard of the 200 rows
    page.get_by_role("button", name="Reset", exact=True).click()  # not plotly's "Reset axes"
    page.get_by_text("DistributedDataParallel", exact=True).first.click()
    page.get_by_text("How DistributedDataParallel shards the data").wait_for()
    shards = page.get_by_test_id("stTable").filter(has_text="Padded (repeated)")
    shards.wait_for()
    text = shards.inner_text()
    assert "rank 0 · cpu · gloo" in text and "rank 1 · cpu · gloo" in text
    assert text.count("… (88 more)") == 2 and "rank 2" not in text  # 100 rows each: 12 listed, 88 more
    page.get_by_text("rank 1 (100 rows)").first.wait_for()  # the shard picture's strip for rank 1
