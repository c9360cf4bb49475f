"""No strategy's name is written outside its own package: the rest of fitcore asks fitcore.protocols.registry.

A name counts where code spells it as a string: a Python string constant (docstrings aside: they are prose)
or a JavaScript string literal in which the name stands as a word of its own ("ddp", "lab.strategy.ddp",
f"{x}.ddp"), not inside an identifier or a longer word ("train_ddp", "ddp3", "DistributedDataParallel").
Comments are prose too. A package may spell its own name, and frontend/'s drawers (draw_<name>.js) theirs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fitcore.protocols import registry
from fitcore.protocols.mesh import DIMS

ROOT = Path(__file__).resolve().parent.parent
NAMES = registry.NAMES
PYTHON = sorted(
    [*(ROOT / "fitcore").rglob("*.py"), *(ROOT / "dashboard").rglob("*.py"), ROOT / "app.py",
     *(ROOT / "frontend").rglob("*.py")]
)  # fmt: skip
SCRIPTS = sorted(
    p for p in (ROOT / "frontend").rglob("*") if p.suffix in (".js", ".html") and "tests" not in p.parts
    and "node_modules" not in p.parts and not p.name.startswith("draw_")
)  # fmt: skip
JS_STRING = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|`(?:[^`\\]|\\.)*`""")
JS_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def mentions(text: str) -> list[str]:
    """The strategy names that stand as words of their own in `text`."""
    return [n for n in NAMES if re.search(rf"(?<![A-Za-z0-9_]){n}(?![A-Za-z0-9_])", text)]


def owner(path: Path) -> str | None:
    """The strategy whose package holds `path`, if one does."""
    parts = path.relative_to(ROOT).parts
    if parts[:2] == ("fitcore", "strategies") and len(parts) > 3:
        return parts[2]
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def python_strings(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


def script_strings(source: str) -> list[tuple[int, str]]:
    out = []
    # comments away first (keeping their newlines, so the line numbers stay right); a // inside a string
    # literal is rare enough in frontend/ that the cut it would make shows up as a failure, not a pass
    code = JS_COMMENT.sub(lambda m: "\n" * m.group().count("\n"), source)
    for m in JS_STRING.finditer(code):
        out.append((code.count("\n", 0, m.start()) + 1, m.group()[1:-1]))
    return out


# The mesh's dimension names are torch's and torchtitan's words ("dp", "tp"), written once, in
# fitcore/protocols/mesh.py, and by its constants everywhere else; one is also a strategy's registry name,
# another thing
MESH = ROOT / "fitcore" / "protocols" / "mesh.py"


def offences(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    strings = python_strings(source) if path.suffix == ".py" else script_strings(source)
    mine = owner(path)
    return [
        f"{path.relative_to(ROOT)}:{line}: {name!r} in {text!r}"
        for line, text in strings
        for name in mentions(text)
        if name != mine and not (path == MESH and text in DIMS)
    ]


def test_no_strategy_name_outside_its_package():
    found = [o for path in [*PYTHON, *SCRIPTS] for o in offences(path)]
    assert found == []


@pytest.mark.parametrize(
    "source, found",
    [
        ('x = "ddp"', ["ddp"]),
        ('t("lab.strategy.dataparallel")', ["dataparallel"]),
        ('f"{key}.fsdp"', ["fsdp"]),
        ('train_ddp = "train_ddp"', []),
        ('label = "DistributedDataParallel"; scenario = "ddp3"', []),
        ('def f():\n    """Detail(\'ddp\'): the group."""\n    return 1  # "ddp"', []),
    ],
)
def test_what_counts_as_a_name_in_python(source, found):
    assert [n for _, text in python_strings(source) for n in mentions(text)] == found


@pytest.mark.parametrize(
    "source, found",
    [
        ('const key = "ddp";', ["ddp"]),
        ("t(`live.${'ddp'}.load`)", ["ddp"]),
        ("const k = drawers[spec.drawer]; // the ddp drawer", []),
        ("/* 'fsdp' */ const a = 'dataparallel_x';", []),
    ],
)
def test_what_counts_as_a_name_in_scripts(source, found):
    assert [n for _, text in script_strings(source) for n in mentions(text)] == found


def test_a_package_may_name_itself_and_only_itself():
    ddp_view = ROOT / "fitcore" / "strategies" / "ddp" / "view.py"
    assert owner(ddp_view) == "ddp" and owner(ROOT / "fitcore" / "strategies" / "__init__.py") is None
