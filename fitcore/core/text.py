"""Counts as people read them ("1 step", "2 steps") and text widths: helpers for every line and page."""

from __future__ import annotations

import unicodedata


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 step", "2 steps": a count with its noun (`many` where adding an s is wrong: "processes")."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def width(text: str) -> int:
    """Columns `text` takes in a terminal: a Chinese character takes two, so tables line up in Chinese."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, columns: int, right: bool = False) -> str:
    """`text` padded with spaces to `columns` terminal columns, on the right (or the left with right=True)."""
    fill = " " * max(0, columns - width(text))
    return fill + text if right else text + fill


def rate(per_second: float, word: str = "step") -> str:
    """ "1 step/s", "20 steps/s": a speed rounded to a whole number, with its noun to match."""
    n = f"{per_second:.0f}"
    return f"{n} {word if n == '1' else word + 's'}/s"


def format_bytes(n: float) -> str:
    """ "12 B", "1.6 kB", "24 MB": bytes as the live view writes them (frontend/format.js formatBytes)."""
    if n < 1000:
        return f"{round(n)} B"
    for scale, unit in ((1e6, "kB"), (1e9, "MB")):
        if n < scale:
            value = n / (scale / 1000)
            return f"{value:.{1 if value < 10 else 0}f} {unit}"
    return f"{n / 1e9:.1f} GB"
