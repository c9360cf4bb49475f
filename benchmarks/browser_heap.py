"""The browser's JavaScript heap for a page showing a 10,000-step run: `streamlit run app.py` on a loopback
port, the page opened in the system Chromium (benchmarks.browser), its heap read through the DevTools
protocol after a forced garbage collection (HeapProfiler.collectGarbage, then Runtime.getHeapUsage's used
bytes): the idle page, every 10 s while the run trains at `--pace` steps/s, and once it has finished.

    python -m benchmarks.browser_heap [--pace 200] [--epochs 10000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.browser import chromium, streamlit_app


def used_mib(cdp) -> float:
    cdp.send("HeapProfiler.collectGarbage")
    return cdp.send("Runtime.getHeapUsage")["usedSize"] / 2**20


def status(page) -> str:
    return page.locator(".fl-status-text").inner_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pace", default="200", help="the page's pace choice (steps per second, or max)")
    parser.add_argument("--epochs", type=int, default=10_000, help="epochs of one batch: the run's steps")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    log = Path(tempfile.mkdtemp(prefix="fitcore-heap-")) / "server.log"
    with chromium() as browser, streamlit_app(log, timeout=120) as app:
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        context.set_default_timeout(90_000)
        page = context.new_page()
        page.goto(f"{app.url}/?epochs={args.epochs}&pace={args.pace}")
        page.get_by_role("button", name="Start training").wait_for()
        page.locator(".fl-status-text").wait_for()
        cdp = context.new_cdp_session(page)
        time.sleep(2)
        print(f"idle page, {args.epochs:,} steps planned: {used_mib(cdp):.1f} MiB")
        page.get_by_role("button", name="Start training").click()
        started = time.perf_counter()
        while not status(page).startswith("Finished"):
            time.sleep(10 if args.pace != "max" else 0.5)
            if args.pace != "max":
                print(f"{time.perf_counter() - started:4.0f} s: {status(page)[:60]}: {used_mib(cdp):.1f} MiB")
        time.sleep(3)
        print(f"finished, {args.epochs:,} steps shown: {used_mib(cdp):.1f} MiB ({status(page)})")
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
