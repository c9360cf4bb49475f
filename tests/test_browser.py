"""The live page in a real browser: `streamlit run app.py` driven by Playwright through the system Chromium.

Without /usr/bin/chromium or Playwright these tests fail, they do not skip; set FITCORE_SKIP_BROWSER=1 to
leave them out on purpose (tests/helpers.py's `require_browser`). The server (one a worker), the browser (one
a module) and a test's context are tests/conftest.py's fixtures. Screenshots go to artifacts/
(docs/screenshot.png is taken from there).

The live view is a browser component in a shadow root; Playwright's CSS locators reach into it.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest

from fitcore.core.i18n import t
from tests.helpers import ARTIFACTS, wait_for

# "step 3 / 200", "步数 3 / 200": the status line in either language
STEP = re.compile(r"(?:step|步数) (\d+) / (\d+)")
LIVE_LATENCY_MS = 500  # a step reaches the page within this long (issue: 0.5 s)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def open_page(context, url: str, lang: str = "en"):
    page = context.new_page()
    page.goto(url)
    page.get_by_role("button", name=t("page.start", lang)).wait_for(timeout=90_000)  # the first imports torch
    page.locator(".fl-status-text").wait_for()
    return page


def status(page) -> str:
    return page.locator(".fl-status-text").inner_text()


def step_of(page) -> tuple[int, int]:
    match = STEP.search(status(page))
    assert match, status(page)
    return int(match.group(1)), int(match.group(2))


def inside(page, selector: str) -> dict:
    """The element's box, and whether it lies wholly inside the viewport."""
    box = page.locator(selector).first.bounding_box()
    size = page.viewport_size
    assert box is not None, selector
    box["inside"] = (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= size["width"]
        and box["y"] + box["height"] <= size["height"]
    )
    return box


