"""A Jupyter server on loopback for the notebook widget's browser test and benchmark, and a page's handles
on a notebook in it (JupyterLab at /lab, Notebook 7 at /notebooks: one server serves both).

The server runs with no token on 127.0.0.1 only, in a folder of its own (its settings and runtime files
too, so nothing of the machine's Jupyter is read or written), with the repository on the kernels'
PYTHONPATH; the app is exposed to the page (`window.jupyterapp`), whose commands run the cells.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import nbformat

from benchmarks.browser import ROOT, end, free_port

LESSON = ROOT / "examples" / "lesson.ipynb"
KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}
# the state of one widget's live view on the page: its run's status and step, the picture's step, its error
VIEWS = """() => [...document.querySelectorAll('.fl-nb')].map((node) => {
  const state = node.querySelector('.fl-nb-view').fitcoreLiveState;
  const run = state && state.run;
  return { status: run ? run.status : null, step: run ? run.step : null,
           picture: state && state.picture ? state.picture.step : null,
           received: state ? state.loss.length : 0,
           error: node.querySelector('.fl-nb-error').textContent,
           buttons: [...node.querySelectorAll('.fl-nb-bar button')].filter((b) => !b.hidden)
             .map((b) => b.textContent) };
})"""


def lesson(pace: float | None) -> nbformat.NotebookNode:
    """examples/lesson.ipynb with its parameters cell set to `pace` (papermill's way: the tagged cell)."""
    nb = nbformat.read(LESSON, as_version=4)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source = f"PACE = {pace!r}"
    return nb


def notebook(cells: list[str]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNEL
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


@contextmanager
def jupyter_server(folder: Path, timeout: float = 120.0) -> Iterator[str]:
    """`jupyter lab` serving `folder` on a free loopback port; yields its address, stops it on the way out."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "JUPYTER_CONFIG_DIR": str(folder / ".jupyter"),
        "JUPYTER_DATA_DIR": str(folder / ".jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(folder / ".jupyter-runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(folder / ".jupyter-lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(folder / ".jupyter-workspaces"),
    }
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={folder}",
        "--LabApp.expose_app_in_browser=True", "--JupyterNotebookApp.expose_app_in_browser=True",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        "--allow-root",  # CI runs as root; the server listens on loopback only
    ]  # fmt: skip
    log = folder / "jupyter.log"
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"jupyter exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
                    ) from None
                if time.monotonic() - started > timeout:
                    raise TimeoutError(
                        f"jupyter did not answer in {timeout:g} s:\n{log.read_text()[-3000:]}"
                    ) from None
                time.sleep(0.2)
        yield url
    finally:
        end(proc, 15)


def open_notebook(page, url: str, timeout_ms: float = 90_000) -> None:
    """Open a notebook's page (/lab/tree/x.ipynb or /notebooks/x.ipynb) and wait for its kernel to be idle."""
    page.goto(url)
    page.wait_for_function(
        "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'); }",
        timeout=timeout_ms,
    )


def run_cells(page, first: int, last: int) -> None:
    """Run the open notebook's cells first..last (indices, both included), one after another, as
    Shift+Enter would: each is queued at once, the kernel runs them in order."""
    page.evaluate(
        """([first, last]) => { const app = window.jupyterapp;
             const notebook = app.shell.currentWidget.content;
             notebook.activeCellIndex = first;
             for (let i = first; i <= last; i++) {
               app.commands.execute('notebook:run-cell-and-select-next');
             } }""",
        [first, last],
    )


def add_cell(page, source: str) -> None:
    """A new cell at the notebook's end holding `source`, run."""
    page.evaluate(
        """(source) => { const app = window.jupyterapp; const notebook = app.shell.currentWidget.content;
             notebook.activeCellIndex = notebook.widgets.length - 1;
             app.commands.execute('notebook:insert-cell-below');
             notebook.activeCell.model.sharedModel.setSource(source);
             app.commands.execute('notebook:run-cell'); }""",
        source,
    )


def views(page) -> list[dict]:
    return page.evaluate(VIEWS)


def cell_index(nb: nbformat.NotebookNode, tag: str) -> int:
    return next(i for i, cell in enumerate(nb.cells) if tag in cell.metadata.get("tags", []))
