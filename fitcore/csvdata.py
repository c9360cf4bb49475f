"""Your own data: a CSV file read, checked and refused line by line, its columns standardised, its checksum.

A run on a CSV file carries the file's path and SHA-256 in its FitConfig (`data`, `data_sha256`), never the
arrays, so that every consumer reads the same rows: the trainer, each spawned DDP rank, the least-squares
reference. `resolve` reads the file once at validation and fills in the config (columns, rows, checksum);
`arrays` reads it again wherever the data is needed, and refuses a file that has changed since.

Bounds, checked before the rows are parsed: at most MAX_BYTES bytes (64 MiB, also the page's upload limit
in .streamlit/config.toml), MAX_COLUMNS columns (256)
and MAX_ROWS data rows (1,000,000). Parsing keeps at most MAX_ROWS x 17 float64
numbers (136 MB at 16 features), then the run holds the float32 copy fitcore.config.estimate_bytes counts.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import math
import os
from typing import Any, NamedTuple

import numpy as np

from fitcore.errors import ConfigError, Text

MAX_BYTES = 64 * 2**20  # the largest CSV file, in bytes (the page's upload limit says 64 MB)
MAX_ROWS = 1_000_000  # the most data rows, the header not counted
MAX_FEATURES = 16  # feature columns, as fitcore.config.MAX_FEATURES
MAX_COLUMNS = 256  # the most columns a file may have: a run uses 17, and a wide file costs memory per column
SNIFF_BYTES = 8192  # the start of the file checked for binary data


class Table(NamedTuple):
    """The columns of a CSV file that a run uses, as float64 arrays."""

    X: np.ndarray  # (N, d) the feature columns, as in the file
    y: np.ndarray  # (N,) the target column
    features: tuple[str, ...]  # X's column names, in X's order
    target: str
    sha256: str  # of the file's bytes


class Scaling(NamedTuple):
    """Standardisation: X' = (X - mean) / scale column by column, and y' = (y - target_mean) / target_scale.

    The target is scaled as well as the features: Adam moves each parameter by about lr a step, so a
    target far from 0 (a price of 425) would need hundreds of steps at the default rate before the bias got
    there. On y' every least-squares parameter is of order 1, and the default lr 0.5 reaches it.
    """

    mean: tuple[float, ...]
    scale: tuple[float, ...]  # the standard deviation; 1 for a constant column, which it cannot scale
    target_mean: float = 0.0
    target_scale: float = 1.0  # as scale: 1 for a constant target

    def original(self, weights: tuple[float, ...], bias: float) -> tuple[tuple[float, ...], float]:
        """Parameters learned on the standardised data in the file's units.

        y = my + sy·y' = my + sy·(Σ W'·(x - mx) / sx + b'), so W = W'·sy / sx and b = my + sy·b' - Σ W·mx.
        """
        sy = self.target_scale
        w = tuple(wi * sy / si for wi, si in zip(weights, self.scale))
        return w, self.target_mean + sy * bias - sum(wi * mi for wi, mi in zip(w, self.mean))


# ---------------------------------------------------------------------------------------------------------
# Reading and refusing.


def _refuse(path: str, allowed: Text) -> ConfigError:
    return ConfigError("data", os.path.basename(str(path)), allowed)


def _read_bytes(path: str) -> bytes:
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise _refuse(path, Text("csv.readable", why=exc.strerror or exc)) from None
    if size > MAX_BYTES:
        raise _refuse(path, Text("csv.too_big", most=MAX_BYTES, size=size))
    with open(path, "rb") as f:
        return f.read(MAX_BYTES + 1)


def _text(path: str, raw: bytes) -> str:
    """The file as text; binary data (a NUL byte, or bytes that are not UTF-8) is refused."""
    nul = raw.find(b"\0", 0, SNIFF_BYTES)
    if nul >= 0:
        raise _refuse(path, Text("csv.nul", at=nul))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _refuse(
            path, Text("csv.not_utf8", at=exc.start)
        ) from None
    if not text.strip():
        raise _refuse(path, Text("csv.empty"))
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header(path: str, text: str) -> list[str]:
    first = text.lstrip("\r\n").splitlines()[0]
    names = [n.strip() for n in next(csv.reader([first]))]
    if len(names) < 2:
        other = next((sep for sep in ";\t|" if sep in first), None)  # ; where , is the decimal mark
        if other is not None:
            raise _refuse(path, Text("csv.other_separator", sep="tab" if other == "\t" else other))
        raise _refuse(path, Text("csv.one_column"))
    if len(names) > MAX_COLUMNS:
        raise _refuse(path, Text("csv.too_many_columns", most=MAX_COLUMNS, found=len(names)))
    if all(_is_number(n) for n in names if n):
        raise _refuse(path, Text("csv.no_header", first=repr(first[:40])))
    for i, name in enumerate(names, 1):
        if not name:
            raise _refuse(path, Text("csv.unnamed", column=i))
    seen = {n for n in names if names.count(n) > 1}
    if seen:
        raise _refuse(path, Text("csv.twice", name=repr(sorted(seen)[0])))
    return names


def _cells(path: str, text: str, names: list[str]) -> np.ndarray:
    """Every data row as float64, (N, columns); refuse the first cell that is not a finite number.

    The C parser reads a good file straight into float64; only a file it refuses is read again as text,
    to name the line and the column of the first bad cell.
    """
    import pandas as pd

    options = dict(header=0, names=names, skip_blank_lines=True, nrows=MAX_ROWS + 1, skipinitialspace=True)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=np.float64, keep_default_na=False, **options)
        cells = frame.to_numpy(dtype=np.float64)
    except (pd.errors.ParserError, ValueError, TypeError):
        cells = None
    if cells is None or not np.isfinite(cells).all():
        try:
            frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, **options)
        except (pd.errors.ParserError, ValueError) as exc:
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise _refuse(
                path, Text("csv.ragged", detail=detail)
            ) from None
        _first_bad_cell(path, text, frame, names)
    if len(cells) > MAX_ROWS:
        raise _refuse(path, Text("csv.too_many_rows", most=MAX_ROWS))
    if len(cells) == 0:
        raise _refuse(path, Text("csv.no_rows"))
    if len(cells) == 1:  # no split and no line to fit: the file is what is wrong, not the devices
        raise _refuse(path, Text("csv.one_row"))
    return cells


def _first_bad_cell(path: str, text: str, frame: Any, names: list[str]) -> None:
    """Raise the refusal of the first cell of `frame` (read as text) that is not a finite number."""
    import pandas as pd

    if len(frame) > MAX_ROWS:
        raise _refuse(path, Text("csv.too_many_rows", most=MAX_ROWS))
    for name in names:
        column = frame[name].str.strip()
        bad = ~np.isfinite(pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64))
        if bad.any():
            i = int(np.argmax(bad))
            cell = column.iloc[i]
            what = Text("csv.empty_cell") if cell == "" else repr(cell)
            kind = Text("csv.not_finite") if _is_number(cell) else Text("csv.not_a_number")
            line = _line_numbers(text, i + 1)[i]
            raise _refuse(
                path, Text("csv.bad_cell", line=line, name=repr(name), what=what, kind=kind)
            )
    raise _refuse(path, Text("csv.numbers"))  # the C parser refused what the text read accepts


def _line_numbers(text: str, rows: int) -> np.ndarray:
    """The file's line number (1-based, the header's is 1) of each data row; blank lines are skipped."""
    numbers = [i for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    return np.asarray(numbers[1 : rows + 1])


def _columns(
    path: str, names: list[str], target: str, features: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """The target and the feature columns; features () means every other column."""
    if not target:
        raise ConfigError("target", target, Text("csv.target_needed", names=", ".join(names)))
    if target not in names:
        raise ConfigError("target", target, Text("csv.target", names=", ".join(names)))
    chosen = tuple(features) or tuple(n for n in names if n != target)
    for name in chosen:
        if name not in names:
            raise ConfigError("features", ",".join(chosen), Text("csv.features", names=", ".join(names)))
    if target in chosen:
        raise ConfigError("features", ",".join(chosen), Text("csv.not_target", target=repr(target)))
    if len(set(chosen)) != len(chosen):
        raise ConfigError("features", ",".join(chosen), Text("csv.once"))
    if not 1 <= len(chosen) <= MAX_FEATURES:
        raise ConfigError("features", ",".join(chosen), Text("csv.how_many", most=MAX_FEATURES))
    return target, chosen


def read_table(path: str, target: str, features: tuple[str, ...] = ()) -> Table:
    """Read `path` and take its target and feature columns; raise ConfigError naming what is wrong."""
    path = str(path)
    raw = _read_bytes(path)
    if len(raw) > MAX_BYTES:  # it grew after the size was read
        raise _refuse(path, Text("csv.too_big_now", most=MAX_BYTES))
    return _table(path, raw, target, tuple(features))


def _table(path: str, raw: bytes, target: str, features: tuple[str, ...]) -> Table:
    text = _text(path, raw)
    names = _header(path, text)
    target, chosen = _columns(path, names, target, features)
    cells = _cells(path, text, names)
    X = cells[:, [names.index(n) for n in chosen]]  # (N, d)
    y = cells[:, names.index(target)]  # (N,)
    return Table(X, y, chosen, target, hashlib.sha256(raw).hexdigest())


PREVIEW_ROWS = 5  # the first data rows a page shows before a run


def preview(path: str, rows: int = PREVIEW_ROWS) -> tuple[tuple[str, ...], list[list[str]]]:
    """The file's column names and its first `rows` data rows as text, for a page to show before a run.

    The same refusals as read_table for the file as a whole (size, binary data, empty, no header); the
    cells themselves are checked by the run's validation, which names the first bad one.
    """
    path = str(path)
    text = _text(path, _read_bytes(path))
    names = _header(path, text)
    lines = [line for line in text.lstrip("\r\n").splitlines()[1:] if line.strip()][:rows]
    return tuple(names), [[c.strip() for c in cells] for cells in csv.reader(lines)]


@functools.lru_cache(maxsize=2)
def _cached(path: str, target: str, features: tuple[str, ...], stamp: tuple[int, int]) -> Table:
    """read_table, kept for the file as it was at `stamp` (size, mtime): validation and training share it."""
    return read_table(path, target, features)


def load(path: str, target: str, features: tuple[str, ...] = ()) -> Table:
    """read_table, read once per version of the file in this process."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _refuse(path, Text("csv.readable", why=exc.strerror or exc)) from None
    return _cached(str(path), target, tuple(features), (st.st_size, st.st_mtime_ns))


