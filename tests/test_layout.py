"""The architecture page's layout table (docs/architecture.md) names every module, and the commands sit above
their shared flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def layout_paths() -> set[str]:
    """Every path the layout table names: `a/b.py`, `c.py` in one cell means a/b.py and a/c.py."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("## Layout") : text.index("Where a change goes")]
    named = set()
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        folder = ""
        for item in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
            if "/" in item.rstrip("/"):
                folder = item.rsplit("/", 1)[0] + "/"
                named.add(item)
            else:
                named.add(folder + item)
    return named


def modules() -> list[str]:
    """fitcore's modules, the page's and the live view's scripts (dashboard/__init__.py is empty)."""
    found = [*(ROOT / "fitcore").rglob("*.py"), *(ROOT / "dashboard").glob("*.py"), ROOT / "app.py"]
    found += list((ROOT / "frontend").glob("*.js"))
    paths = sorted(str(p.relative_to(ROOT)) for p in found)
    return [p for p in paths if p != "dashboard/__init__.py"]


def in_a_strategy(path: str) -> bool:
    """A strategy's own file: a module of its package, or its drawer (named by pattern in the table)."""
    parts = path.split("/")
    in_package = parts[:2] == ["fitcore", "strategies"] and len(parts) > 3
    return in_package or (parts[0] == "frontend" and parts[-1].startswith("draw_"))


def test_the_layout_table_names_every_module():
    named = layout_paths()
    assert [m for m in modules() if m not in named and not in_a_strategy(m)] == []
    assert "fitcore/engine/launcher.py" in named and "fitcore/strategies/<name>/" in named


@pytest.mark.parametrize(
    "package",
    sorted(
        p.name
        for p in (ROOT / "fitcore" / "strategies").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    ),
)
def test_each_strategy_package_names_its_modules_in_its_docstring(package):
    """A strategy is one package: its __init__.py's docstring says what each of its files holds."""
    folder = ROOT / "fitcore" / "strategies" / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    files = sorted(
        f.name for f in folder.iterdir() if f.suffix in (".py", ".json") and f.name != "__init__.py"
    )
    assert files and [f for f in files if f not in doc] == []


def test_compare_and_whatif_take_their_flags_from_below_not_from_the_cli():
    for name in ("lab/compare", "lab/whatif", "whatif_cli", "kit/flags"):
        tree = ast.parse((ROOT / "fitcore" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "fitcore.cli" not in imported, name


# Where the devices string is read into a DevicePlan: config.check (once per Start, per check row, per lab
# command), the page's inputs (a link's or a run's devices turned into widgets), and the entries that take a
# bare config (a trainer, a Run, compare.run, as a script or a test calls them). Everything else (the views,
# the page's panels and title, the lab's measure, the check rows, the SyncBatchNorm check) is handed the plan.
READ_DEVICES = {
    "fitcore/core/config.py": 1,  # check()
    "fitcore/view/link.py": 2,  # the link's devices, into the sidebar's widgets
    "fitcore/view/controls.py": 3,  # a run's or a preset's devices, into the widgets
    "fitcore/runs/runner.py": 1,  # Run(cfg) with no plan
    "fitcore/lab/compare.py": 1,  # compare.run(cfg) with no plan
    "fitcore/engine/launcher.py": 1,  # launch(cfg) with no plan
    "fitcore/engine/torchrun.py": 1,  # one torchrun rank, given its config by the command line
    "fitcore/strategies/dataparallel/train.py": 1,  # train(cfg) with no plan
}


def test_the_devices_string_is_read_where_a_config_is_checked_or_entered_and_nowhere_below():
    calls: dict[str, int] = {}
    for path in [*(ROOT / "fitcore").rglob("*.py"), *(ROOT / "dashboard").rglob("*.py"), ROOT / "app.py"]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        n = sum(
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "parse_devices"
            for node in ast.walk(tree)
        )
        if n:
            calls[path.relative_to(ROOT).as_posix()] = n
    assert calls == READ_DEVICES
