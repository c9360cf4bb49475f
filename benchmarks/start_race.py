"""Start pressed the moment the page draws it, on fresh pages: is the run in the live view, and how soon?

    python -m benchmarks.start_race [--tries 20] [--strategies ddp,fsdp,tp,pp] [--gap 0]

Starts `streamlit run app.py` on a loopback port and, for each ranked strategy, opens `--tries` fresh pages
(each its own browser context: a new browser) one after another, presses Start as soon as the button is
shown, and waits for the run to appear in the live view. Every other try holds the live view's module back
until the click, as a slow machine does: the click then lands before the first mount, which is the race that
once lost the run's picture for good (frontend/component.js); such a page shows Start by app.py's 4 s
fallback, as the view that would show it sooner is held. Prints, per strategy, how many tries showed their
run, and the seconds from the button shown (the moment a person may press it; the click itself waits while
the page is busy) to the run in the view (median, max); exits 1 if any did not.
`--gap S` waits S seconds between tries (a class's pages are opened apart, not back to back).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.browser import chromium, streamlit_app
from fitcore.core.i18n import t

LINKS = {
    "ddp": "strategy=ddp&devices=cpu&workers=2",
    "fsdp": "strategy=fsdp&devices=cpu&workers=2",
    "tp": "strategy=tp&devices=cpu&workers=2",
    "pp": "strategy=pp&devices=cpu&workers=2",
}
SHOWN_S = 3.0  # how long a try waits for the run in the live view before it counts as lost
SHOWN_RUN = (  # the id of the run the live view shows, or null (no live view, or no run in it)
    "(root) => { const s = root.parentNode.fitcoreLiveState;"
    " return s && !s.disposed && s.run ? s.run.id : null; }"
)


def shown_run(page) -> str | None:
    root = page.locator(".fl-root")  # inside the component's shadow root, which locators reach
    return root.evaluate(SHOWN_RUN) if root.count() == 1 else None


def one_try(browser, url: str, hold: bool, within: float = SHOWN_S, show: bool = False) -> float | None:
    """A fresh page, Start pressed at once (the live view's module held back until the click where `hold`):
    the seconds from the button's showing to the run in the live view, or None if it was not there within
    `within` seconds of it. Where `show`, the try shows Start itself as soon as it is in the page (the class
    the live view sets once its charts' library is in) rather than wait the 4 s after which app.py's CSS
    shows it to a page whose view never came: the race is the same, a click before the view is there."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        held, released = [], []
        if hold:
            page.route("**/fitcore/static/mount.js",
                       lambda route: route.continue_() if released else held.append(route))  # fmt: skip
        page.goto(url)
        if show:
            page.locator(".st-key-start").wait_for(state="attached")
            page.evaluate("document.body.classList.add('fitcore-ready')")
        start = page.get_by_role("button", name=t("page.start", "en"))
        start.wait_for()  # shown: a person may press it now
        # timed from here, not from the click's return: a page busy on its one thread (a long script) holds
        # the click too, and that wait is the reader's
        clicked = time.perf_counter()
        start.click()
        released.append(True)
        for route in held:
            route.continue_()
        while time.perf_counter() - clicked < within:
            if shown_run(page) is not None:
                status = page.locator(".fl-status-text")
                ready = status.count() == 1 and status.inner_text().startswith("Ready")
                return None if ready else time.perf_counter() - clicked
            time.sleep(0.02)
        return None
    finally:
        context.close()


def tries(browser, server: str, strategy: str, n: int, gap: float = 0.0) -> list[float | None]:
    """n tries on fresh pages of `strategy`'s link, every other one held back, `gap` seconds apart."""
    url = f"{server}/?{LINKS[strategy]}&epochs=4"
    seen = []
    for i in range(n):
        time.sleep(gap if i else 0.0)
        seen.append(one_try(browser, url, hold=bool(i % 2)))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tries", type=int, default=20, help="fresh pages per strategy (1 to 200)")
    parser.add_argument("--strategies", default=",".join(LINKS), help=f"some of {', '.join(LINKS)}")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between tries (0 to 60)")
    args = parser.parse_args(argv)
    names = [s for s in args.strategies.split(",") if s]
    bad = not 1 <= args.tries <= 200 or not 0 <= args.gap <= 60
    if bad or not names or any(s not in LINKS for s in names):
        print(f"start_race: --tries 1 to 200, --gap 0 to 60 and --strategies from {', '.join(LINKS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    lost = 0
    with tempfile.TemporaryDirectory() as tmp, streamlit_app(Path(tmp) / "server.log", timeout=90) as app:
        with chromium() as browser:
            for strategy in names:
                seen = tries(browser, app.url, strategy, args.tries, args.gap)
                shown = [s for s in seen if s is not None]
                lost += len(seen) - len(shown)
                times = f"median {statistics.median(shown):.2f} s, max {max(shown):.2f} s" if shown else "-"
                print(f"{strategy}: shown {len(shown)}/{len(seen)}; from Start shown to the run in the view: "
                      f"{times}")  # fmt: skip
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
