"""A declared shape for JSON data read from outside (a recording's events and details): every field typed,
every number finite, every list and text bounded.

A check is called with the value and where it sits (`value.hosts[2]`), and returns the value as the program
may use it, or raises SchemaError naming that place, what was expected and what was found:

    MEMORY = List(Obj({"rank": Int(0), "parameters": Int(0)}, optional={"allocated": Int(0)}), most=64)
    MEMORY([{"rank": 0, "parameters": 12}], "value")      # -> [{"rank": 0, "parameters": 12}]
    MEMORY("12 B", "value")                                # SchemaError: value: a list, found '12 B'

An object keeps only its declared fields: what the program reads later is exactly what was checked here.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Protocol

MAX_TEXT = 100_000  # characters in one text field (a console line block is a few hundred)
MAX_ITEMS = 1 << 20  # items in one list (a batch's row ids; fitcore's data size is bounded far below)
MAX_INT = 2**53  # an integer beyond a float's exact range is no count, step or byte figure fitcore writes


class SchemaError(ValueError):
    """JSON that is not of its declared shape: where, what was expected, what was found (cut short)."""

    def __init__(self, where: str, expected: str, found: Any):
        self.where, self.expected = where, expected
        super().__init__(f"{where}: {expected}, found {shown(found)}")


def shown(value: Any) -> str:
    """A value as an error line quotes it: 40 characters at most, a long list or object by its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        return "an integer of more than 24 digits"
    if isinstance(value, (dict, list)) and len(value) > 8:  # never repr a huge list to cut it afterwards
        text = ""
    else:
        try:
            text = repr(value)
        except ValueError:  # a list holding an int of more digits than Python prints
            text = ""
    if isinstance(value, (dict, list)) and not 0 < len(text) <= 40:
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)}"
    return text if len(text) <= 40 else text[:37] + "..."


class Check(Protocol):
    def __call__(self, value: Any, where: str) -> Any: ...


class Num:
    """A finite number (an int or a float, never a bool), as a float; within [least, most] when given."""

    def __init__(self, least: float = -math.inf, most: float = math.inf):
        self.least, self.most = least, most

    def __call__(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(where, "a number", value)
        try:
            number = float(value)
        except OverflowError:  # an int beyond float's range
            raise SchemaError(where, "a finite number", value) from None
        if not math.isfinite(number):
            raise SchemaError(where, "a finite number", value)
        if not self.least <= number <= self.most:
            raise SchemaError(where, _between("a number", self.least, self.most, math.inf), value)
        return number


class Int:
    """An integer (never a bool) from `least` to `most`."""

    def __init__(self, least: int = -MAX_INT, most: int = MAX_INT):
        self.least, self.most = least, most

    def __call__(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(where, "an integer", value)
        if not self.least <= value <= self.most:
            raise SchemaError(where, _between("an integer", self.least, self.most, MAX_INT), value)
        return value


def _between(kind: str, least: float, most: float, unbounded: float) -> str:
    """"an integer of at least 0" where the top is no bound anyone would read, else "from 1 to 64"."""
    if most >= unbounded:
        return f"{kind} of at least {least:g}"
    return f"{kind} from {least:g} to {most:g}"


class Str:
    """Text of at most `most` characters."""

    def __init__(self, most: int = MAX_TEXT):
        self.most = most

    def __call__(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise SchemaError(where, "text", value)
        if len(value) > self.most:
            raise SchemaError(where, f"text of at most {self.most} characters", f"{len(value)} characters")
        return value


class Bool:
    def __call__(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise SchemaError(where, "true or false", value)
        return value


class Opt:
    """`check`'s value, or null."""

    def __init__(self, check: Check):
        self.check = check

    def __call__(self, value: Any, where: str) -> Any:
        return None if value is None else self.check(value, where)


class List:
    """A list of `least` to `most` items, each of `item`'s shape."""

    def __init__(self, item: Check, most: int = MAX_ITEMS, least: int = 0):
        self.item, self.most, self.least = item, most, least

    def __call__(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            raise SchemaError(where, "a list", value)
        if not self.least <= len(value) <= self.most:
            what = f"exactly {self.least}" if self.least == self.most else f"{self.least} to {self.most}"
            raise SchemaError(where, f"a list of {what} items", value)
        return [self.item(v, f"{where}[{i}]") for i, v in enumerate(value)]


class Obj:
    """An object with every field of `fields` and any of `optional`; other fields are dropped."""

    def __init__(self, fields: Mapping[str, Check], optional: Mapping[str, Check] | None = None):
        self.fields, self.optional = dict(fields), dict(optional or {})

    def __call__(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise SchemaError(where, "an object", value)
        missing = [name for name in self.fields if name not in value]
        if missing:
            raise SchemaError(f"{where}.{missing[0]}", "a field that is there", "none")
        checked = {name: check(value[name], f"{where}.{name}") for name, check in self.fields.items()}
        for name, check in self.optional.items():
            if name in value:
                checked[name] = check(value[name], f"{where}.{name}")
        return checked


# Shapes that more than one detail holds.
COUNT = Int(0)
BYTES = Int(0)
RANK = Int(0, 1 << 16)
ROWS = List(Int(0))  # dataset row ids
MEMORY_ROW = Obj(
    {"rank": RANK, "parameters": BYTES, "gradients": BYTES, "optimizer_state": BYTES},
    # "gathered": DataParallel's device 0, the outputs and loss it gathers during a step
    optional={"allocated": BYTES, "gathered": BYTES},
)
MAX_RANKS = 1 << 16  # ranks a strategy's detail may list (a recorded run names at most 64 devices)
SHARD = Obj({"weights": List(Num()), "bias": List(Num(), most=1)})  # the parameters a rank holds


def finite_or_none(value: Any) -> Any:
    """JSON has no inf or NaN: a value that is no longer finite (a diverged run's) becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    return value


def dumps(value: Any, **options: Any) -> str:
    """Strict JSON, the only kind fitcore prints or writes (every `--json`, a recording's lines): a value
    that is not finite is null, never `NaN` or `Infinity`, which strict parsers refuse."""
    return json.dumps(finite_or_none(value), allow_nan=False, **options)
