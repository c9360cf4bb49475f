"""The type checker holds the contracts (pyproject.toml's [tool.mypy]): the mesh, the split, the engine's
loop and its Engine, strict; the strategies' parts held to them. A part that breaks the contract fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_the_contracts_and_the_strategies_parts_type_check():
    done = mypy()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found in ")


BROKEN = '''
from fitcore.engine.contract import Engine
from fitcore.engine.loop import Mark, Place
from fitcore.config import FitConfig


class HalfPart:
    """A part without `sent`, `end_early` and the rest: no RankPart."""

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark) -> None:
        self.holds = 1


def params(rank: int, holds: int) -> tuple[tuple[float, ...] | None, float | None]:
    return None, None


ENGINE = Engine(part=HalfPart, step_params=params, final=lambda h: (((), 0.0), {}), specs=lambda *a: (),
                slots=8, words="x")
'''


def test_a_part_that_breaks_the_contract_fails_the_check(tmp_path):
    module = tmp_path / "broken_part.py"
    module.write_text(BROKEN, encoding="utf-8")
    done = mypy("--config-file", str(ROOT / "pyproject.toml"), str(module))
    assert done.returncode == 1
    assert 'Argument "part" to "Engine" has incompatible type' in done.stdout, done.stdout
