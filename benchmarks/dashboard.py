"""The dashboard's cost: a run's steps per second while a real browser shows the live page, against the same
run headless; the time from pressing Start training to the first point drawn; the time from `streamlit run`
to a served page.

The page is `streamlit run app.py` on a free loopback port, driven by Playwright through the system
Chromium. The timed run is set by the link's query parameters, unpaced (pace=max); the headless run is the
same config in a runner.Run in a fresh process. Both rates are the run's own (steps over its elapsed time),
as the status line shows them. Targets: at least 0.80x the headless rate; the first point under 1 s after
the page has loaded.

    python -m benchmarks.dashboard [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchmarks import common
from benchmarks.browser import CHROMIUM, CHROMIUM_ARGS, streamlit_app
from fitcore.runs.runner import Run

STEP = re.compile(r"step (\d+) / (\d+)")
RATE = re.compile(r"([\d,]+) steps/s")
RATE_TARGET = 0.80
FIRST_POINT_TARGET_S = 1.0

# the page's first drawn point: the live view's status line past step 0 and a line in its loss chart, which
# plotly.js draws (the live view is a component in a shadow root: the query goes through its host element)
FIRST_POINT_JS = """() => {
    const roots = [...document.querySelectorAll('*')].map(e => e.shadowRoot).filter(Boolean);
    for (const root of roots) {
        const status = root.querySelector('.fl-status-text');
        const line = root.querySelector('.fl-chart .js-line');
        const m = status && status.textContent.match(/step (\\d+) \\/ (\\d+)/);
        if (m && Number(m[1]) >= 1 && line && (line.getAttribute('d') || '').length > 2) {
            window.__fitcore_drawn = performance.now();
            return true;
        }
    }
    return false;
}"""


def headless_child(fields: dict) -> None:
    """The timed run without any page: a runner.Run in this fresh process, unpaced."""
    common.warm_up()
    run = Run(common.config(**fields)).start()
    run.wait()
    snap = run.snapshot()
    print(json.dumps({"status": snap.status, "steps": snap.step, "steps_per_s": snap.steps_per_second}))


def headless(fields: dict) -> dict:
    command = [sys.executable, "-m", "benchmarks.dashboard", "--headless-child", json.dumps(fields)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=common.ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _status(page) -> tuple[int, int, str]:
    """(step, total, the status line) as the live view shows them (Playwright's locators pierce its shadow
    root)."""
    status = page.locator(".fl-status-text")
    text = status.inner_text() if status.count() else ""
    match = STEP.search(text)
    return (int(match.group(1)), int(match.group(2)), text) if match else (0, 0, text)


def on_page(page, url: str, fields: dict, timeout: float) -> dict:
    """Open the link for `fields` (unpaced), press Start training, wait for the end; the run's own rate."""
    query = {k: str(v) for k, v in fields.items() if k != "devices"} | {
        "devices": fields["devices"],
        "pace": "max",
    }
    page.goto(url + "/?" + urllib.parse.urlencode(query))
    start = page.get_by_role("button", name="Start training")
    start.wait_for()
    before = _status(page)[2]  # the last run's line, until the page has the new one
    start.click()
    deadline = common.clock() + timeout
    while _status(page)[2] == before and common.clock() < deadline:
        time.sleep(0.05)
    seen = []  # (seconds, step) as the page showed them
    while True:
        step, total, text = _status(page)
        seen.append((common.clock(), step))
        if total and step == total and "Finished" in text:
            break
        if any(word in text for word in ("Failed", "Diverged", "Stopped")) or common.clock() > deadline:
            raise RuntimeError(f"the page's run did not finish: {STEP.search(text) and text[:300]}")
        time.sleep(0.25)
    rate = float(RATE.search(text).group(1).replace(",", ""))
    return {"steps": total, "steps_per_s": rate, "updates_seen": len({s for _, s in seen})}


