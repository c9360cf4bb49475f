"""Counts as people read them ("1 step", "2 steps"): one helper for every line and page, importing nothing."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 step", "2 steps": a count with its noun (`many` where adding an s is wrong: "processes")."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def rate(per_second: float, word: str = "step") -> str:
    """ "1 step/s", "20 steps/s": a speed rounded to a whole number, with its noun to match."""
    n = f"{per_second:.0f}"
    return f"{n} {word if n == '1' else word + 's'}/s"
