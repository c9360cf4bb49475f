"""The documentation says what the code does: the command line's flag table is the parser's flags, the
strategies it names are the registered ones, the lesson script lists its presets, and recordings have the
version written (the site's pages, docs/, in English and Chinese).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fitcore.cli import build_parser
from fitcore.protocols import registry
from fitcore.runs import recording
from fitcore.view import controls, link

ROOT = Path(__file__).resolve().parents[1]
READMES = ["docs/reference/cli.md", "docs/reference/cli.zh.md"]  # the flag tables


def flag_rows(text: str) -> list[str]:
    """The rows of the main command's flag table: the first table whose rows start with a flag."""
    rows = [line for line in text.splitlines() if line.startswith("| `--")]
    table, previous = [], None
    for line in text.splitlines():  # the first run of consecutive flag rows
        if line.startswith("| `--"):
            table.append(line)
        elif table:
            break
        previous = line
    assert previous is not None and rows
    return table


def parser_flags() -> list[set[str]]:
    """Each of the main command's flags, by its spellings (--standardize / --no-standardize are one)."""
    return [{s for s in a.option_strings if s.startswith("--")} for a in build_parser()._actions
            if "--help" not in a.option_strings]  # fmt: skip


@pytest.mark.parametrize("readme", READMES)
def test_the_flag_table_is_the_parsers_flags(readme):
    rows = flag_rows((ROOT / readme).read_text(encoding="utf-8"))
    named = {flag for row in rows for flag in re.findall(r"(--[a-z][a-z-]*)", row.split("|")[1])}
    assert [sorted(flag) for flag in parser_flags() if not flag & named] == []  # each flag has its row
    assert named - set().union(*parser_flags()) == set()  # and no row names a flag the parser lacks


@pytest.mark.parametrize("readme", READMES)
def test_the_flag_table_names_every_strategy_and_every_ranked_one(readme):
    rows = flag_rows((ROOT / readme).read_text(encoding="utf-8"))
    (strategy,) = [r for r in rows if r.startswith("| `--strategy")]
    (workers,) = [r for r in rows if r.startswith("| `--workers")]
    assert set(re.findall(r"`(\w+)`", strategy.split("|")[2])) == set(registry.NAMES)
    ranked = {s.name for s in registry.STRATEGIES.values() if s.processes}
    named = set(re.findall(r"`(?:--strategy )?(\w+)`", workers.split("|")[2]))
    assert named == ranked


def test_the_help_names_every_strategy(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    line = text.split("--strategy STRATEGY ")[-1][:80]  # its help, after the usage lines
    assert all(name in line for name in registry.NAMES), line


@pytest.mark.parametrize("readme, lang", [("docs/guide/class.md", "en"), ("docs/guide/class.zh.md", "zh")])
def test_the_lesson_script_lists_its_presets(readme, lang):
    from fitcore.core import i18n

    text = (ROOT / readme).read_text(encoding="utf-8")
    (line,) = [i for i, row in enumerate(text.splitlines()) if "`script=lesson`" in row][:1]
    bullet = " ".join(" ".join(text.splitlines()[line : line + 3]).split())
    keys = controls.SCRIPTS["lesson"]
    assert f"{len(keys)} " in bullet
    with i18n.using(lang):
        titles = [next(p for p in controls.PRESETS if p.key == k).title for k in keys]
    found = [bullet.find(title) for title in titles]
    assert -1 not in found and found == sorted(found)  # every preset, in the order the script plays them


@pytest.mark.parametrize(
    "readme, says",
    [(f"docs/reference/recording{suffix}.md", '"version": {v},') for suffix in ("", ".zh")],
)
def test_the_recording_version_is_the_one_written(readme, says):
    assert says.format(v=recording.VERSION) in (ROOT / readme).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", ["docs/reference/link.md", "docs/reference/link.zh.md"])
def test_the_link_reference_names_every_parameter_the_page_reads(page):
    from fitcore.view import controls

    text = (ROOT / page).read_text(encoding="utf-8")
    named = set(
        re.findall(
            r"`([a-z_]+)`", "\n".join(r.split("|")[1] for r in text.splitlines() if r.startswith("| `"))
        )
    )
    params = {*controls.LABELLED_FIELDS, *link.CLASSROOM_PARAMS, "room"}
    assert params - named == set() and named - params == set()
    assert all(f"`{name}`" in text for name in registry.NAMES)  # every strategy as the link names it


@pytest.mark.parametrize("name", ["README.md", "README.zh-CN.md"])
def test_the_readmes_drawing_of_the_layers_is_the_architecture_pages(name):
    # drawn twice, kept one: the README's mermaid block is the architecture page's, character for character
    def drawing(text: str) -> str:
        blocks = re.findall(r"```mermaid\n.*?```", text, re.S)
        assert len(blocks) == 1, len(blocks)
        return blocks[0]

    readme, page = ((ROOT / n).read_text(encoding="utf-8") for n in (name, "docs/architecture.md"))
    assert drawing(readme) == drawing(page) and "the registry: protocols/registry" in drawing(page)
