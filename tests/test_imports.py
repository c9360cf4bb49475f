"""The layers: no import circle in fitcore/ or dashboard/, counting every import statement (a lazy one inside
a function too, as a circle dodged by a lazy import is still a circle, and a typing-only one under
`if TYPE_CHECKING:`, as a circle a type checker walks is still a circle), and import-linter's contracts in
pyproject.toml (the floor knows no strategy; the library imports no page).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

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
    assert "fitcore.core.config" in import_graph("fitcore")["fitcore.strategies.ddp"]
    assert "fitcore.core.config" not in import_graph("fitcore", typing=False)["fitcore.strategies.ddp"]
    graph = import_graph("fitcore")
    registry = "fitcore.protocols.registry"
    graph[registry] = graph[registry] | {"fitcore.core.config"}  # the circle undone
    (found,) = [c for c in circles(graph) if "fitcore.core.config" in c]
    assert {"fitcore.core.config", "fitcore.protocols.registry", "fitcore.core.i18n"} <= set(found)


def test_the_circle_finder_finds_a_lazy_circle():
    """The check can fail: a lazy import back from a module it imports is a circle."""
    graph = import_graph("fitcore")
    graph["fitcore.core.config"] = graph["fitcore.core.config"] | {"fitcore.engine.launcher"}
    (found,) = [c for c in circles(graph) if "fitcore.core.config" in c]
    assert {"fitcore.core.config", "fitcore.engine.launcher"} <= set(found)


def test_the_registry_imports_no_strategy_and_the_top_floor_registers_them():
    graph = import_graph("fitcore")
    # the registry imports no strategy, nor anything that imports one or the registry: only the leaves
    # a strategy's record names (protocols/split.py and mesh.py: its split, its mesh dimension), and theirs
    below, todo = set(), list(graph["fitcore.protocols.registry"])
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
    assert "Contracts: 4 kept, 0 broken." in done.stdout


def contract_layers(pyproject: str | None = None) -> list[tuple[frozenset[str], bool]]:
    """pyproject.toml's `layers` contract, top to bottom: each layer's modules and whether they are peers."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8") if pyproject is None else pyproject
    contracts = tomllib.loads(text)["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [(frozenset(m.strip() for m in re.split(r"[|:]", x)), "|" in x) for x in contract["layers"]]


def drawn_layers(page: str | None = None) -> list[tuple[frozenset[str], bool]]:
    """The architecture page's drawing, its boxes from the page down along the solid arrows: each box's
    modules (after its title's colon, `·` between modules, `|` between peers)."""
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8") if page is None else page
    (block,) = re.findall(r"```mermaid\n(.*?)```", text, re.S)
    boxes, below = {}, {}
    for line in block.splitlines():
        found = re.fullmatch(r'\s*(\w+)\["([^"]+)"\](?:\s*-->\s*(\w+))?', line)
        if found:
            key, label, to = found.groups()
            boxes[key] = label
            if to:
                below[key] = to
    layers, key = [], "page"
    while key:
        names = boxes[key].split(": ", 1)[1]
        modules = {n.strip().rstrip("/").replace("/", ".") for n in re.split(r"[·|]", names)}
        layers.append((frozenset(m if m == "dashboard" else f"fitcore.{m}" for m in modules), "|" in names))
        key = below.get(key)
    return layers


def test_the_drawing_is_the_layers_contract():
    """docs/architecture.md's drawing and pyproject.toml's layers contract say the same: the same boxes in
    the same order, each of the same modules, peers where the contract has them independent."""
    drawn, kept = drawn_layers(), contract_layers()
    assert len(drawn) == 9 and drawn == kept
    assert kept[3] == (frozenset({"fitcore.strategies"}), False)  # every package, a new one too
    assert kept[-2] == (frozenset({"fitcore.protocols.registry"}), False)
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    peers = [c for c in contracts["contracts"] if c["type"] == "independence"]
    assert [c["modules"] for c in peers] == [["fitcore.strategies.*"]]  # and the packages are peers


def test_a_box_drawn_out_of_place_is_found():
    """The check can fail: the registry drawn below mesh and split no longer matches the contract."""
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    swapped = text.replace('"the registry: protocols/registry"', '"the registry: protocols/mesh"').replace(
        '"the leaves: protocols/mesh · protocols/split"', '"the leaves: protocols/registry · protocols/split"'
    )
    assert swapped != text and drawn_layers(swapped) != contract_layers()


def test_every_module_of_fitcore_stands_in_one_layer_and_each_layer_is_a_folder():
    """A new module takes its place in the drawing and the contract: every module and folder of fitcore is in
    exactly one layer (the strategies' packages in their folder's, a namespace that imports nothing). Below
    the drivers, the package's own top, a layer is one folder or two, but for protocols/, whose registry
    stands over its two leaves."""
    top = set()
    for p in (ROOT / "fitcore").iterdir():
        if p.stem == "__init__" or not (p.suffix == ".py" or (p / "__init__.py").exists()):
            continue
        if p.name == "protocols":  # one folder, two layers: the registry over the mesh and the split
            top |= {f"fitcore.protocols.{q.stem}" for q in p.glob("*.py") if q.stem != "__init__"}
        else:
            top.add(f"fitcore.{p.stem}")
    layers = contract_layers()
    placed = [m for modules, _ in layers for m in modules if m != "dashboard"]
    assert len(placed) == len(top) and sorted(placed) == sorted(top)  # each once, none missing or extra
    for modules, _ in layers[2:]:  # below the page and the drivers: folders
        for module in modules:
            path = ROOT / module.replace(".", "/")
            assert path.is_dir() or path.parent.name == "protocols", module
    assert import_graph("fitcore")["fitcore.strategies"] == set()  # the folder imports nothing


def test_the_default_strategy_holds_whatever_imports_first():
    """A package that imports the config while the top floor is still registering (as if a strategy's
    `__init__.py` imported fitcore.core.config eagerly) still gets the registry's default: the config reads it
    when a config is made, not when the module is imported."""
    code = (
        "import importlib, importlib.abc, sys\n"
        "class Early(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'fitcore.strategies.dataparallel':\n"
        "            sys.meta_path.remove(self)\n"
        "            importlib.import_module('fitcore.core.config')\n"
        "            registry = sys.modules.get('fitcore.protocols.registry')\n"
        "            assert registry is not None and not registry.NAMES\n"
        "        return None\n"
        "sys.meta_path.insert(0, Early())\n"
        "from fitcore.protocols import registry\n"
        "from fitcore.core.config import FitConfig\n"
        "print(FitConfig().strategy, registry.NAMES[0], registry.DEFAULT)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    made, first, default = done.stdout.split()
    assert made == first == default and made  # the first registered, not the empty name of an empty registry
