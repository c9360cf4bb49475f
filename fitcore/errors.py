"""The one error type for bad input, at the bottom of the library so that every layer can raise it."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A bad setting. The message names the field, the value given and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}: got {value!r}; allowed: {allowed}")