# The sidebar's words as drawn: every element holding text of its own whose box, or a box around it that
# clips (overflow, or an ellipsis), is narrower than what it holds ("Overlay my earli…").
CUT_IN_SIDEBAR = """() => {
  const side = document.querySelector("[data-testid=stSidebar]");
  const cut = [];
  for (const e of side.querySelectorAll("*")) {
    if (![...e.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim())) continue;
    const box = e.getBoundingClientRect();
    if (!box.width || !box.height) continue;
    for (let a = e; a && a !== side; a = a.parentElement) {
      const style = getComputedStyle(a);
      const clips = style.overflowX !== "visible" || style.textOverflow === "ellipsis";
      if (clips && a.scrollWidth > a.clientWidth + 1) {
        cut.push(`${e.textContent.trim().slice(0, 60)} (${a.scrollWidth} px in ${a.clientWidth})`);
        break;
      }
    }
  }
  return cut;
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_one_projector_screen_holds_the_step_the_loss_and_the_parameters(server, context, lang):
    page = open_page(context, server + f"/?pace=20&lang={lang}", lang)
    assert step_of(page) == (0, 200)  # "Ready · step 0 / 200"
    assert status(page) == t("view.status.ready", lang, total=200)
    sidebar = page.locator("[data-testid=stSidebar]").inner_text()
    for key in ("page.preset", "page.batch_size", "page.strategy", "page.devices", "page.charts"):
        assert t(key, lang) in sidebar, key
    assert page.evaluate(CUT_IN_SIDEBAR) == [], lang  # at 1280x720 no label in the sidebar is cut
    page.get_by_role("button", name=t("page.start", lang)).click()
    wait_for(lambda: step_of(page)[0] >= 20, 30, interval=0.1, what="twenty steps")
    for width, height in ((1280, 720), (1400, 900)):
        page.set_viewport_size({"width": width, "height": height})
        time.sleep(0.6)  # the picture redraws at its new width
        boxes = {name: inside(page, sel) for name, sel in (
            ("picture", ".fl-picture"), ("loss", ".fl-chart >> nth=0"), ("params", ".fl-chart >> nth=1"),
        )}  # fmt: skip
        assert all(b["inside"] for b in boxes.values()), (width, height, boxes)
        suffix = "" if lang == "en" else f"-{lang}"
        page.screenshot(path=str(ARTIFACTS / f"screenshot-{width}x{height}{suffix}.png"))
        # the buttons and the pace stay on one row above the picture, in either language
        buttons = [inside(page, f"[data-testid=stButton]:has-text('{t(k, lang)}')") for k in (
            "page.start", "page.pause", "page.step", "page.stop", "page.reset")]  # fmt: skip
        assert all(b["inside"] for b in buttons), buttons
        assert len({round(b["y"]) for b in buttons}) == 1, buttons
    # the sidebar collapsed, at the projector's size: still one screen
    page.set_viewport_size({"width": 1280, "height": 720})
    page.locator("[data-testid=stSidebar]").hover()
    page.get_by_label("Collapse sidebar").click(force=True)  # shown on hover only
    time.sleep(0.8)
    boxes = {name: inside(page, sel) for name, sel in (
        ("picture", ".fl-picture"), ("loss", ".fl-chart >> nth=0"), ("params", ".fl-chart >> nth=1"),
    )}  # fmt: skip
    assert all(b["inside"] for b in boxes.values()), ("sidebar collapsed", boxes)
    page.screenshot(path=str(ARTIFACTS / f"screenshot-1280x720-collapsed{suffix}.png"))
    # the picture names the phases and its devices; the timeline measured them (the API names stay English
    # in Chinese; the live view's other words are its own catalog's, checked in English here)
    text = page.locator(".fl-picture").inner_text()
    for word in ("scatter", "replicate", "parallel_apply", "gather"):
        assert word in text
    if lang == "en":
        for word in ("loss", "backward", "reduce", "optimizer"):
            assert word in text
        assert "measured" in page.locator(".fl-timeline").inner_text()
    assert "virtual:0" in page.locator(".fl-svg").text_content()
    # every step reached the page within half a second of the step (the page's own figures)
    live = page.evaluate("window.fitcoreLive")
    assert live["updates"] >= 3, live  # one a poll (0.4 s) that brought new steps
    assert live["maxLatencyMs"] < LIVE_LATENCY_MS, live
    page.get_by_role("button", name=t("page.stop", lang)).click()
    stopped = (t("view.status.stopped", "en"), t("view.status.stopped", lang))  # a poll without lang: English
    wait_for(lambda: status(page).startswith(stopped), 15, interval=0.1, what="the run to stop")


CHART_MIN, CHART_H = 130, 180  # frontend/charts.js: the plots' floor and their height on a screen with room
BELOW_PLOTS = 7  # live.css: the live view's padding and border under its charts


def plots(page) -> list[dict]:
    """Each plot's height and bottom edge on the screen, and the lines its legend takes more than one."""
    return page.locator(".fl-plot").evaluate_all(
        """(ps) => ps.map((p) => ({
            height: Math.round(p.getBoundingClientRect().height), bottom: p.getBoundingClientRect().bottom,
            legend: p.parentElement.querySelector('.fl-chart-head').offsetHeight - 22}))"""
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_eight_devices_keep_the_charts_on_the_first_screen(server, context, lang):
    # DataParallel on 8 devices draws a taller picture (device 0's box wears four rows of chips in Chinese):
    # the plots give up what it takes, down to their floor, and take it back on a taller screen
    page = open_page(context, server + f"/?pace=20&devices=virtual:8&lang={lang}", lang)
    page.get_by_role("button", name=t("page.start", lang)).click()
    wait_for(lambda: step_of(page)[0] >= 10, 30, interval=0.1, what="ten steps")
    page.get_by_role("button", name=t("page.pause", lang)).click()
    wait_for(lambda: page.get_by_role("button", name=t("page.resume", lang)).count() == 1, 10, what="paused")
    for _ in range(6):  # to the reduce, where device 0 wears the most chips
        page.locator("button.fl-btn", has_text="▶").first.click()
    time.sleep(0.6)
    boxes = {name: inside(page, sel) for name, sel in (
        ("picture", ".fl-picture"), ("loss", ".fl-chart >> nth=0"), ("params", ".fl-chart >> nth=1"),
    )}  # fmt: skip
    assert all(b["inside"] for b in boxes.values()), (lang, boxes)
    # torch's functions keep their names on the pills, each with the glossary's word where the page's language
    # has another ("scatter 分发"), on one line
    torch_names = ["scatter", "replicate", "parallel_apply", "gather", "reduce"]
    pills = page.locator(".fl-pill").all_text_contents()
    glossed = [f"{n}{t(f'glossary.{n}', lang)}" if lang == "zh" else n for n in torch_names]
    assert [p for p in pills if p.startswith(tuple(torch_names))] == glossed, pills
    tops = page.locator(".fl-pill").evaluate_all(
        "(ps) => ps.map((p) => Math.round(p.getBoundingClientRect().top))"
    )
    assert len(set(tops)) == 1, tops
    short = plots(page)
    height = short[0]["height"]
    assert {p["height"] for p in short} == {height}, short
    assert CHART_MIN <= height < CHART_H - short[0]["legend"], short
    # the plots end at the live view's bottom edge on the first screen, or they stand at their floor
    assert height == CHART_MIN or 720 - BELOW_PLOTS - 1 <= short[0]["bottom"] <= 720 - BELOW_PLOTS, short
    page.screenshot(path=str(ARTIFACTS / f"dataparallel-8-1280x720-{lang}.png"))
    # the step's timeline and bytes, below the fold here, take the charts' room at a press: every rank's row,
    # the time axis and the bytes' total on the first screen; a second press brings the charts back
    detail = page.locator(".fl-detail")
    assert detail.inner_text() == t("live.detail.step", lang)
    detail.click()
    wait_for(lambda: page.locator(".fl-charts").is_hidden(), 5, what="the charts' room given to the timeline")
    time.sleep(0.3)
    shown = {name: inside(page, sel) for name, sel in (
        ("picture", ".fl-picture"), ("timeline", ".fl-gantt"), ("bytes", ".fl-bytes"),
    )}  # fmt: skip
    page.screenshot(path=str(ARTIFACTS / f"dataparallel-8-1280x720-{lang}-timeline.png"))
    assert all(b["inside"] for b in shown.values()), (lang, shown)
    rows = page.locator(".fl-gantt-svg text").all_text_contents()
    assert [r for r in rows if r.startswith("virtual:")] == [f"virtual:{i}" for i in range(8)], rows
    assert page.locator(".fl-bytes-total").first.is_visible()
    detail.click()
    assert detail.inner_text() == t("live.detail.step", lang)
    wait_for(lambda: page.locator(".fl-plot .main-svg").count() >= 2, 5, what="the charts drawn again")
    again = {name: inside(page, sel) for name, sel in (
        ("loss", ".fl-chart >> nth=0"), ("params", ".fl-chart >> nth=1"),
    )}  # fmt: skip
    assert all(b["inside"] for b in again.values()), (lang, again)
    assert plots(page)[0]["height"] == height, plots(page)
    # only the screen's height changes (the page's width and the run stay): the plots get their room back,
    # all but what their legend's second line takes
    page.set_viewport_size({"width": 1280, "height": 900})
    wait_for(lambda: plots(page)[0]["height"] > height, 5, interval=0.1, what="the plots' room")
    tall = plots(page)
    assert [p["height"] for p in tall] == [CHART_H - p["legend"] for p in tall], tall
    assert all(p["bottom"] < 900 - BELOW_PLOTS for p in tall), tall



def test_eight_devices_each_labelled_and_idle_ones_shown(server, context):
    page = open_page(context, server + "/?data_size=40&batch_size=5&epochs=25&devices=virtual:8&pace=5")
    page.get_by_role("button", name="Start training").click()
    wait_for(lambda: step_of(page)[0] >= 2, 30, interval=0.1, what="two steps")
    picture = page.locator(".fl-svg").text_content()
    for i in range(8):
        assert f"virtual:{i}" in picture, picture
    assert picture.count("no rows left") == 3  # 5 rows on 8 devices: 5 chunks of 1, 3 devices idle
    box = inside(page, ".fl-picture")
    assert box["inside"], box
    page.screenshot(path=str(ARTIFACTS / "browser-eight-devices.png"))
    page.get_by_role("button", name="Stop").click()


def live_status(server: str, owner: str) -> int:
    """The status of GET /fitcore/live for the owner's latest run (200, or 404 for none)."""
    request = urllib.request.Request(
        server + "/fitcore/live?since=0", headers={"Cookie": f"fitcore_owner={owner}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            json.loads(response.read())
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_reload_finds_the_run_again_and_another_browser_cannot(server, browser, context):
    page = open_page(context, server + "/?pace=5")
    page.get_by_role("button", name="Start training").click()
    wait_for(lambda: step_of(page)[0] >= 3, 30, interval=0.1, what="three steps")
    owner = next(c["value"] for c in context.cookies() if c["name"] == "fitcore_owner")
    run_label = page.locator(".fl-chart >> nth=0").inner_text()

    page.reload()
    page.locator(".fl-status-text").wait_for()
    wait_for(lambda: status(page).startswith("Running"), 30, interval=0.1, what="the same run, running")
    before = step_of(page)[0]
    assert before >= 3
    assert "Run 1 · DataParallel · virtual:2" in run_label
    assert "Run 1 · DataParallel · virtual:2" in page.locator(".fl-chart >> nth=0").inner_text()
    page.get_by_role("button", name="Pause").click()
    wait_for(lambda: status(page).startswith("Paused"), 15, interval=0.1, what="the run to pause")
    page.get_by_role("button", name="Resume").wait_for()

    # another browser (no cookie) starts afresh and cannot reach the run, even with the address
    other = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        stranger = open_page(other, page.url)
        assert step_of(stranger) == (0, 200)
        assert status(stranger).startswith("Ready")
        stranger_owner = next(c["value"] for c in other.cookies() if c["name"] == "fitcore_owner")
        assert stranger_owner != owner
        assert live_status(server, stranger_owner) == 404
        assert live_status(server, owner) == 200
    finally:
        other.close()
    page.get_by_role("button", name="Stop").click()
    wait_for(lambda: status(page).startswith("Stopped"), 15, interval=0.1, what="the run to stop")


def test_ddp_shards_before_a_run(server, context):
    """The shard grid is drawn with the live view's plotly.js: the page loads one plotly.js, not also
    Streamlit's (st.plotly_chart's 4.7 MB chunk, which held a fresh DDP page's Start 3.7 s longer)."""
    scripts: list[str] = []
    context.on("request", lambda r: scripts.append(r.url) if "lotly" in r.url else None)
    page = open_page(context, server)
    page.get_by_text("DistributedDataParallel", exact=True).first.click()
    # the heading (hidden on a short screen, which gives its room to the live view) names the strategy
    page.get_by_text("How DistributedDataParallel shards the data").wait_for(state="attached")
    shards = page.get_by_test_id("stTable").filter(has_text="Padded (repeated)")
    shards.wait_for()
    text = shards.inner_text()
    assert "rank 0 · cpu · gloo" in text and "rank 1 · cpu · gloo" in text
    assert text.count("… (88 more)") == 2 and "rank 2" not in text  # 100 rows each: 12 listed, 88 more
    page.get_by_text("rank 1 (100 rows)").first.wait_for()  # the shard grid's strip for rank 1
    assert [url.split("/")[-1].split("?")[0] for url in scripts] == ["plotly.min.js"], scripts


# Records, in the page, when the next press happens: the moment pointerdown reaches the document
PRESS_AT = """() => {
  window.fitcorePressedAt = null;
  document.addEventListener("pointerdown", () => { window.fitcorePressedAt = Date.now() / 1000; },
                            { capture: true, once: true });
}"""


def test_pause_holds_within_a_step_of_the_click_and_the_picture_shows_that_step(server, context):
    """At 20 steps/s a teacher's Pause stops the run within one step of the click (the live view sends the
    press at once, POST /fitcore/pause), and the picture, the status and the run agree on the step."""
    page = open_page(context, server + "/?pace=20&epochs=2000")
    page.get_by_role("button", name="Start training").click()
    wait_for(lambda: step_of(page)[0] >= 30, 30, interval=0.05, what="thirty steps")
    pause = page.get_by_role("button", name="Pause")
    pause.hover()
    # the press's moment, taken in the page as the live view hears it (pointerdown, captured on the document,
    # where the view sends the pause): Playwright's own checks before its click are not the teacher's
    page.evaluate(PRESS_AT)
    pause.click()
    clicked = page.evaluate("() => window.fitcorePressedAt")  # the server's clock too: one machine
    wait_for(lambda: status(page).startswith("Paused"), 15, interval=0.05, what="the run to pause")
    time.sleep(0.6)
    paused = step_of(page)[0]
    pic = page.locator(".fl-root").evaluate("(root) => root.parentNode.fitcoreLiveState.picture")
    # the last step began within one step (50 ms) of the press, and the press's round trip
    assert pic["step"] == paused and pic["time"] - clicked <= 0.05 + 0.1, (pic["time"] - clicked, paused)
    title = page.locator(".fl-step-info").inner_text()
    assert f"step {paused} " in title + " ", title  # the picture shows the step the run stopped at