# ---------------------------------------------------------------------------------------------------------
# Standardising and reaching a run.


def scaling(X: np.ndarray, y: np.ndarray | None = None) -> Scaling:
    """Each column's mean and standard deviation (a constant column keeps scale 1), and the target's if
    given (without it, the target is left as it is: mean 0, scale 1)."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    scale = np.where(std > 0, std, 1.0)
    if y is None:
        return Scaling(tuple(float(m) for m in mean), tuple(float(s) for s in scale))
    y_std = float(np.std(y))
    return Scaling(
        tuple(float(m) for m in mean),
        tuple(float(s) for s in scale),
        float(np.mean(y)),
        y_std if y_std > 0 else 1.0,
    )


def training_arrays(cfg: Any) -> tuple[np.ndarray, np.ndarray, Scaling | None]:
    """The run's (X (N, d), y (N, 1)) in float64, features and target standardised if cfg.standardize, and
    the scaling used.

    Refuses a file whose checksum is not the one the config was validated with: each DDP rank reads the
    file itself and must see the very rows the parent saw.
    """
    table = load(cfg.data, cfg.target, cfg.features)
    if cfg.data_sha256 and table.sha256 != cfg.data_sha256:
        raise ConfigError(
            "data",
            os.path.basename(cfg.data),
            Text("csv.changed", sha=cfg.data_sha256[:12]),
        )
    X, y = table.X, table.y.reshape(-1, 1)
    if not cfg.standardize:
        return X, y, None
    s = scaling(X, y)
    return (X - np.asarray(s.mean)) / np.asarray(s.scale), (y - s.target_mean) / s.target_scale, s


def run_scaling(cfg: Any) -> Scaling | None:
    """The standardisation of cfg's run, or None (synthetic data, or --no-standardize)."""
    if not cfg.data or not cfg.standardize:
        return None
    table = load(cfg.data, cfg.target, cfg.features)
    return scaling(table.X, table.y)


