"""A pipeline on the page (a real Chromium): the link `strategy=pp` runs torch's pipeline schedule on two gloo
ranks, and the picture is the schedule as it ran: a row per rank, a block per microbatch and pass, the bubble
measured beside its formula, each rank's held microbatches, on the projector's first screen; the phase walk
steps through the schedule's ticks; in English and in Chinese.

Like tests/test_browser.py this test fails, it does not skip, without Chromium or Playwright.
"""

from __future__ import annotations

import re
import time

import pytest

from benchmarks.browser import open_room
from fitcore.core.i18n import t
from fitcore.strategies.pp import layout
from tests.helpers import wait_for
from tests.test_browser_room import FOLLOW, follow_lag, new_context, step_shown, watch_steps, within

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LINK = "strategy=pp&devices=cpu&workers=2&layers=4&microbatches=4&schedule=1f1b&block_ms=2&pace=2"
WORDS = {
    "en": {"start": "Start training", "bubble": r"bubble (\d+)% measured · 20% by \(p−1\)/\(m\+p−1\)",
           "tick": "Tick 3: stage 1 B0", "held": ("holds ≤ 2 mb", "holds ≤ 1 mb"),
           "planned": "bubble not measured yet · 20% by (p−1)/(m+p−1)"},
    "zh": {"start": "开始训练", "bubble": r"气泡：实测 (\d+)% · 按 \(p−1\)/\(m\+p−1\) 为 20%",
           "tick": "第 3 拍：stage 1 B0", "held": ("最多持有 2 个微批次", "最多持有 1 个微批次"),
           "planned": "气泡：尚未实测 · 按 (p−1)/(m+p−1) 为 20%"},
}  # fmt: skip


def _bottom(locator) -> float:
    """The text's bottom on the page; the picture redraws as steps arrive, so a text met between two drawings
    (no box yet) is asked again."""
    for _ in range(20):
        box = locator.bounding_box()
        if box is not None:
            return box["y"] + box["height"]
        time.sleep(0.1)
    return float("inf")


def _texts(page) -> str:
    return " ".join(page.locator(".fl-root svg text").all_text_contents())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_schedule_is_drawn_as_it_ran_with_its_bubble_on_the_first_screen(server, browser, lang):
    words = WORDS[lang]
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(f"{server}/?{LINK}&lang={lang}")
        # before Start: the formula's bubble, nothing measured, and what the schedule will hold
        page.locator(".fl-root svg text", has_text=words["planned"]).first.wait_for(timeout=60_000)
        assert all(held in _texts(page) for held in words["held"])
        page.get_by_role("button", name=words["start"]).click(timeout=60_000)
        page.locator(".fl-pill").first.wait_for(timeout=60_000)
        bubble = page.locator(".fl-root svg text", has_text=re.compile(words["bubble"])).first
        bubble.wait_for(timeout=60_000)
        measured = int(re.search(words["bubble"], bubble.text_content()).group(1))
        # the schedule's 20%, and the messages between stages: on a loaded machine (CI's two cores beside a
        # JupyterLab) the ranks wait longer for each other, 62 % once; never all of it
        assert 10 <= measured <= 85
        # a block per microbatch and pass on each rank (its hover title; its label where the block is wide
        # enough): 1F1B's F0..F3 and B0..B3 on both stages
        texts = _texts(page)
        assert "rank 0" in texts and "rank 1" in texts
        titles = page.locator(".fl-root svg rect > title").all_text_contents()
        blocks = sorted(title.split(" · ")[:2] for title in titles if " · stage " in title)
        runs = layout.order("1f1b", 2, 4)
        expected = sorted([f"{b.kind}{b.microbatch}", f"stage {b.stage}"] for run in runs for b in run)
        assert blocks == expected
        for held in words["held"]:  # 1F1B: stage 0 holds p = 2 microbatches, stage 1 one
            assert held in texts
        # the footer's legend whole, on a second line where one does not hold it
        assert t("live.pp.footer", lang).replace(" ", "") in texts.replace(" ", "")
        last_row = page.locator(".fl-root svg text", has_text="rank 1").first
        assert _bottom(bubble) <= 720 and _bottom(last_row) <= 720
        # the walk: a pill a tick of the schedule's unit-time order (2(m + p - 1) = 10), then loss, optimizer
        pills = page.locator(".fl-pill").all_text_contents()
        assert pills[:10] == [f"t{i}" for i in range(1, 11)]
        page.locator(".fl-pill", has_text="t3").first.click()
        page.locator(".fl-pill.fl-now", has_text="t3").first.wait_for(timeout=10_000)  # held on it, drawn
        time.sleep(0.4)
        # the title says which stage runs which block at that tick: 1F1B's third is stage 1's B0
        assert page.locator(".fl-phase-title").first.text_content() == words["tick"]
        page.screenshot(path=f"artifacts/pp-1f1b-{lang}-1280x720.png")
        if lang == "en":
            many_ticks_wrap(browser, server)
    finally:
        page.close()


