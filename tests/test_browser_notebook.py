"""The notebook widget in real hosts: JupyterLab and Notebook 7, headless Chromium, a kernel of this venv.

JupyterLab runs examples/lesson.ipynb's cells up to its Start: the picture advances; the widget's Pause holds
the run within 2 steps of the step shown when it was pressed; Resume, a cell that sets the pace to as fast as
it trains, and the rest of the lesson (the run's end against least squares, then DDP, FSDP and TP) follow; a
bad argument is one line in its widget. The same widget then renders in Notebook 7 and runs to its end there.
Browser tests fail, not skip, in CI.
"""

from __future__ import annotations

import time

import nbformat
import pytest

from benchmarks.browser import chromium
from benchmarks.notebook_host import (
    add_cell,
    cell_index,
    jupyter_server,
    lesson,
    notebook,
    open_notebook,
    run_cells,
    views,
)  # fmt: skip
from fitcore.core import i18n
from tests import helpers

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# a step each 200 ms, so 2 steps are 400 ms from the press to the hold: at the page's default 20 a second the
# hold came 2 steps after the press when run alone, and once 3 beside the other worker's browser tests; at
# 10 a second, once 3 on a slower 2-core machine with both workers in browser tests
PACE = 5


def wait_for(page, test, timeout: float = 60.0, what: str = ""):
    """Poll the widgets' views until test(views) is true; their last reading."""
    deadline = time.monotonic() + timeout
    while True:
        seen = views(page)
        if test(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s; the widgets: {seen}")
        time.sleep(0.05)


def outputs_text(page) -> str:
    return page.evaluate(
        "() => [...document.querySelectorAll('.jp-OutputArea-output')].map((o) => o.textContent).join('\\n')"
    )


def test_the_lesson_in_jupyterlab_then_the_widget_in_notebook_7(tmp_path):
    nb = lesson(PACE)
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    second = [
        "from fitcore.notebook import Live",
        "live = Live(devices='virtual:2', epochs=30, pace=None, lang='zh')\nlive",
        "live.run().step",
    ]
    nbformat.write(notebook(second), tmp_path / "second.ipynb")
    start = cell_index(nb, "start")
    with jupyter_server(tmp_path) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        open_notebook(page, f"{url}/lab/tree/lesson.ipynb")
        run_cells(page, 0, start)

        # the picture advances
        first = wait_for(page, lambda v: len(v) == 1 and (v[0]["picture"] or 0) >= 3, what="the first steps")[
            0
        ]
        later = wait_for(page, lambda v: v[0]["picture"] >= first["picture"] + 5, what="more steps")[0]
        assert later["status"] == "running" and later["error"] == ""
        assert later["buttons"] == [i18n.t("page.pause"), i18n.t("page.stop")]
        # the devices' boxes, drawn: how many rects depends on the phase the picture shows as a step comes
        # in (once exactly 10, in a CI rehearsal at 5 steps a second), so it is read until it holds more
        boxes = page.locator(".fl-nb .fl-svg rect")
        helpers.wait_for(lambda: boxes.count() > 10, 10, interval=0.05, what="the devices' boxes")
        assert (
            page.locator(".fl-nb .fl-plot .main-svg").count() >= 2
        )  # the charts: plotly came from the kernel

        # Pause holds within 2 steps of the step shown when it was pressed
        page.evaluate("""() => { const button = document.querySelector('.fl-nb-pause');
            button.addEventListener('pointerdown', () => { window.pressedAt =
              document.querySelector('.fl-nb-view').fitcoreLiveState.picture.step; },
              { capture: true, once: true }); }""")
        page.locator(".fl-nb-pause").click()
        pressed_at = page.evaluate("() => window.pressedAt")  # the step the view showed at the press
        paused = wait_for(page, lambda v: v[0]["status"] == "paused", timeout=10, what="paused")[0]
        time.sleep(1.0)
        held = views(page)[0]
        assert held["status"] == "paused" and held["picture"] == paused["picture"]
        assert held["picture"] - pressed_at <= 2, (pressed_at, held)
        assert held["buttons"] == [i18n.t("page.resume"), i18n.t("page.step"), i18n.t("page.stop")]

        # Step moves one; Resume, then the rest of the lesson: the run's end, and the other strategies
        page.locator(".fl-nb-step").click()
        wait_for(page, lambda v: v[0]["picture"] == held["picture"] + 1, timeout=10, what="one step")
        page.locator(".fl-nb-resume").click()
        # the pace, set in a cell while the run trains, is the run's at once: the rest of it as fast as it
        # trains (at PACE the 200 steps take 40 s); the cell goes at the notebook's end, the lesson's stay put
        add_cell(page, "live.pace = None")
        run_cells(page, start + 1, len(nb.cells) - 1)
        finished = lambda v: len(v) == 4 and all(x["status"] == "finished" for x in v)  # noqa: E731
        done = wait_for(page, finished, timeout=120, what="the lesson's runs")
        assert [x["picture"] for x in done] == [200, 200, 200, 200]
        assert done[0]["received"] == 200  # every step's loss reached the view
        page.wait_for_function(
            "() => document.body.textContent.includes('largest gap to least squares')", timeout=60_000
        )
        text = outputs_text(page)
        assert "finished after 200 steps" in text and "least squares: [5.2, 9.6] 3.4" in text
        for strategy in ("ddp", "fsdp", "tp"):
            assert f"{strategy}: W = [5.2002, 9.5999]" in text

        # a bad argument: one line in its widget, Start disabled
        add_cell(page, "Live(epochs=-3)")
        bad = wait_for(page, lambda v: len(v) == 5 and v[4]["error"], timeout=30, what="the bad argument")[4]
        assert bad["error"] == "epochs: got -3; allowed: an integer 1 or more"
        assert page.locator(".fl-nb").nth(4).locator(".fl-nb-start").is_disabled()
        page.screenshot(path=str(tmp_path / "lab.png"))

        # the second host: Notebook 7, the widget in Chinese, run to its end
        second = browser.new_page(viewport={"width": 1280, "height": 900})
        open_notebook(second, f"{url}/notebooks/second.ipynb")
        run_cells(second, 0, 2)
        ended = wait_for(
            second, lambda v: len(v) == 1 and v[0]["status"] == "finished", what="Notebook 7's run"
        )[0]
        assert ended["picture"] == 30 and ended["buttons"] == [
            i18n.t("page.start", "zh"),
            i18n.t("page.reset", "zh"),
        ]
        assert second.locator(".fl-nb .fl-svg rect").count() > 5
        assert "完成" in second.locator(".fl-nb .fl-status-text").inner_text()