def lstsq_numpy(X: np.ndarray, y: np.ndarray) -> tuple[tuple[float, ...], float]:
    """The least-squares (W, b) of y on [X, 1], float64."""
    A = np.hstack([X, np.ones((X.shape[0], 1))])
    solution = np.linalg.lstsq(A, y.reshape(-1), rcond=None)[0]
    return tuple(float(v) for v in solution[:-1]), float(solution[-1])


def resolve(cfg: Any) -> Any:
    """cfg with its CSV source filled in: the feature columns, the rows, the checksum, and as "true"
    parameters the least-squares answer on the run's (possibly standardised) data, the only truth a file has.

    Raises ConfigError for a file, a target or features that cannot be used.
    """
    from dataclasses import replace

    table = load(cfg.data, cfg.target, cfg.features)
    cfg = replace(cfg, features=table.features, data_size=len(table.y), data_sha256=table.sha256)
    X, y, _ = training_arrays(cfg)
    weights, bias = lstsq_numpy(X, y)
    if not all(math.isfinite(v) for v in (*weights, bias)):
        raise _refuse(cfg.data, Text("csv.lstsq"))
    return replace(cfg, weights=weights, bias=bias, noise=0.0)


def source(cfg: Any) -> dict[str, Any]:
    """A validated CSV run's data source, as plain data (a recording's header keeps it, so that a replay can
    give the parameters in the file's units without the file): file name, checksum, columns, standardisation.
    """
    s = run_scaling(cfg)
    out: dict[str, Any] = {
        "file": os.path.basename(cfg.data),
        "sha256": cfg.data_sha256,
        "target": cfg.target,
        "features": list(cfg.features),
        "rows": cfg.data_size,
        "standardized": s is not None,
    }
    if s is not None:
        out.update(
            mean=list(s.mean), scale=list(s.scale), target_mean=s.target_mean, target_scale=s.target_scale
        )
    return out


def data_result(source: dict[str, Any], weights: tuple[float, ...], bias: float) -> dict[str, Any]:
    """source() with the learned parameters in the file's units (weights_original, bias_original)."""
    out = dict(source)
    if source.get("standardized") and weights:
        # a source without the target's scaling (an older recording) trained on the target as it was
        s = Scaling(
            tuple(source["mean"]),
            tuple(source["scale"]),
            float(source.get("target_mean", 0.0)),
            float(source.get("target_scale", 1.0)),
        )
        w, b = s.original(tuple(weights), bias)
    else:
        w, b = tuple(weights), bias
    out.update(weights_original=list(w), bias_original=b)
    return out
