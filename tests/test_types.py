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
from fitcore.core.config import FitConfig


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


BROKEN_VIEW = '''
from fitcore.core.config import FitConfig
from fitcore.core.events import Step

CONSOLE_HINT = "view.console_hint.ddp"


def planned_step(cfg: FitConfig, gpus: list[int]) -> tuple[Step, tuple[str, ...]]:
    """The devices string's GPUs, not the checked plan: the contract before the plan was passed down."""
    raise NotImplementedError


def sections(snap, cfg, plan):
    return []


def parallelism(cfg, started):
    return ""


def console_frame(snap):
    return [], []
'''

HOLDS = '''
import broken_view
from fitcore.view.contract import StrategyView

VIEW: StrategyView = broken_view
'''


def test_a_view_module_that_breaks_the_contract_fails_the_check(tmp_path):
    (tmp_path / "broken_view.py").write_text(BROKEN_VIEW, encoding="utf-8")
    (tmp_path / "holds.py").write_text(HOLDS, encoding="utf-8")
    done = mypy("--config-file", str(ROOT / "pyproject.toml"), str(tmp_path / "broken_view.py"),
                str(tmp_path / "holds.py"))  # fmt: skip
    assert done.returncode == 1
    assert 'variable has type "StrategyView"' in done.stdout, done.stdout
    assert "planned_step" in done.stdout and "DevicePlan" in done.stdout, done.stdout
