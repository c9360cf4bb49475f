"""A room in real browsers: one teacher and two students, each its own browser context (its own cookies).

The students' pages follow the teacher's run (fitcore.follow, frontend/follow.js): its step within a second,
its phase after the teacher's ◀ ▶, the question at once on Pause, their answers in the teacher's counts, the
reveal within a second; no run button on a student's page, and a student's HTTP tries on the teacher's run
answered 4xx; "Leave the room" gives a page of one's own with the teacher's settings. At 1280x720 the picture
and both charts stay on the first screen, teacher and students, en and zh, with the question shown.
"""

from __future__ import annotations

import re
import time

import pytest

from benchmarks.browser import open_room
from fitcore.core.i18n import t
from tests.helpers import wait_for
from tests.test_browser import ARTIFACTS, inside, open_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEP = re.compile(r"step (\d+) / (\d+)")
STEP_ZH = re.compile(r"步数 (\d+) / (\d+)")
PARTS = (".fl-picture", ".fl-chart >> nth=0", ".fl-chart >> nth=1")
# The room promises a student's page the teacher's step, phase and reveal within a second: that is measured by
# benchmarks/room_follow.py (docs/reliability.md), not here. This test holds the page to following on its next
# few polls (0.4 s each): in CI's two workers on 2 cores, three Chromium pages and a server beside another
# worker's tests took up to 1.8 s; a page that followed only on a timer or a rerun would take far longer.
FOLLOW = 3.0


