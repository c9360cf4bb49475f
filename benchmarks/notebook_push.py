"""The notebook widget under a long run: every message arrives, the last step is shown, and what the view
costs the kernel.

    python -m benchmarks.notebook_push [--steps 10000] [--pace 20] [--bare-steps 1000]

Starts JupyterLab on loopback and a headless Chromium, and runs three things in one kernel:
1. a bare run (fitcore.runs.runner.Run, no widget; after one of 5 steps that pays the first optimizer's cost)
   of --bare-steps at --pace: the kernel's CPU a second for
   training alone;
2. the same again: the A/A noise floor of that figure;
3. `Live(epochs=--steps, pace=--pace)` displayed and started: the view's run.
It prints the messages the kernel sent and the page received (none dropped: equal), the step the page shows
at the end (the run's last), the pusher's own CPU as a share of a core (the view's cost, measured in its
thread), and the kernel's CPU a second during 3 against 1 and 2 (the view's cost seen from outside, with
its noise beside it). Exits 1 if a message was lost, the last step is not shown, or the view takes 5 % of
a core or more.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from benchmarks.browser import chromium
from benchmarks.notebook_host import jupyter_server, notebook, open_notebook, run_cells, views

MAX_VIEW_SHARE = 0.05  # of one core, for the view's updates

BARE = """\
import json, time
from fitcore.core.config import FitConfig, check
from fitcore.runs.runner import Run

def bare(steps, pace):
    checked = check(FitConfig(epochs=steps))
    cpu, wall = time.process_time(), time.monotonic()
    run = Run(checked.config, pace=pace, plan=checked.plan).start()
    run.wait()
    return (time.process_time() - cpu) / (time.monotonic() - wall)
"""


def kernel_value(page, expression: str, timeout_s: float) -> dict:
    """Run a cell that prints json.dumps(expression) and read it back from the notebook's last output."""
    page.evaluate(
        """(source) => { const app = window.jupyterapp; const notebook = app.shell.currentWidget.content;
             notebook.activeCellIndex = notebook.widgets.length - 1;
             app.commands.execute('notebook:insert-cell-below');
             notebook.activeCell.model.sharedModel.setSource(source);
             app.commands.execute('notebook:run-cell'); }""",
        f"print('RESULT', json.dumps({expression}))",
    )
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
        ".some((o) => o.textContent.startsWith('RESULT '))",
        timeout=timeout_s * 1000,
    )
    text = page.evaluate(
        "() => [...document.querySelectorAll('.jp-OutputArea-output')].map((o) => o.textContent)"
        ".filter((t) => t.startsWith('RESULT ')).pop()"
    )
    page.evaluate("() => document.querySelectorAll('.jp-OutputArea-output').forEach((o) => { if"
                  " (o.textContent.startsWith('RESULT ')) o.textContent = 'read'; })")  # fmt: skip
    return json.loads(text[len("RESULT ") :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.notebook_push", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--steps", type=int, default=10_000, help="steps of the widget's run (10000)")
    parser.add_argument("--pace", type=float, default=20.0, help="steps a second (20: the page's default)")
    parser.add_argument("--bare-steps", type=int, default=1_000, help="steps of each bare run (1000)")
    args = parser.parse_args(argv)
    for name in ("steps", "bare_steps"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            parser.error(f"--{name.replace('_', '-')}: got {getattr(args, name)}; allowed: 1 to 1000000")
    if not 0.1 <= args.pace <= 1000:
        parser.error(f"--pace: got {args.pace:g}; allowed: 0.1 to 1000 steps a second")

    folder = Path(tempfile.mkdtemp(prefix="fitcore-notebook-push-"))
    cells = [BARE, "from fitcore.notebook import Live\n"
             f"live = Live(epochs={args.steps}, pace={args.pace})\nlive"]  # fmt: skip
    nbformat.write(notebook(cells), folder / "push.ipynb")
    bare_s = args.bare_steps / args.pace
    with jupyter_server(folder) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        open_notebook(page, f"{url}/lab/tree/push.ipynb")
        run_cells(page, 0, 1)
        page.wait_for_function("() => document.querySelector('.fl-nb .fl-nb-view')", timeout=60_000)
        print(
            f"bare runs of {args.bare_steps} steps at {args.pace:g} steps/s (two, {2 * bare_s:.0f} s) ...",
            flush=True,
        )
        twice = f"bare({args.bare_steps}, {args.pace}), bare({args.bare_steps}, {args.pace})"
        aa = kernel_value(page, f"[bare(5, 1000), {twice}][1:]",
                          timeout_s=4 * bare_s + 120)  # fmt: skip
        print(f"the widget's run: {args.steps} steps ({args.steps / args.pace:.0f} s) ...", flush=True)
        began = kernel_value(page, "[time.process_time(), time.monotonic(), live.start()]", timeout_s=60)
        deadline = time.monotonic() + 2 * args.steps / args.pace + 120
        while True:
            shown = views(page)[0]
            if shown["status"] == "finished" or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        ended = kernel_value(page, "[time.process_time(), time.monotonic(), live.pushes, live.push_seconds,"
                                   " live.snapshot().step]", timeout_s=60)  # fmt: skip
        received = page.evaluate("() => window.fitcoreNotebook ? window.fitcoreNotebook.messages : 0")
        shown = views(page)[0]

    wall = ended[1] - began[1]
    with_view = (ended[0] - began[0]) / wall
    pushes, push_cpu, last = ended[2], ended[3], ended[4]
    view_share = push_cpu / wall
    print(
        f"kernel CPU a second, training alone: {aa[0]:.3f} and {aa[1]:.3f}"
        f" (A/A noise {abs(aa[0] - aa[1]):.3f})"
    )
    print(f"kernel CPU a second, with the view:  {with_view:.3f} (the view: {with_view - min(aa):+.3f})")
    print(f"the pusher's own CPU: {push_cpu:.2f} s in {wall:.0f} s = {view_share:.2%} of a core "
          f"(bound {MAX_VIEW_SHARE:.0%})")  # fmt: skip
    print(f"messages: {pushes} sent, {received} received ({pushes / wall:.1f} a second); "
          f"the page shows step {shown['picture']} of {last}, {shown['received']} loss points")  # fmt: skip
    failed = []
    if received != pushes:
        failed.append(f"{pushes - received} message(s) lost")
    if shown["picture"] != last or last != args.steps:
        failed.append(f"the page shows step {shown['picture']}, the run ended at {last} of {args.steps}")
    if view_share >= MAX_VIEW_SHARE:
        failed.append(f"the view took {view_share:.2%} of a core")
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
