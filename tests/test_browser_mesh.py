"""A 2-D mesh on the page (a real Chromium): the link `mesh=dp=2,tp=2` runs DDP (or FSDP) over dp with
RowwiseParallel over tp, and the picture draws the ranks as the mesh's grid: each rank's block of X, the tp
groups' all-reduce of the activations and the dp groups' collectives of the gradients, each with its
measured bytes, on the projector's first screen, in English and in Chinese.

Like tests/test_browser.py this test fails, it does not skip, without Chromium or Playwright.
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LINK = "devices=cpu&mesh=dp%3D2%2Ctp%3D2&weights=5.2,9.6,-1,2.5&pace=2"
# the ranks' titles (their coordinates) and blocks of X: rows by dp, columns by tp
TITLES = ["rank 0 · dp 0, tp 0", "rank 1 · dp 0, tp 1", "rank 2 · dp 1, tp 0", "rank 3 · dp 1, tp 1"]
BLOCKS = ["X[0:100, 0:2]", "X[0:100, 2:4]", "X[100:200, 0:2]", "X[100:200, 2:4]"]


def _start(browser, server, query: str, lang: str):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{server}/?{query}&lang={lang}")
    start = "开始训练" if lang == "zh" else "Start training"
    page.get_by_role("button", name=start).click(timeout=60_000)
    # the run's own step, not the planned one: its status line says it runs
    page.locator(".fl-root svg text", has_text=BLOCKS[3]).first.wait_for(timeout=60_000)
    page.locator(".fl-pill").first.wait_for(timeout=60_000)
    return page


def _hold_on(page, pill: str, expect: str = "") -> str:
    """Click the phase's pill (the picture holds on it) and return the picture's texts, once they hold
    `expect`: a step that arrives meanwhile redraws the picture, held on the same phase, within a poll."""
    page.locator(".fl-pill", has_text=pill).first.click()
    page.locator(".fl-pill.fl-now", has_text=pill).first.wait_for(timeout=10_000)  # held on it, drawn
    for _ in range(50):
        texts = " ".join(page.locator(".fl-root svg text").all_text_contents())
        if expect in texts:
            break
        time.sleep(0.1)
    return texts


def _on_first_screen(page, text: str) -> bool:
    """Is the text's bottom within the first 720 px? The picture redraws as steps arrive: a text met between
    two drawings has no box yet, so it is asked again."""
    for _ in range(20):
        box = page.locator(".fl-root svg text", has_text=text).first.bounding_box()
        if box is not None:
            return box["y"] + box["height"] <= 720
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(
    ("strategy", "lang", "pills", "captions"),
    [
        ("ddp", "en", ("all-reduce (tp)", "all-reduce (dp)"),
         ("tp groups (rows): all-reduce of the partial outputs, 400 B a rank",
          "dp groups (columns): all-reduce of the gradients, 12 B a rank")),
        ("fsdp", "zh", ("全归约（tp）", "归约分散"),
         ("tp 组（按行）：部分输出的全归约，每个 rank 400 B",
          "dp 组（按列）：梯度的归约分散，每个 rank 12 B")),
    ],
)  # fmt: skip
def test_the_mesh_is_drawn_as_its_grid_with_both_collectives_and_their_bytes(
    server, browser, strategy, lang, pills, captions
):
    page = _start(browser, server, f"strategy={strategy}&{LINK}", lang)
    try:
        texts = " ".join(page.locator(".fl-root svg text").all_text_contents())
        for title, block in zip(TITLES, BLOCKS):
            assert title in texts and block in texts
        # the tp groups' all-reduce: each rank's (100, 1) partial output, a ring of 2 sends 400 B a rank
        # (2(k-1)/k x 400 B); the dp groups': DDP's 3 gradients or FSDP's 3-number shard, 12 B a rank
        for pill, caption in zip(pills, captions):
            assert caption in _hold_on(page, pill, caption)
            assert _on_first_screen(page, caption)
        for title in TITLES:
            assert _on_first_screen(page, title)
        page.screenshot(path=f"artifacts/mesh-{strategy}-{lang}-1280x720.png")
    finally:
        page.close()
