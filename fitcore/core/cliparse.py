"""The command line's parser: one-line errors, and every word in the chosen language, argparse's own too.

Every command (`python -m fitcore`, `check`, `compare`, `whatif`, `replay`) takes `--lang zh|en`; without
it the language comes from LC_ALL / LC_MESSAGES / LANG. The language is chosen from the raw arguments
before the parser is built, because argparse takes the help texts when the flags are added.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from fitcore.core import i18n
from fitcore.core.i18n import t

# argparse's own words (it reads them through gettext when it needs them), to their catalog keys
ARGPARSE_WORDS = {
    "usage: ": "cli.argparse.usage",
    "positional arguments": "cli.argparse.positional",
    "options": "cli.argparse.options",
    "show this help message and exit": "cli.argparse.help",
    "argument %(argument_name)s: %(message)s": "cli.argparse.argument",
    "unrecognized arguments: %s": "cli.argparse.unrecognized",
    "not allowed with argument %s": "cli.argparse.not_allowed",
    "ignored explicit argument %r": "cli.argparse.ignored",
    "the following arguments are required: %s": "cli.argparse.required",
    "one of the arguments %s is required": "cli.argparse.one_required",
    "expected one argument": "cli.argparse.one",
    "expected at most one argument": "cli.argparse.at_most_one",
    "expected at least one argument": "cli.argparse.at_least_one",
    "ambiguous option: %(option)s could match %(matches)s": "cli.argparse.ambiguous",
    "invalid %(type)s value: %(value)r": "cli.argparse.invalid",
    "invalid choice: %(value)r (choose from %(choices)s)": "cli.argparse.choice",
}


NEGATIVE_NUMBER = re.compile(
    r"^-(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$|^-(?:inf|infinity|nan)$", re.IGNORECASE
)


@contextmanager
def argparse_words() -> Iterator[None]:
    """Inside the block argparse speaks the current language (it looks its gettext up on every call)."""
    if i18n.current() == i18n.DEFAULT:
        yield
        return
    original = argparse._
    argparse._ = lambda text: t(ARGPARSE_WORDS[text]) if text in ARGPARSE_WORDS else original(text)
    try:
        yield
    finally:
        argparse._ = original


def lang_value(raw: str) -> str:
    """--lang's type: the catalog's code ("zh-CN" -> "zh"), or argparse's one-line error."""
    code = i18n.language(raw)
    if code is None:
        raise argparse.ArgumentTypeError(t("cli.lang.bad", value=raw, allowed=", ".join(i18n.LANGUAGES)))
    return code


def language_of(argv: list[str]) -> str:
    """The language a command line asks for: a valid --lang, else the environment's.

    A bad --lang is left for the parser to refuse, in the environment's language.
    """
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        value = argv[i + 1] if arg == "--lang" and i + 1 < len(argv) else arg.partition("=")[2]
        if (arg == "--lang" or arg.startswith("--lang=")) and i18n.language(value):
            return i18n.language(value)
    return i18n.from_env()


def command(body: Callable[..., int]) -> Callable[..., int]:
    """A command's main(argv=None, ...): `body(argv, ...)` in the language its command line asks for (--lang,
    else LANG), set inside the call only, so a caller (a test, the page) keeps its own language."""

    @functools.wraps(body)
    def main(argv: list[str] | None = None, *args, **kwargs) -> int:
        argv = sys.argv[1:] if argv is None else argv
        with i18n.using(language_of(argv)):
            return body(argv, *args, **kwargs)

    return main


class Parser(argparse.ArgumentParser):
    """A command's parser: a bad flag is one line on stderr and exit status 2; help and errors in the
    current language; `--lang` on every command."""

    def __init__(self, prog: str, **kwargs):
        with argparse_words():
            super().__init__(prog=prog, **kwargs)
        # a value that reads as a negative number is a value, not a flag: argparse's own pattern takes -3 and
        # -0.5 but not -1e3 or -inf ("--bias -inf: expected one argument"), which validate then names
        self._negative_number_matcher = NEGATIVE_NUMBER
        self.add_argument("--lang", type=lang_value, help=t("cli.help.lang"))

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - argparse's, in the current language
        with argparse_words():
            parsed = super().parse_args(args, namespace)
        if parsed.lang:  # what --lang (or argparse's abbreviation, --la zh) chose, for the rest of the run
            i18n.set_language(parsed.lang)
        return parsed

    def format_help(self) -> str:
        with argparse_words():
            return super().format_help()

    def format_usage(self) -> str:
        with argparse_words():
            return super().format_usage()

    def error(self, message: str):
        """Bad flags: one line on stderr and exit status 2, like every other bad input."""
        name = self.prog.removeprefix("python -m ")
        # argparse quotes the words as typed: a line break or control character among them is escaped
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, t("cli.error.usage", name=name, message=message, command=self.prog) + "\n")


def error_line(name: str, message: str) -> str:
    """A refused value, as every command prints it: "fitcore: error: --batch-size: got 300; allowed: ..."."""
    return t("cli.error", name=name, message=message)
