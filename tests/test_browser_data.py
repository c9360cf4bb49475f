"""Your own data and a replay in a real browser: examples/houses.csv uploaded through the page's file input
(Playwright's set_input_files), trained to the end, then examples/dataparallel-virtual3.fitrec replayed, with
the status line of the live view saying what it replays.

The server, browser and context fixtures are tests/conftest.py's: one server a worker, one Chromium a module.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fitcore.runs import recording
from tests import test_browser
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[1]
HOUSES = ROOT / "examples" / "houses.csv"
EXAMPLE = ROOT / "examples" / "dataparallel-virtual3.fitrec"

pytestmark = [pytest.mark.browser, pytest.mark.slow]
status = test_browser.status


def test_upload_a_csv_train_it_then_replay_a_recording(server, context):
    page = test_browser.open_page(context, server + "/?pace=max")
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_text("Your own CSV file").click()
    sidebar.locator("input[type=file]").first.set_input_files(str(HOUSES))
    sidebar.get_by_text("The first 5 rows of houses.csv").wait_for()
    assert "area" in sidebar.locator(".st-key-csv_features").inner_text()
    page.get_by_role("button", name="Start training").click()
    wait_for(lambda: status(page).startswith("Finished"), 60, interval=0.2, what="the CSV run to finish")
    assert re.search(r"step 200 / 200", status(page)), status(page)
    assert "houses.csv: price from area, rooms, age" in status(page)  # what it fits, above the picture
    # the parameter chart's legend: the file's columns and least squares, no "true" (a file has none)
    legend = page.locator(".fl-chart").nth(1).locator(".fl-legend-item").all_inner_texts()
    assert legend == ["area", "rooms", "age", "b", "lstsq"], legend
    page.get_by_text("In the file's units", exact=True).wait_for()
    # the results name the columns: the standardised table first, then the one in the file's units
    params, units = [t.inner_text() for t in page.get_by_test_id("stTable").filter(has_text="rooms").all()]
    assert "area" in params and "w1" not in params
    assert "2.8288" in units and "14.2223" in units and "44.6" in units  # lstsq on the raw columns
    page.get_by_role("button", name="Record (.fitrec)").wait_for()
    page.get_by_role("button", name="Trace (Chrome JSON)").wait_for()

    label = recording.read(str(EXAMPLE)).short_label  # the first example is the replay's default choice
    sidebar.get_by_role("button", name="Replay").click()
    wait_for(lambda: label in status(page), 30, interval=0.2, what="the replay's label in the status line")
    wait_for(lambda: status(page).startswith("Finished"), 60, interval=0.2, what="the replay to finish")
    assert status(page).startswith(f"Finished · {label} · epoch 10 / 10 · step 20 / 20"), status(page)
    # the chart's legend names the run short, whole; what it replays is in the status line and its hover
    own = page.locator(".fl-legend-item").first
    assert own.inner_text() == "Run 2 · DataParallel · virtual:3", own.inner_text()
    assert own.get_attribute("title") == f"Run 2 · DataParallel · virtual:3 · {label}"
    legend = page.locator(".fl-chart").nth(1).locator(".fl-legend-item").all_inner_texts()
    assert legend == ["w1", "w2", "b", "true", "lstsq"], legend  # synthetic data: its true values drawn
    page.screenshot(path=str(test_browser.ARTIFACTS / "replay.png"))


ONE_GPU = ROOT / "examples" / "h200-cuda0.fitrec"


def test_a_one_gpu_replay_says_only_what_one_device_did(server, context):
    """examples/h200-cuda0.fitrec (one H200): its footer, timeline and bytes at 1280x720 and 1400x900."""
    replay = recording.read(str(ONE_GPU))
    last_loss = replay.events[-1].final_loss  # 1.77 after 40 steps
    page = test_browser.open_page(context, server + "/?pace=max")
    sidebar = page.get_by_test_id("stSidebar")
    choice = sidebar.locator(".st-key-replay_choice")
    choice.scroll_into_view_if_needed()
    choice.click()
    page.get_by_role("option", name=ONE_GPU.name).click()
    sidebar.get_by_role("button", name="Replay").click()
    wait_for(lambda: status(page).startswith("Finished"), 60, interval=0.2, what="the replay to finish")
    assert f"{replay.short_label} · epoch 20 / 20 · step 40 / 40" in status(page), status(page)
    for width, height in ((1280, 720), (1400, 900)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(800)  # the picture redraws at its new width
        svg = page.locator(".fl-svg")
        # one device does the whole step: nothing gathered or reduced elsewhere, and its box shows the step
        assert svg.locator("text").filter(has_text="★").all_text_contents() == [
            "★ cuda:0",
            "★ cuda:0 does the whole step: forward, loss, backward, step",
        ]
        assert "also does" not in svg.text_content()
        chips = svg.locator(".fl-chip").evaluate_all("(cs) => cs.map((c) => c.getAttribute('data-chip'))")
        assert chips == ["W, b", "loss 1.77", "∇W, ∇b", "step ✓"], chips
        assert abs(float(chips[1].split()[1]) - last_loss) < 0.005, (chips, last_loss)
        assert page.locator(".fl-phase-title").inner_text() == "Step 40 · loss 1.77"
        # nothing was timed and nothing moved: said so, with no "0.0 µs" and no empty rows
        timeline = page.locator(".fl-timeline")
        assert timeline.locator(".fl-subtitle").first.inner_text() == (
            "Timeline of step 40: one device runs the step as one piece, no phase is timed"
        )
        assert "µs" not in timeline.inner_text() and "measured" not in timeline.inner_text()
        assert not page.locator(".fl-gantt-svg").is_visible()
        assert "nothing moves between devices" in timeline.inner_text()
        box = test_browser.inside(page, ".fl-picture")
        assert box["inside"], (width, height, box)
        # the loss chart's legend names the run whole, not cut: what it replays is in the status line, and in
        # the legend's hover title
        own = page.locator(".fl-legend-item").first
        assert own.inner_text() == "Run 1 · DataParallel · cuda:0", own.inner_text()
        assert own.get_attribute("title") == f"Run 1 · DataParallel · cuda:0 · {replay.short_label}"
        page.screenshot(path=str(test_browser.ARTIFACTS / f"replay-one-gpu-{width}x{height}.png"))
