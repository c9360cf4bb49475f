"""The words people read, in English and Chinese: one keyed catalog that Python and the browser both read.

Every text of the page, the command line and the live view is a key in a JSON file of `fitcore/core/locales/`
(one file per area: `page.json`, `cli.json`, `live.json`, ...) or in a registered strategy's own catalog
(its `locale`, a `locale.json` beside its package), each key holding its English and its Chinese:

    {"run.start": {"en": "Start training", "zh": "开始训练"}}

`t("run.start")` gives the text in the current language. The current language is a context variable, so a
Streamlit script run, a request of the live route and the command line each set their own and never see
another's. API names (`scatter`, `nn.DataParallel`, `all_reduce`) stay in English in both languages, as in
Chinese course material, with a Chinese gloss beside them.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from pathlib import Path
from typing import Any, Iterator, Mapping

from fitcore.protocols import registry

LANGUAGES = {"en": "English", "zh": "中文"}  # code -> the language's own name, for the language control
DEFAULT = "en"
LOCALES = Path(__file__).parent / "locales"

_current: ContextVar[str] = ContextVar("fitcore_language", default=DEFAULT)


def catalog() -> dict[str, dict[str, str]]:
    """Every key of every file in `fitcore/core/locales/` and of every registered strategy's catalog, merged;
    a key in two files is a mistake and raises. Read again only when a strategy is registered."""
    return _catalog(tuple(s.locale for s in registry.STRATEGIES.values()))


@cache
def _catalog(strategy_locales: tuple[str, ...]) -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for path in [*sorted(LOCALES.glob("*.json")), *map(Path, strategy_locales)]:
        for key, entry in json.loads(path.read_text(encoding="utf-8")).items():
            if key in merged:
                raise ValueError(f"{path.name}: key {key!r} is defined twice in fitcore's catalogs")
            merged[key] = entry
    return merged


def language(value: Any) -> str | None:
    """The catalog's code for a language as browsers, links and `LANG` spell it, or None for one it lacks.

    "zh", "zh-CN", "zh_CN.UTF-8", "zh-Hans" -> "zh"; "en", "en-US", "C.UTF-8" -> "en" only for en*.
    """
    if not isinstance(value, str):
        return None
    code = value.strip().replace("_", "-").split(".")[0].split("-")[0].lower()
    return code if code in LANGUAGES else None


def from_env(env: Mapping[str, str] | None = None) -> str:
    """The command line's language from the locale variables, in POSIX order of precedence."""
    env = os.environ if env is None else env
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if env.get(name):
            return language(env[name]) or DEFAULT
    return DEFAULT


def current() -> str:
    return _current.get()


def set_language(lang: str) -> None:
    """Use `lang` from here on in this thread or task (a Streamlit script run sets it once at its top)."""
    _current.set(lang if lang in LANGUAGES else DEFAULT)


@contextmanager
def using(lang: str) -> Iterator[None]:
    """Use `lang` inside the block only."""
    token = _current.set(lang if lang in LANGUAGES else DEFAULT)
    try:
        yield
    finally:
        _current.reset(token)


def t(key: str, /, lang: str | None = None, **fields: Any) -> str:
    """The text of `key` in `lang` (the current language by default), with `{fields}` filled in.

    A key missing from the catalog raises KeyError: the tests read every key in both languages, so a text
    that bypasses the catalog or a key that was never written fails there, not in front of a class.
    """
    entry = catalog()[key]
    text = entry.get(lang or _current.get()) or entry[DEFAULT]
    if not fields:
        return text
    # an int too long to read (a product of two huge flags) is quoted by its start and its length
    return text.format(**{k: _long_int(v) if _is_long_int(v) else v for k, v in fields.items()})


LONG_DIGITS = 24  # an int of more digits is shown as "7777…(4300 digits)": Python prints not all of them


def _is_long_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**LONG_DIGITS


def digits(n: int) -> int:
    """How many decimal digits abs(n) has, counted without str(n): Python refuses to print an int of over
    sys.get_int_max_str_digits() digits, and an error that quotes one must not raise."""
    a, k = abs(n), max(1, int(abs(n).bit_length() * 0.3010299956639812))  # log10(2): k is right or 1 short
    while a >= 10**k:
        k += 1
    while k > 1 and a < 10 ** (k - 1):
        k -= 1
    return k


def int_text(n: int) -> str:
    """An int as a line quotes it: whole up to LONG_DIGITS digits, else its first four and its length."""
    return _long_int(n) if _is_long_int(n) else str(n)


def _long_int(n: int) -> str:
    k = digits(n)
    start = ("-" if n < 0 else "") + str(abs(n) // 10 ** (k - 4))
    return _AsIs(t("config.value.long_int", start=start, digits=k))


class _AsIs(str):
    """Text that a field's format spec leaves as it is ("{n:,}" of a long int is its cut form)."""

    def __format__(self, spec: str) -> str:
        return str(self)


def count(key: str, n: int, /, lang: str | None = None, **fields: Any) -> str:
    """A count with its noun: `key.one` for 1 and `key.other` otherwise ("1 step", "2 steps", "2 步")."""
    return t(f"{key}.{'one' if n == 1 else 'other'}", lang, n=n, **fields)


# the live view's words, and the glossary by which its pills gloss torch's names
BROWSER_PREFIXES = ("live.", "glossary.")


def browser_texts(
    prefix: str | tuple[str, ...] = BROWSER_PREFIXES, lang: str | None = None
) -> dict[str, str]:
    """The keys under `prefix` in one language, for the live view, which formats them itself."""
    lang = lang or _current.get()
    return {k: (e.get(lang) or e[DEFAULT]) for k, e in catalog().items() if k.startswith(prefix)}
