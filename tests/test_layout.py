"""The README's layout table names every module, and the commands sit above their shared flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def layout_paths() -> set[str]:
    """Every path the README's layout table names: `a/b.py`, `c.py` in one cell means a/b.py and a/c.py."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
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


def test_the_layout_table_names_every_module():
    named = layout_paths()
    assert [m for m in modules() if m not in named] == []
    assert "fitcore/strategies/ddp/view.py" in named and "fitcore/engine/launcher.py" in named


def test_compare_and_whatif_take_their_flags_from_below_not_from_the_cli():
    for name in ("compare", "whatif", "flags"):
        tree = ast.parse((ROOT / "fitcore" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "fitcore.cli" not in imported, name
