"""The classroom in a real browser: the presenter's bigger picture on a projector's first screen, and the veil
over a paused step until its question is answered (the system Chromium, as tests/test_browser.py)."""

from __future__ import annotations

import time

import pytest

from fitcore.core.i18n import t
from tests.helpers import wait_for
from tests.test_browser import ARTIFACTS, inside, open_page, status, step_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PARTS = (("picture", ".fl-picture"), ("loss", ".fl-chart >> nth=0"), ("params", ".fl-chart >> nth=1"))
PRESENTER_ZOOM = {1080: 1.3, 720: 1.15}  # live.css: a short screen zooms less
# the least plot height (plotly's drag area: the plot less its axes' margins) read from the back row
PRESENTER_PLOT_PX = {1080: 200, 720: 180}


def overflow(page) -> dict:
    """How far the page and the step picture's SVG reach past their boxes, in px (0: no overflow)."""
    return page.evaluate(
        """() => {
            const root = document.documentElement;
            return {page: root.scrollWidth - root.clientWidth};
        }"""
    ) | page.locator(".fl-svg").evaluate(
        """(svg) => {
            const pic = svg.closest('.fl-picture').getBoundingClientRect();
            const box = svg.getBoundingClientRect();
            return {svg: Math.max(0, box.right - pic.right, pic.left - box.left),
                    zoom: parseFloat(getComputedStyle(svg).zoom), fill: box.width / pic.width};
        }"""
    )


def test_presenter_mode_fits_the_first_screen_at_1920_and_1280(server, context):
    page = open_page(context, server + "/?pace=20&presenter=1")
    page.get_by_role("button", name="Start training").click()
    # past step 100: the longest step line ("step 100 · epoch 100, batch 1") beside the phases
    wait_for(lambda: step_of(page)[0] >= 101, 30, interval=0.1, what="a hundred steps")
    for width, height in ((1920, 1080), (1280, 720)):
        page.set_viewport_size({"width": width, "height": height})
        time.sleep(0.8)  # the picture redraws at its new width
        boxes = {name: inside(page, sel) for name, sel in PARTS}
        assert all(b["inside"] for b in boxes.values()), (width, height, boxes)
        over = overflow(page)
        assert over["page"] <= 0 and over["svg"] <= 1, (width, height, over)
        # the picture is drawn narrower and zoomed: its text is bigger, and it still fills its box
        assert over["zoom"] == PRESENTER_ZOOM[height] and over["fill"] > 0.95, over
        # both charts tall enough to read; on the short screen the page's heading gave them its room
        plots = page.locator(".fl-plot .nsewdrag").evaluate_all(
            "(ds) => ds.map((d) => d.getBoundingClientRect().height)"
        )
        assert len(plots) == 2 and min(plots) >= PRESENTER_PLOT_PX[height], (width, height, plots)
        assert page.locator(".st-key-page_title").is_visible() == (height > 800)
        page.screenshot(path=str(ARTIFACTS / f"presenter-{width}x{height}.png"))
    page.get_by_role("button", name="Stop").click()
    wait_for(lambda: status(page).startswith("Stopped"), 15, interval=0.1, what="the run to stop")


def test_a_paused_step_is_veiled_until_its_question_is_answered(server, context):
    page = open_page(context, server + "/?pace=2&ask=1")
    page.get_by_role("button", name="Start training").click()
    wait_for(lambda: step_of(page)[0] >= 1, 30, interval=0.1, what="a first step")
    detail = page.locator(".fl-detail")
    detail.click()  # the step's timeline in the charts' place
    wait_for(lambda: page.locator(".fl-charts").is_hidden(), 5, what="the timeline in the charts' place")
    page.get_by_role("button", name="Pause").click()
    question = page.locator(".st-key-quiz")
    question.wait_for()
    veil = page.locator(".fl-veil")
    veil.wait_for()
    lines = veil.inner_text().splitlines()
    assert lines[-1] == "Answer the question below to see the step." and lines[0].startswith("Step ")
    assert page.locator(".fl-svg").evaluate("(svg) => getComputedStyle(svg).visibility") == "hidden"
    # the timeline is veiled with its step: the charts take their place back, and the button waits
    assert page.locator(".fl-charts").is_visible() and detail.is_hidden()
    page.screenshot(path=str(ARTIFACTS / "ask-before-showing.png"))
    question.get_by_role("button").first.click()
    veil.wait_for(state="hidden")
    assert page.locator(".fl-svg").evaluate("(svg) => getComputedStyle(svg).visibility") == "visible"
    back = lambda: page.locator(".fl-charts").is_hidden() and detail.is_visible()  # noqa: E731
    wait_for(back, 5, what="the timeline back in the charts' place")
    assert page.locator(".fl-gantt").is_visible()
    assert "Right answers in this browser: " in question.inner_text()
    page.screenshot(path=str(ARTIFACTS / "ask-answered.png"))
    page.get_by_role("button", name="Stop").click()


def test_the_teachers_tally_stays_on_the_first_screen_under_eight_ranks(server, browser):
    """TP on 8 ranks, the tallest boxes (five chips each), in Chinese at 1280x720: after Reveal the answer,
    its why and every choice's count are on the projector's first screen (the counts side by side, the tally
    over the picture's footer), where they once went below it after the first bar."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(60_000)
    try:
        weights = "5.2,9.6,-1,2.5,1,2,3,4"
        page = open_page(context, f"{server}/?strategy=tp&devices=cpu&workers=8&weights={weights}&pace=2"
                         "&epochs=300&ask=1&presenter=1&lang=zh", lang="zh")  # fmt: skip
        summary = page.locator("summary", has_text=t("classroom.builder", "zh")).first
        summary.scroll_into_view_if_needed()
        summary.click()
        page.get_by_role("button", name=t("classroom.room.open", "zh")).click()
        page.locator("h3").filter(has_text=t("classroom.room.code", "zh", code="")).wait_for()
        page.evaluate("window.scrollTo(0, 0)")
        page.get_by_role("button", name=t("page.start", "zh")).click()
        wait_for(lambda: step_of(page)[0] >= 2, 60, interval=0.1, what="two steps on eight ranks")
        page.get_by_role("button", name=t("page.pause", "zh")).click()
        page.locator(".fl-reveal").click()
        tally = page.locator(".fl-answer-tally")
        tally.wait_for()
        page.screenshot(path=str(ARTIFACTS / "tally-tp8-zh-1280x720.png"))
        boxes = [tally.bounding_box()] + [row.bounding_box() for row in tally.locator(".fl-count").all()]
        assert len(boxes) >= 3 and all(0 <= b["y"] and b["y"] + b["height"] <= 720 for b in boxes), boxes
        assert tally.locator(".fl-count-right").count() == 1  # the right choice, marked
        page.get_by_role("button", name=t("page.stop", "zh")).click()
    finally:
        context.close()
