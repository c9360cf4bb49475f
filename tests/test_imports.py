"""The layers: no import circle in fitcore/ or dashboard/, counting every import statement (a lazy one inside
a function too, as a circle dodged by a lazy import is still a circle, and a typing-only one under
`if TYPE_CHECKING:`, as a circle a type checker walks is still a circle), and import-linter's contracts in
pyproject.toml (the floor knows no strategy; the library imports no page).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def import_graph(package: str, typing: bool = True) -> dict[str, set[str]]:
    """Each module of `package` -> the modules of `package` it imports, wherever the statement stands;
    `typing=False` leaves out the `if TYPE_CHECKING:` blocks (they run under a type checker only)."""
    root = ROOT / package
    mods = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in node.body
            for n in ast.walk(sub)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                if target == package or target.startswith(package + "."):
                    found = resolve(target)
                    if found and found != m:
                        graph[m].add(found)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, found = set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


@pytest.mark.parametrize("package", ["fitcore", "dashboard"])
def test_no_import_circle_counting_every_import_statement(package):
    graph = import_graph(package)
    assert len(graph) > 5  # the package was read
    assert circles(graph) == []


def test_a_typing_only_import_counts():
    """The check sees the `if TYPE_CHECKING:` blocks: a package binds the registry's config type there (its
    `Strategy[FitConfig]`), an edge the runtime graph leaves out."""
    assert "fitcore.config" in import_graph("fitcore")["fitcore.strategies.ddp"]
    assert "fitcore.config" not in import_graph("fitcore", typing=False)["fitcore.strategies.ddp"]
    graph = import_graph("fitcore")
    graph["fitcore.strategies"] = graph["fitcore.strategies"] | {"fitcore.config"}  # the circle undone
    (found,) = [c for c in circles(graph) if "fitcore.config" in c]
    assert {"fitcore.config", "fitcore.strategies", "fitcore.i18n"} <= set(found)


def test_the_circle_finder_finds_a_lazy_circle():
    """The check can fail: a lazy import back from a module it imports is a circle."""
    graph = import_graph("fitcore")
    graph["fitcore.config"] = graph["fitcore.config"] | {"fitcore.engine.launcher"}
    (found,) = [c for c in circles(graph) if "fitcore.config" in c]
    assert {"fitcore.config", "fitcore.engine.launcher"} <= set(found)


def test_the_registry_imports_no_strategy_and_the_top_floor_registers_them():
    graph = import_graph("fitcore")
    # the registry imports no strategy, nor anything that imports one or the registry: only the floor's leaves
    # a strategy's record names (fitcore.split, fitcore.mesh: its split, its mesh dimension), and theirs
    below, todo = set(), list(graph["fitcore.strategies"])
    while todo:
        m = todo.pop()
        if m not in below:
            below.add(m)
            todo += graph[m]
    assert below and not any(m.startswith("fitcore.strategies") for m in below)
    packages = {m for m in graph if m.count(".") == 2 and m.startswith("fitcore.strategies.")}
    import fitcore

    assert packages == {package.__name__ for package in fitcore.BUILTIN}  # the registry's list, each found
    assert packages <= graph["fitcore"]
    assert [m for m, deps in graph.items() if "fitcore" in deps] == []  # nothing imports the top floor


def test_the_import_linter_contracts_are_kept():
    """`lint-imports` on pyproject.toml's contracts, as a developer runs it: exit 0, every contract kept."""
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 5 kept, 0 broken." in done.stdout
