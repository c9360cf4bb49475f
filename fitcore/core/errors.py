"""The one error type for bad input, at the bottom of the library so that every layer can raise it."""

from __future__ import annotations

import sys
from typing import Any

from fitcore.core.i18n import int_text, t


class Text:
    """A catalog text that is put into words when it is read: `str()` renders it in the language current
    then, so an error raised before the page or the command line chose its language still reads in it.

    Fields may be Texts themselves ("at most {steps} in all", steps = Text.count("count.step", 300)).
    """

    __slots__ = ("key", "fields")

    def __init__(self, key: str, /, **fields: Any):
        self.key, self.fields = key, fields

    @classmethod
    def count(cls, key: str, n: int) -> "Text":
        """A count with its noun, as i18n.count renders it: "1 step", "2 steps", "2 步"."""
        return cls(f"{key}.{'one' if n == 1 else 'other'}", n=n)

    def __str__(self) -> str:
        return t(self.key, **{k: str(v) if isinstance(v, Text) else v for k, v in self.fields.items()})

    def __repr__(self) -> str:
        return f"Text({self.key!r}, **{self.fields!r})"

    def __eq__(self, other: object) -> bool:  # a value: two events with the same message are equal
        if type(other) is not type(self):
            return NotImplemented
        return (self.key, self.fields) == (other.key, other.fields)

    def __hash__(self) -> int:
        return hash((self.key, tuple(sorted(self.fields.items()))))

    def data(self) -> dict[str, Any]:
        """The key and the fields as JSON data, a field that is a Text nested the same way (a recording's)."""
        fields = {k: v.data() if isinstance(v, Text) else v for k, v in self.fields.items()}
        return {"key": self.key, "fields": fields}

    def __reduce__(self):  # a rank's error crosses to its parent: keep the key, not the words
        return _text, (self.key, self.fields)


def _text(key: str, fields: dict) -> Text:
    return Text(key, **fields)


class Listed(Text):
    """Names joined by a separator of the catalog: "adam or sgd", "adam 或 sgd"."""

    def __init__(self, items, separator: str = "config.sep.or"):
        super().__init__(separator, items=tuple(map(str, items)))

    def __str__(self) -> str:
        return t(self.key).join(self.fields["items"])

    def __reduce__(self):
        return Listed, (self.fields["items"], self.key)


class ConfigError(ValueError):
    """A bad setting. The message names the field, the value given and what is allowed.

    `allowed` is plain text or a Text; the message is made when it is read (`str(exc)`, `named()`), in
    the language current then.
    """

    def __init__(self, field: str, value: Any, allowed: str | Text):
        self.field, self.value, self._allowed = field, value, allowed
        super().__init__(field, value, allowed)

    @property
    def allowed(self) -> str:
        """What is allowed, in the current language."""
        return str(self._allowed)

    def __str__(self) -> str:
        return self.named(self.field)

    def as_typed(self, value: Any) -> "ConfigError":
        """The same refusal quoting `value`, the text as the user typed it (a switch's "false", not False)."""
        return ConfigError(self.field, value, self._allowed)

    def named(self, name: str) -> str:
        """The message with the field called `name`: the page's label ("Batch size"), the CLI's flag."""
        return t("config.error", name=name, value=_shown(self.value), allowed=self.allowed)


SHOWN_CHARS = 80  # the most of a value an error line quotes: a 10 kB link value stays one readable line


class PathValue(str):
    """A file's path as an error quotes it: a long one is cut at its start, not its end, so that the line
    still names the file ('…/week3/houses.csv'), where another value keeps its beginning."""

    __slots__ = ()


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return int_text(value)  # "7777…(4300 digits)", never a ValueError from printing it
    try:
        text = repr(value)
    except ValueError:  # a container of an int of more digits than Python turns into text
        most = sys.get_int_max_str_digits()
        return f"a {type(value).__name__} holding an integer of more than {most} digits"
    if len(text) <= SHOWN_CHARS:
        return text
    if isinstance(value, PathValue):
        end = ""  # the path's last characters, as many as fit the line once quoted (repr escapes some)
        for char in reversed(str(value)):
            if len(repr(char + end)) > SHOWN_CHARS - 10:
                break
            end = char + end
        if end.find("/", 1) > 0:  # from a folder's start: '…/week3/houses.csv'
            end = end[end.find("/", 1) :]
        quoted = repr(end)
        return t("config.value.cut_path", end=f"{quoted[0]}…{quoted[1:]}", length=len(value))
    if isinstance(value, (list, tuple)):  # weights: their count says more than their characters
        return t("config.value.cut_items", start=text[: SHOWN_CHARS - 8], length=len(value))
    length = len(value) if isinstance(value, str) else len(text)
    return t("config.value.cut", start=text[: SHOWN_CHARS - 8], length=length)
