"""The documentation site's screenshots, made from the real page: `python -m benchmarks.screenshots`.

It serves `streamlit run app.py` on a free loopback port, opens the system Chromium at 1280x720, and for
each strategy's preset starts the run, pauses it and walks the picture to one phase, then saves the first
screen to docs/img/<name>.png; then a room, teacher and student. Run it again when the page changes; the
site shows what it saves (docs/strategies/*.md, docs/guide/*.md).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from benchmarks.browser import chromium, open_room, streamlit_app

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
# (file, the link's query, phases to walk with ▶ once paused)
SHOTS = (
    ("dataparallel", "pace=5&epochs=400", 3),
    ("ddp", "preset=ddp&pace=5&epochs=400", 4),
    ("fsdp", "preset=fsdp&pace=5&epochs=400", 1),
    ("tp", "preset=tp&pace=5&epochs=400", 2),
    ("virtual8", "devices=virtual:8&pace=5&epochs=400", 0),
)


def shoot(browser, url: str, name: str, query: str, walk: int) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{url}/?{query}")
    page.get_by_role("button", name="Start training").wait_for(timeout=90_000)
    page.get_by_role("button", name="Start training").click()
    time.sleep(4)
    page.get_by_role("button", name="Pause").click()
    time.sleep(1.5)
    for _ in range(walk):
        page.locator("button.fl-btn", has_text="▶").first.click()
        time.sleep(0.4)
    page.screenshot(path=str(OUT / f"{name}.png"))
    page.close()


def room(browser, url: str) -> None:
    teacher = browser.new_page(viewport={"width": 1280, "height": 720})
    teacher.goto(f"{url}/?pace=2&ask=1&presenter=1&epochs=300")
    teacher.get_by_role("button", name="Start training").wait_for(timeout=90_000)
    code = open_room(teacher)
    student = browser.new_page(viewport={"width": 1280, "height": 720})
    student.goto(f"{url}/?room={code}&presenter=1")
    teacher.get_by_role("button", name="Start training").click()
    time.sleep(3)
    teacher.get_by_role("button", name="Pause").click()
    time.sleep(2)
    student.locator(".fl-choice").first.click()
    time.sleep(1.5)
    teacher.screenshot(path=str(OUT / "room-teacher.png"))
    student.screenshot(path=str(OUT / "room-student.png"))


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with streamlit_app(Path(tmp) / "server.log") as app, chromium() as browser:
            for name, query, walk in SHOTS:
                shoot(browser, app.url, name, query, walk)
                print(f"docs/img/{name}.png")
            room(browser, app.url)
            print("docs/img/room-teacher.png\ndocs/img/room-student.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
