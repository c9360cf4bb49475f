"""The command line's reference, in either language, made from the parsers themselves: every command's
`--help`, word for word, so that the documentation site's page and `--help` cannot differ.

The site's build runs it (mkdocs_hooks.py puts it where docs/reference/cli.md says
`<!-- fitcore:cli-reference -->`); tests/test_docs_site.py checks the built page against it.
"""

from __future__ import annotations

import contextlib
import io
import os

from fitcore.core.i18n import t

COMMANDS = ((), ("replay",), ("examples",), ("check",), ("compare",), ("whatif",))
WIDTH = "100"  # the help's line width on the page (argparse wraps to $COLUMNS)
MARKER = "<!-- fitcore:cli-reference -->"


def command_help(command: tuple[str, ...], lang: str) -> str:
    """What `python -m fitcore <command> --lang <lang> --help` prints."""
    from fitcore.cli import main

    out = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([*command, "--lang", lang, "--help"])
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return out.getvalue().rstrip()


def reference(lang: str) -> str:
    """Every command's help, each under its command line, as Markdown."""
    parts = []
    for command in COMMANDS:
        line = " ".join(("python -m fitcore", *command))
        parts += [f"### `{line}`", "", "```text", command_help(command, lang), "```", ""]
    parts.append(t("docs.cli.serve", lang))
    return "\n".join(parts)
