"""A strategy from outside fitcore on the page (a real Chromium): tests/solo_strategy.py, registered through
the `fitcore.strategies` entry point as an installed package's would be, draws its step with its own drawer
(tests/solo_drawer.js), which the page serves at /fitcore/static/drawers/solo.js and the browser imports the
first time a picture names it. Nothing outside tests/ names it.

Like tests/test_browser.py this test fails, it does not skip, without Chromium or Playwright.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.browser import chromium, streamlit_app
from tests.helpers import installed_site, require_browser, shadow_texts
from tests.test_browser import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
LINK = "strategy=solo&devices=cpu&epochs=40&data_size=64&batch_size=64&lr=0.5&pace=4"


@pytest.fixture(scope="module")
def solo_server(tmp_path_factory):
    """`streamlit run app.py` where an installed package declares the tests' strategies: a dist-info folder
    with their entry points on the server's PYTHONPATH, what `pip install` of such a package leaves."""
    require_browser()
    site = installed_site(tmp_path_factory.mktemp("site"))
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    try:
        with streamlit_app(log, env=env, timeout=90) as app:
            yield app.url
    except (RuntimeError, TimeoutError) as exc:  # exited, or not healthy in time: with its log
        pytest.fail(str(exc))


def test_an_installed_strategy_draws_its_step_with_its_own_drawer(solo_server):
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        asked = []
        page.on("request", lambda request: asked.append(request.url))
        try:
            page.goto(f"{solo_server}/?{LINK}")
            page.get_by_role("button", name="Start training").click(timeout=90_000)
            # the run's steps, drawn by its drawer: one device, its box says what it did, and the footer whose
            chips = page.locator(".fl-root svg text[data-chip='solo: the whole step on one device']")
            chips.first.wait_for(timeout=60_000)
            assert chips.count() == 1
            footer = page.locator(".fl-root svg text", has_text="solo's own drawer (tests/solo_drawer.js)")
            assert footer.count() == 1
            drawers = [url for url in asked if "/fitcore/static/drawers/" in url]
            assert drawers and all(url.endswith("/fitcore/static/drawers/solo.js") for url in drawers)
            assert len(drawers) == 1  # imported once, however many pictures named it
            page.screenshot(path=str(ARTIFACTS / "solo-own-drawer-1280x720.png"))
        finally:
            page.close()


def test_an_installed_ranked_strategy_draws_each_phase_with_its_own_drawer(solo_server):
    """tests/zero_strategy.py on two gloo ranks, the engine's spawned ranks: its drawer draws its phases, and
    the walk's pills are its own phases."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        try:
            page.goto(f"{solo_server}/?strategy=zero_ddp&devices=cpu&workers=2&epochs=200&pace=2")
            page.get_by_role("button", name="Start training").click(timeout=90_000)
            footer = page.locator(".fl-root svg text", has_text="ZeRO-1's own drawer (tests/zero_drawer.js)")
            footer.wait_for(timeout=90_000)  # the run's steps, drawn by its drawer
            # the optimizer's phase shows for about 80 ms of each step at 2 steps/s: looked for on every frame
            # (a locator's wait polls every 0.5 to 1 s, and once took 57 steps to land on it)
            chips = shadow_texts(".fl-root svg text[data-chip='steps its own, broadcasts']")
            steps = page.wait_for_function(chips, polling="raf", timeout=60_000).json_value()
            assert footer.count() == 1 and len(steps) == 2  # both ranks step the parameters they own
            pills = page.locator(".fl-pill").all_text_contents()
            assert [p.split(" ")[0] for p in pills] == ["load", "forward", "loss", "backward", "optimizer"]
            page.screenshot(path=str(ARTIFACTS / "zero-ddp-own-drawer-1280x720.png"))
        finally:
            page.close()
