"""The one error type for bad input, at the bottom of the library so that every layer can raise it."""

from __future__ import annotations

import sys
from typing import Any


class ConfigError(ValueError):
    """A bad setting. The message names the field, the value given and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(self.named(field))

    def named(self, name: str) -> str:
        """The message with the field called `name`: the page's label ("Batch size"), the CLI's flag."""
        return f"{name}: got {_shown(self.value)}; allowed: {self.allowed}"


def _shown(value: Any) -> str:
    try:
        return repr(value)
    except ValueError:  # an int (or a container of one) of more digits than Python turns into text
        digits = f"an integer of more than {sys.get_int_max_str_digits()} digits"
        return digits if isinstance(value, int) else f"a {type(value).__name__} holding {digits}"
