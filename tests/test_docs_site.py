"""The documentation site (mkdocs.yml, docs/): built with `mkdocs build --strict` (no broken link, no missing
page, no warning), its command-line reference the parsers' own `--help`, every page in both languages but the
ones listed here, and every page in the navigation.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fitcore import clidoc

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# the pages with no Chinese translation (the site falls back to English for them): measurement logs, and
# the architecture, whose layout table tests/test_layout.py reads
UNTRANSLATED = ["architecture.md", "performance.md", "reliability.md", "scaling.md"]


def nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        for value in item.values():
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


class Loader(yaml.SafeLoader):
    pass


Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)


def config() -> dict:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def english_pages() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if not p.name.endswith(".zh.md"))


def test_every_page_is_in_the_navigation_and_the_untranslated_ones_are_these():
    assert sorted(nav_pages(config()["nav"])) == english_pages()
    missing = [page for page in english_pages() if not (DOCS / page.replace(".md", ".zh.md")).exists()]
    print("pages with no Chinese translation:", ", ".join(missing))
    assert missing == UNTRANSLATED


HREF = re.compile(r'href="([^"]*)"')
OUTSIDE = ("http:", "https:", "#", "mailto:", "data:", "javascript:")


@pytest.mark.slow  # about 5 s on 2 cores
def test_the_site_builds_strictly_and_its_cli_reference_is_the_parsers_help(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    for lang, root in (("en", site), ("zh", site / "zh")):
        built = html.unescape((root / "reference" / "cli.html").read_text(encoding="utf-8"))
        assert clidoc.MARKER not in built
        for command in clidoc.COMMANDS:
            lines = [line.strip() for line in clidoc.command_help(command, lang).splitlines() if line.strip()]
            assert all(line in built for line in lines), (lang, command)  # its --help, line by line
        assert (root / "strategies" / "tp.html").exists()
    assert (site / "img" / "tp.png").exists()
    # opened from a folder (a classroom without network), every link between pages names a file: a link to
    # a folder would list the folder instead of opening its page
    hrefs = {h for page in site.rglob("*.html") for h in HREF.findall(page.read_text(encoding="utf-8"))}
    local = {h for h in hrefs if not h.startswith(OUTSIDE)}
    assert len(local) > 50 and [h for h in local if h.split("#")[0].endswith("/") or h in (".", "..")] == []