def first_point(page, url: str) -> dict:
    """The tutorial's own settings (the page's defaults, paced): from the click to the first point drawn."""
    t0 = common.clock()
    page.goto(url)
    start = page.get_by_role("button", name="Start training")
    start.wait_for()
    loaded = common.clock() - t0
    page.evaluate(
        "() => document.addEventListener('click', () => { window.__fitcore_click = performance.now() }, true)"
    )
    start.click()
    try:
        page.wait_for_function(FIRST_POINT_JS, polling="raf", timeout=60_000)
    except Exception as exc:  # noqa: BLE001 - say what the page showed instead of a bare timeout
        raise RuntimeError(f"no point drawn within 60 s; the status showed: {_status(page)[2]!r}") from exc
    seconds = page.evaluate("() => (window.__fitcore_drawn - window.__fitcore_click) / 1000")
    page.get_by_role("button", name="Stop").click()  # free the pool's slot for the next measurement
    return {"page_load_s": loaded, "first_point_s": seconds}


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--headless-child", default=None, help=argparse.SUPPRESS)
    args = common.parse_args(p)
    if args.headless_child is not None:
        headless_child(json.loads(args.headless_child))
        return
    if not (common.ROOT / "app.py").exists():
        print("blocked: app.py does not exist")
        common.emit("dashboard", {"blocked": "app.py does not exist"}, args.quick)
        return
    from playwright.sync_api import sync_playwright

    epochs = 300 if args.quick else 600
    fields = dict(data_size=2000, batch_size=200, epochs=epochs, devices="virtual:2")
    repeats = 1 if args.quick else 3
    with (
        tempfile.TemporaryDirectory() as tmp,
        streamlit_app(Path(tmp) / "server.log") as app,
        sync_playwright() as pw,
    ):
        url, t0, healthy_s = app.url, app.started, app.healthy_s
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(url)
            page.get_by_role("button", name="Start training").wait_for()
            served_s = common.clock() - t0
            firsts = []
            for i in range(repeats + 1):
                firsts.append(first_point(page, url))
                print(f"first point {i + 1}: {firsts[-1]}", file=sys.stderr, flush=True)
            samples = common.interleave(
                {"headless": lambda: headless(fields), "dashboard": lambda: on_page(page, url, fields, 600)},
                repeats,
                warmup=0,
            )
        finally:
            browser.close()
    rates = {who: [s["steps_per_s"] for s in runs] for who, runs in samples.items()}
    ratio = common.median(rates["dashboard"]) / common.median(rates["headless"])
    first = common.median([f["first_point_s"] for f in firsts[1:]])  # the first load also warms the server
    result = {
        "config": fields,
        "repeats": repeats,
        "server_healthy_s": healthy_s,
        "first_page_s": served_s,
        "page_load_s": common.median([f["page_load_s"] for f in firsts[1:]]),
        "first_point_samples_s": [f["first_point_s"] for f in firsts],
        "headless_steps_per_s": common.median(rates["headless"]),
        "dashboard_steps_per_s": common.median(rates["dashboard"]),
        "samples_steps_per_s": rates,
        "updates_seen": [s["updates_seen"] for s in samples["dashboard"]],
        "targets": {
            "rate_ratio": common.target(ratio, at_least=RATE_TARGET),
            "first_point_s": common.target(first, below=FIRST_POINT_TARGET_S),
        },
    }
    print(
        common.table(
            ["figure", "value", "target", "met"],
            [
                ["steps/s headless", f"{result['headless_steps_per_s']:.0f}", "", ""],
                ["steps/s with the live page", f"{result['dashboard_steps_per_s']:.0f}", "", ""],
                ["ratio", f"{ratio:.2f}", f">= {RATE_TARGET}", ratio >= RATE_TARGET],
                ["Start training -> first point (s)", f"{first:.3f}", f"< {FIRST_POINT_TARGET_S}", first < 1],
                ["page load, warm server (s)", f"{result['page_load_s']:.2f}", "", ""],
                ["streamlit run -> healthy (s)", f"{healthy_s:.2f}", "", ""],
                ["streamlit run -> first page drawn (s)", f"{served_s:.2f}", "", ""],
            ],
        )
    )
    print(
        f"Run: {fields['data_size']} rows, batch {fields['batch_size']}, {epochs} epochs on "
        f"{fields['devices']}, unpaced; medians of {repeats} alternating runs each."
    )
    common.emit("dashboard", result, args.quick)


if __name__ == "__main__":
    main()
