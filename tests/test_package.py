"""fitcore as a package: the wheel holds every module, the locales and the page's files, and names its
dependencies and its `fitcore` command; installed into a venv, it serves its own page from any folder."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from benchmarks.browser import free_port
from fitcore.core import paths

ROOT = Path(__file__).resolve().parents[1]


def names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


def metadata(wheel: Path, member: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        info = next(n for n in z.namelist() if n.endswith(".dist-info/" + member))
        return z.read(info).decode()


def test_wheel_holds_every_module_the_locales_and_the_page(fitcore_wheel):
    inside = names(fitcore_wheel)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fitcore").rglob("*.py")}
    locales = {
        p.relative_to(ROOT).as_posix()
        for pattern in ("core/locales/*.json", "strategies/*/locale.json")  # each strategy's words with it
        for p in (ROOT / "fitcore").glob(pattern)
    }
    page = {"app.py", ".streamlit/config.toml"} | {
        p.relative_to(ROOT).as_posix()
        for pattern in ("dashboard/*.py", "frontend/*.js", "frontend/*.css", "examples/*")
        for p in ROOT.glob(pattern)
    }
    assert modules - inside == set()
    assert locales - inside == set() and len(locales) >= 10
    assert {"fitcore/app/" + name for name in page} - inside == set()
    # the browser code's tests and preview stay out, as the static route never serves them
    assert not [n for n in inside if "/tests/" in n or n.endswith(("preview.py", "package.json"))]


def test_wheel_names_requirements_and_the_command(fitcore_wheel):
    wanted = [
        line.split("#")[0].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    requires = [line.split(":", 1)[1].strip() for line in metadata(fitcore_wheel, "METADATA").splitlines()
                if line.startswith("Requires-Dist:")]  # fmt: skip
    # as written in requirements.txt, up to the order of a specifier's clauses ("<2,>=1.40"); the notebook
    # widget's needs only with its extra (`pip install "fitcore[notebook]"`)
    extra = 'extra == "notebook"'
    assert [Requirement(r) for r in requires if extra not in r] == [Requirement(w) for w in wanted]
    assert sorted(r.split(";")[0].strip() for r in requires if extra in r) == [
        "anywidget>=0.9", "ipykernel!=7.0.0,!=7.0.1,>=6.29",
    ]  # fmt: skip
    assert "torch>=2.1" in requires
    assert "fitcore = fitcore.cli:main" in metadata(fitcore_wheel, "entry_points.txt")


def clean_env() -> dict:
    """The environment without PYTHONPATH, so that only the installed package can be imported."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.slow
def test_installed_serve_runs_the_installed_page(fitcore_venv, tmp_path):
    """`fitcore serve --server.port P` is `streamlit run <installed app.py> --server.port P`: its health
    answers, and its static route serves the installed frontend/'s files."""
    # training from the installed package is tests/test_multinode.py's: every host runs this venv's fitcore
    where = subprocess.run(
        [str(fitcore_venv), "-c", "import fitcore.core.paths as p; print(p.APP_ROOT)"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    assert Path(where).parts[-2:] == ("fitcore", "app")
    assert Path(where).is_relative_to(fitcore_venv.parents[1])
    port = free_port()
    server = subprocess.Popen(
        [str(fitcore_venv.parent / "fitcore"), "serve", "--server.port", str(port), "--server.address",
         "127.0.0.1"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline, health = time.monotonic() + 60, None
        while health is None and time.monotonic() < deadline and server.poll() is None:
            try:
                health = urllib.request.urlopen(base + "/_stcore/health", timeout=2).read()
            except OSError:
                time.sleep(0.2)
        assert health == b"ok", server.stderr.read().decode() if server.poll() is not None else "no answer"
        mount = urllib.request.urlopen(base + "/fitcore/static/mount.js", timeout=5).read()
        assert mount == (paths.FRONTEND / "mount.js").read_bytes()
    finally:
        os.killpg(server.pid, 15)
        server.wait(10)


@pytest.mark.slow  # the installed wheel's venv (built once per session)
def test_the_installed_package_lists_and_replays_its_shipped_recordings(fitcore_venv, tmp_path):
    """After pip install, the recordings are reachable by name: `fitcore examples`, `replay --example`."""
    command = str(fitcore_venv.parent / "fitcore")
    listed = subprocess.run([command, "examples"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env=clean_env())  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()[:-1]]
    assert names == sorted(p.stem for p in (ROOT / "examples").glob("*.fitrec"))
    replayed = subprocess.run([command, "replay", "--example", "h200-cuda0", "--json"], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path, env=clean_env())  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    result = json.loads(replayed.stdout)
    assert result["status"] == "finished" and result["config"]["devices"] == "cuda:0"
