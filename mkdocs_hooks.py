"""The documentation site's build hooks (mkdocs.yml's `hooks`): the generated parts of its pages."""

from __future__ import annotations

import fitcore  # noqa: F401 - the top floor first: the strategies registered before the parsers are built
from fitcore import clidoc


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The command line's reference, where a page asks for it, in the page's language."""
    if clidoc.MARKER not in markdown:
        return markdown
    lang = "zh" if page.file.src_uri.endswith(".zh.md") else "en"
    return markdown.replace(clidoc.MARKER, clidoc.reference(lang))