def new_context(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(30_000)
    return context


def status(page) -> str:
    return page.locator(".fl-status-text").inner_text()


def step_shown(page) -> int:
    match = STEP.search(status(page)) or STEP_ZH.search(status(page))
    return int(match.group(1)) if match else 0


def within(seconds: float, predicate, what: str) -> float:
    """Wait for predicate; the seconds it took, which must be at most `seconds`."""
    start = time.perf_counter()
    wait_for(predicate, 10, interval=0.02, what=what)
    took = time.perf_counter() - start
    assert took <= seconds, f"{what}: {took:.2f} s"
    return took


# Each page writes down, in the page, when its status line first showed each step (Date.now(): the pages share
# the machine's clock). A student's lag behind the teacher is read from those moments, not from this test's
# readings of the pages, which a loaded machine delays by seconds (in a full run one reading took over 3 s,
# and a student already on the teacher's step looked 4.2 s late)
WATCH_STEPS = r"""() => {
  if (window.fitcoreStepsSeen) return;
  const seen = window.fitcoreStepsSeen = {};
  const find = () => {
    for (const e of document.querySelectorAll("*")) {
      const line = e.shadowRoot && e.shadowRoot.querySelector(".fl-status-text");
      if (line) return line;
    }
    return null;
  };
  let line = null;
  setInterval(() => {
    line = line && line.isConnected ? line : find();
    const m = line && line.textContent.match(/(?:step|步数) (\d+) \//);
    if (m && !(m[1] in seen)) seen[m[1]] = Date.now() / 1000;
  }, 20);
}"""


def watch_steps(*pages) -> None:
    for page in pages:
        page.evaluate(WATCH_STEPS)


def steps_seen(page) -> dict[int, float]:
    return {int(k): v for k, v in page.evaluate("() => window.fitcoreStepsSeen").items()}


def reached(seen: dict[int, float], n: int) -> float | None:
    """When a page first showed step n or a later one (a page may skip a step between two polls)."""
    return min((when for step, when in seen.items() if step >= n), default=None)


def follow_lag(teacher, student, steps: int = 3) -> float:
    """The student's page's longest lag behind the teacher's over the next `steps` steps: the moment the
    student's page reached each step less the moment the teacher's did (none where the student was first)."""
    first = max(steps_seen(teacher), default=0) + 1
    last = first + steps - 1
    wait_for(lambda: reached(steps_seen(student), last) and reached(steps_seen(teacher), last), 60,
             what=f"step {last} on both pages")  # fmt: skip
    ours, theirs = steps_seen(teacher), steps_seen(student)
    return max(max(0.0, reached(theirs, n) - reached(ours, n)) for n in range(first, last + 1))


def on_first_screen(page, name: str) -> None:
    boxes = {sel: inside(page, sel) for sel in PARTS}
    page.screenshot(path=str(ARTIFACTS / f"room-{name}.png"))
    assert all(b["inside"] for b in boxes.values()), (name, boxes)


def test_two_students_follow_the_teachers_run_answer_and_see_the_reveal(server, browser):
    teacher_context, ann_context, ben_context = (new_context(browser) for _ in range(3))
    try:
        teacher = open_page(teacher_context, server + "/?pace=2&presenter=1&ask=1&epochs=300")
        code = open_room(teacher)
        students = []
        for context, lang in ((ann_context, "en"), (ben_context, "zh")):
            page = context.new_page()
            page.goto(f"{server}/?room={code}&presenter=1&lang={lang}")
            page.locator(".fl-status-text").wait_for(timeout=90_000)
            wait_for(
                lambda p=page, ln=lang: status(p) == t("live.follow.none", ln), 10, what="a student waiting"
            )
            # no run button, no settings: the page follows
            assert page.get_by_role("button", name=t("page.start", lang)).count() == 0
            assert page.get_by_role("button", name=t("classroom.follow.leave", lang)).count() == 1
            students.append(page)
        ann, ben = students

        # the teacher starts: both students see its steps, each on its next polls
        watch_steps(teacher, *students)
        teacher.get_by_role("button", name="Start training").click()
        wait_for(lambda: step_shown(teacher) >= 3, 30, interval=0.05, what="three steps")
        for page in students:
            lag = follow_lag(teacher, page)
            assert lag <= FOLLOW, f"a student's page {lag:.2f} s behind the teacher's step"
        assert status(ann).startswith("The teacher's run · ") and status(ben).startswith("老师的训练 · ")

        # Pause with asking on: every page is veiled by the same question at once
        teacher.get_by_role("button", name="Pause").click()
        teacher.locator(".fl-reveal").wait_for()
        question = teacher.locator(".fl-question-text").inner_text()
        for page in students:
            within(
                FOLLOW,
                lambda p=page: p.locator(".fl-choice").count() >= 2,
                "the question on a student's page",
            )
        assert ann.locator(".fl-question-text").inner_text() == question
        assert ben.locator(".fl-question-text").inner_text() != question  # in Chinese, the same step's
        # the step the run held at, on every page (the room's promise: within a second of the teacher's)
        within(FOLLOW, lambda: step_shown(ann) == step_shown(ben) == step_shown(teacher), "the paused step")
        for name, page in (("teacher-asks", teacher), ("student-asked-en", ann), ("student-asked-zh", ben)):
            on_first_screen(page, name)

        # the students answer; the teacher's counts say so within a second; only the teacher sees counts
        ann.locator(".fl-choice").nth(0).click()
        ben.locator(".fl-choice").nth(1).click()
        within(FOLLOW, lambda: "2 answered" in teacher.locator(".fl-question").inner_text(), "the counts")
        counts = [int(n) for n in teacher.locator(".fl-count-n").all_inner_texts()]
        assert sorted(counts, reverse=True)[:2] == [1, 1] and sum(counts) == 2
        assert ann.locator(".fl-count-n").count() == 0 and ben.locator(".fl-count-n").count() == 0

        # a student's HTTP tries on the teacher's run: 4xx, and nothing changes
        run_id = re.search(r"run-\d+", teacher.evaluate("document.cookie"))[0]
        tries = [
            ann_context.request.get(f"{server}/fitcore/live?run={run_id}"),
            ann_context.request.post(f"{server}/fitcore/bye?run={run_id}"),
            ann_context.request.post(f"{server}/fitcore/room/walk?room={code}&run={run_id}&step=1&phase=0"),
            ann_context.request.post(f"{server}/fitcore/room/reveal?room={code}&q=rows/1/abcdef012345"),
            ann_context.request.get(f"{server}/fitcore/room?room={code}"),
        ]
        assert [r.status for r in tries[:4]] == [404] * 4
        assert "counts" not in tries[4].json()  # the room as a student sees it: no counts
        assert teacher.locator(".fl-reveal").is_visible()  # still asking: nothing a student sent revealed it

        # the reveal: every page unveils within a second, and says the answer and whether it was theirs
        teacher.locator(".fl-reveal").click()
        for page in students:
            within(
                FOLLOW, lambda p=page: p.locator(".fl-answer").is_visible(), "the reveal on a student's page"
            )
        assert ann.locator(".fl-veil").is_hidden() and ben.locator(".fl-veil").is_hidden()
        texts = [p.locator(".fl-answer").inner_text() for p in students]
        assert texts[0][:1] in "✓✗" and texts[1][:1] in "✓✗" and texts[0][:1] != texts[1][:1]

        # the teacher walks the step's phases: the students' pictures show the same phase within a second
        teacher.locator(".fl-veil").wait_for(state="hidden")
        for _ in range(2):
            teacher.locator("button.fl-btn", has_text="▶").first.click()
            title = teacher.locator(".fl-phase-title").inner_text()
            within(
                FOLLOW, lambda want=title: ann.locator(".fl-phase-title").inner_text() == want, "the phase"
            )
        assert ann.locator("button.fl-btn").first.is_hidden()  # a student's page has no stepper of its own

        # Leave the room: a page of one's own, with the teacher's settings
        ann.get_by_role("button", name="Leave the room").click()
        ann.get_by_role("button", name="Start training").wait_for()
        wait_for(lambda: ann.locator(".st-key-epochs input").input_value() == "300", 10, what="the settings")
    finally:
        for context in (teacher_context, ann_context, ben_context):
            context.close()