def many_ticks_wrap(browser, server) -> None:
    """20 microbatches on 2 stages: 2(m + p - 1) = 42 ticks, then loss and optimizer. The presenter's pills
    keep one row while they fit; these do not, and wrap inside the picture rather than run past its edge."""
    link = LINK.replace("microbatches=4", "microbatches=20")
    page = browser.new_page(viewport={"width": 1280, "height": 720})  # a browser of its own: its own run
    page.goto(f"{server}/?{link}&presenter=1&lang=en")
    page.get_by_role("button", name=WORDS["en"]["start"]).click(timeout=60_000)
    page.locator(".fl-pill", has_text="optimizer").first.wait_for(timeout=60_000)
    assert page.locator(".fl-pill").count() == 44
    edges = page.evaluate("""() => {
      const root = [...document.querySelectorAll("*")].find((e) => e.shadowRoot
        && e.shadowRoot.querySelector(".fl-picture")).shadowRoot;  // the live view's component
      const picture = root.querySelector(".fl-picture").getBoundingClientRect();
      const pills = [...root.querySelectorAll(".fl-pill")].map((p) => p.getBoundingClientRect());
      return { right: picture.right, pills: Math.max(...pills.map((p) => p.right)),
               rows: new Set(pills.map((p) => Math.round(p.top))).size };
    }""")
    page.close()
    assert edges["pills"] <= edges["right"] and edges["rows"] >= 2, edges


TICK = {"en": re.compile(r"^Tick (\d+): "), "zh": re.compile(r"^第 (\d+) 拍：")}


def _tick(page, lang: str) -> int:
    match = TICK[lang].search(page.locator(".fl-phase-title").first.text_content() or "")
    return int(match.group(1)) if match else 0


def test_a_room_on_a_pipeline_asks_its_question_reveals_it_and_walks_its_ticks(server, browser):
    """A teacher's pipeline run in a room (en), a student following it (zh): the student reaches the teacher's
    step; Pause asks both pages one of the pipeline's two questions, the same step's; the student's answer is
    in the teacher's count; the reveal says the answer the schedule gives (1F1B on 2 stages: stage 0 holds 2
    microbatches at once; rank 1 starts last); the teacher's walk through the ticks is the student's."""
    teacher_context, student_context = new_context(browser), new_context(browser)
    try:
        teacher = teacher_context.new_page()
        teacher.goto(f"{server}/?{LINK}&presenter=1&ask=1&epochs=300&lang=en")
        teacher.get_by_role("button", name="Start training").wait_for(timeout=60_000)
        code = open_room(teacher)
        student = student_context.new_page()
        student.goto(f"{server}/?room={code}&presenter=1&lang=zh")
        student.locator(".fl-status-text").wait_for(timeout=60_000)

        teacher.evaluate("window.scrollTo(0, 0)")
        watch_steps(teacher, student)
        teacher.get_by_role("button", name="Start training").click()
        wait_for(lambda: step_shown(teacher) >= 3, 60, interval=0.05, what="three steps")
        lag = follow_lag(teacher, student)
        assert lag <= FOLLOW, f"the student's page {lag:.2f} s behind the teacher's step"

        # Pause asks: the same question on both pages, each in its language
        teacher.get_by_role("button", name="Pause").click()
        teacher.locator(".fl-reveal").wait_for(timeout=30_000)
        within(FOLLOW, lambda: student.locator(".fl-choice").count() >= 2, "the student's question")
        within(FOLLOW, lambda: step_shown(student) == step_shown(teacher), "the paused step")
        step = step_shown(teacher)
        asked = teacher.locator(".fl-question-text").inner_text()
        held = t("pp.q.held", "en", step=step, schedule="1f1b", p=2, m=4)
        waits = t("pp.q.wait", "en", step=step, p=2)
        assert asked in (held, waits), asked
        key = "pp.q.held" if asked == held else "pp.q.wait"
        assert student.locator(".fl-question-text").inner_text() == t(
            key, "zh", step=step, schedule="1f1b", p=2, m=4
        )
        # the answer the schedule gives: 1F1B keeps p = 2 microbatches on stage 0; stage 1 begins a hop late
        stage0 = layout.held_counts(layout.order("1f1b", 2, 4)[0])[0]
        assert stage0 == 2
        want = str(stage0) if key == "pp.q.held" else "rank 1 · cpu · gloo"
        assert want in student.locator(".fl-choice").all_inner_texts()

        student.locator(".fl-choice", has_text=want).first.click()
        within(FOLLOW, lambda: "1 answered" in teacher.locator(".fl-question").inner_text(), "the count")
        teacher.locator(".fl-reveal").click()
        within(FOLLOW, lambda: student.locator(".fl-answer").is_visible(), "the reveal on the student's page")
        assert student.locator(".fl-answer").inner_text().startswith("✓")  # the schedule's answer, chosen

        # the walk: the teacher's tick t3, then ▶ to t4, is the student's (the third tick is stage 1's B0)
        teacher.locator(".fl-veil").wait_for(state="hidden")
        teacher.locator(".fl-pill", has_text="t3").first.click()
        for tick in (3, 4):
            wait_for(lambda want=tick: _tick(teacher, "en") == want, 10, interval=0.05, what=f"t{tick} shown")
            within(FOLLOW, lambda want=tick: _tick(student, "zh") == want, f"the student at t{tick}")
            if tick == 3:
                assert student.locator(".fl-phase-title").first.text_content() == WORDS["zh"]["tick"]
                teacher.locator("button.fl-btn", has_text="▶").first.click()
        student.screenshot(path="artifacts/pp-room-student-zh-1280x720.png")
    finally:
        teacher_context.close()
        student_context.close()
