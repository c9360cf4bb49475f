"""The live page across a server restart, in a real browser (Playwright, the system Chromium): the page says
once that the run is gone, offers Start with the same settings, and nothing else can act.

Like tests/test_browser.py this test fails, it does not skip, without Chromium or Playwright; set
FITCORE_SKIP_BROWSER=1 to leave it out on purpose.
"""

from __future__ import annotations

import pytest

from benchmarks.browser import chromium, free_port, streamlit_app
from fitcore.core.i18n import t
from tests.helpers import require_browser, wait_for
from tests.test_browser import ARTIFACTS, open_page, status, step_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def enabled(page, key: str) -> bool:
    return page.get_by_role("button", name=t(key, "en"), exact=True).is_enabled()


def test_a_restarted_server_says_once_the_run_is_gone_and_offers_start_again(tmp_path):
    require_browser()
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        context.set_default_timeout(30_000)
        with streamlit_app(tmp_path / "first.log", timeout=90, port=port) as app:
            page = open_page(context, app.url + "/?epochs=10000&pace=20")
            page.get_by_role("button", name=t("page.start", "en")).click()
            wait_for(lambda: step_of(page)[0] >= 2, 20, what="the run to take two steps")
            assert [c["value"] for c in context.cookies() if c["name"] == "fitcore_run"] == ["run-1"]
        # the server is gone with its run; the page stays open, and a new server starts on the same port
        with streamlit_app(tmp_path / "second.log", timeout=90, port=port):
            page.get_by_text(t("page.run_gone", "en")).wait_for(timeout=20_000)
            page.screenshot(path=str(ARTIFACTS / "restarted-1280x720.png"))
            assert page.locator("[data-testid=stAlert]").count() == 1  # said once
            assert status(page) == t("view.status.ready", "en", total=10_000)
            buttons = [enabled(page, k) for k in ("page.start", "page.pause", "page.stop")]
            assert buttons == [True, False, False]
            page.get_by_role("button", name=t("page.start", "en")).click()
            wait_for(lambda: step_of(page)[0] >= 1, 20, what="the same settings to run again")
            assert step_of(page)[1] == 10_000 and page.locator("[data-testid=stAlert]").count() == 0
            page.get_by_role("button", name=t("page.stop", "en"), exact=True).click()
