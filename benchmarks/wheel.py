"""Build fitcore's wheel from this checkout, and install it into a throwaway venv that sees this torch.

The tests and `benchmarks.multinode` use it: the wheel is built from a copy of what setup.py and
MANIFEST.in name (so that a stale build/ of the checkout cannot leak into it), without build isolation
(setuptools is already here, nothing is downloaded), and installed without its dependencies into a venv
whose .pth file points at this interpreter's site-packages, so torch and streamlit are the ones already
installed and nothing pulls another torch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (  # what the build reads: the project files and every tree setup.py copies from
    "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "requirements.txt", "app.py",
    ".streamlit", "fitcore", "dashboard", "frontend", "examples",
)  # fmt: skip
BUILD_TIMEOUT = 120  # seconds: about 2 s here


def build_wheel(dest: Path) -> Path:
    """The wheel of this checkout, built into dest (a new folder); returns its path."""
    tree = dest / "tree"
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            skip = shutil.ignore_patterns("__pycache__", "tests", "node_modules")
            shutil.copytree(source, tree / name, ignore=skip)
        else:
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    code = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    out = subprocess.run(
        [sys.executable, "-c", code, str(dest)], cwd=tree, capture_output=True, text=True,
        timeout=BUILD_TIMEOUT, check=True,
    )  # fmt: skip
    return dest / out.stdout.strip().splitlines()[-1]


def install_venv(wheel: Path, venv: Path) -> Path:
    """A venv at `venv` with the wheel installed, and this interpreter's packages visible; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "fitcore-parent-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         str(wheel)],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    return python


if __name__ == "__main__":  # python -m benchmarks.wheel DEST: build the wheel, print its path
    print(build_wheel(Path(sys.argv[1])))
