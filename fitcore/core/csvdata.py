"""Your own data: a CSV file read, checked and refused line by line, its columns standardised, its checksum.

A run on a CSV file carries the file's path and SHA-256 in its FitConfig (`data`, `data_sha256`), never the
arrays, so that every consumer reads the same rows: the trainer, each spawned DDP rank, the least-squares
reference. `resolve` reads the file once at validation and fills in the config (columns, rows, checksum);
`arrays` reads it again wherever the data is needed, and refuses a file that has changed since.

Bounds, checked before the rows are parsed: at most MAX_BYTES bytes (64 MiB, also the page's upload limit
in .streamlit/config.toml), MAX_COLUMNS columns (256) and MAX_ROWS data rows (1,000,000). Only the target and
the feature columns are parsed, once the header has named them: at most MAX_ROWS x 17 float64 numbers
(136 MB at 16 features), whatever the other columns; then the run holds the float32 copy
fitcore.core.config.estimate_bytes counts. `load` keeps the tables of the last CACHED_TABLES files read, and
`forget` drops a replaced upload's at once.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import math
import os
import re
import stat
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from fitcore.core.errors import ConfigError, Text
from fitcore.core.uploads import shown_path

MAX_BYTES = 64 * 2**20  # the largest CSV file, in bytes (the page's upload limit says 64 MB)
MAX_ROWS = 1_000_000  # the most data rows, the header not counted
MAX_FEATURES = 16  # feature columns, as fitcore.core.config.MAX_FEATURES
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
    return ConfigError("data", shown_path(path), allowed)  # as given; an upload by its own name


def _read_bytes(path: str) -> bytes:
    try:
        # O_NONBLOCK: a FIFO opens at once, writer or not, and is refused below rather than hang the read
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):  # a FIFO, a device, a folder: no CSV file with a size to read
                raise _refuse(path, Text("csv.regular", kind=_kind(mode)))
            f = open(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            size = os.fstat(fd).st_size
            if size > MAX_BYTES:
                raise _refuse(path, Text("csv.too_big", most=MAX_BYTES, size=size))
            raw = f.read(size + 1)  # not read(MAX_BYTES + 1), which allocates 64 MiB for any file
            if len(raw) > size:  # it grew after the size was read: enough more to know whether it is too big
                raw += f.read(MAX_BYTES + 1 - len(raw))
            return raw
    except OSError as exc:
        raise _refuse(path, Text("csv.readable", why=exc.strerror or exc)) from None


def _kind(mode: int) -> Text:
    """What a path that is no regular file is, in words: a folder, a FIFO, a device, a socket."""
    for test, key in ((stat.S_ISDIR, "dir"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return Text(f"csv.kind.{key}")
    return Text("csv.kind.device")


def _split(path: str, lines, first: int = 1) -> list[list[str]]:
    """csv.reader's rows of `lines` (the file's line `first` on), a cell over the csv module's limit refused
    in one line."""
    reader = csv.reader(lines)
    try:
        return list(reader)
    except csv.Error:  # "field larger than field limit (131072)"
        line = first + reader.line_num - 1
        raise _refuse(path, Text("csv.long_cell", most=csv.field_size_limit(), line=line)) from None


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
    """A number as fitcore reads one, in ASCII: float() also reads "١٢" and "１２"; the parse does not."""
    try:
        float(text)
    except ValueError:
        return False
    return text.isascii()


def _lines(text: str):
    """The file's lines that are not empty, one at a time (splitlines would make a list of the whole file);
    the first is the header's."""
    return (m.group() for m in re.finditer(r"[^\r\n]+", text))


def _header(path: str, text: str) -> list[str]:
    first = next(_lines(text))
    names = [n.strip() for n in _split(path, [first])[0]]
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


# The largest cell taken: sums of squares over a million rows stay within float32 (3.4e38), where 1e300
# gave W = [nan, nan] and a "finished" run. A word the C parser reads as a number (True, False) is none.
MAX_CELL = 1e15
_BOOLEAN = re.compile(rb"(?i)\b(?:true|false)\b")


def _cells(path: str, raw: bytes, text: str, names: list[str], used: list[str]) -> np.ndarray:
    """The data rows of the `used` columns as float64, (N, len(used)) in `used`'s order; refuse the first
    cell of them that is not a finite number.

    Only the used columns are parsed (pandas' usecols): a file of 256 columns of which a run uses 17 costs
    the 17. The C parser reads a good file straight into float64 from its bytes (a StringIO of the text
    would hold 4 bytes a character); only a file it refuses is read again as text, to name the line and the
    column of the first bad cell.
    """
    import pandas as pd

    options = dict(
        header=0, names=names, usecols=used, skip_blank_lines=True, nrows=MAX_ROWS + 1, skipinitialspace=True,
        encoding="utf-8-sig",
    )  # fmt: skip
    try:
        frame = pd.read_csv(io.BytesIO(raw), dtype=np.float64, keep_default_na=False, **options)
        cells = frame[used].to_numpy(dtype=np.float64)
    except (pd.errors.ParserError, ValueError, TypeError):
        cells = None
    # not a finite number of at most MAX_CELL, or maybe a True/False the C parser took as 1/0: read the
    # cells again as text to name the first bad one (a "true" in the header or an unused column is none)
    if cells is None or not (np.abs(cells) <= MAX_CELL).all() or _BOOLEAN.search(raw):
        try:
            frame = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False, **options)
        except (pd.errors.ParserError, ValueError) as exc:
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise _refuse(
                path, Text("csv.ragged", detail=detail)
            ) from None
        _first_bad_cell(path, text, frame, [n for n in names if n in used])
        if cells is None:
            raise _refuse(path, Text("csv.numbers"))  # the C parser refused what the text read accepts
    if len(cells) > MAX_ROWS:
        raise _refuse(path, Text("csv.too_many_rows", most=MAX_ROWS))
    if len(cells) == 0:
        raise _refuse(path, Text("csv.no_rows"))
    if len(cells) == 1:  # no split and no line to fit: the file is what is wrong, not the devices
        raise _refuse(path, Text("csv.one_row"))
    return cells


BLOCK_BYTES = 2**20  # the line check counts cells in blocks of about this many bytes


def _check_lines(path: str, raw: bytes, columns: int) -> None:
    """Refuse the first line (blank lines aside) that has not `columns` cells.

    The parse reads only the used columns, and pandas does not count the cells of the others: the commas of
    each line are counted here instead, from the file's bytes a block at a time (a few MiB of counts, however
    big the file). A file with quotes (a comma may sit inside a cell) or without \\n line ends is read by
    the csv module.
    """
    if b'"' in raw or b"\n" not in raw:
        reader = csv.reader(io.StringIO(raw.decode("utf-8-sig")))
        try:
            for row in reader:
                if any(c.strip() for c in row) and len(row) != columns:
                    _refuse_line(path, reader.line_num, len(row), columns)
        except csv.Error as exc:
            raise _refuse(path, Text("csv.ragged", detail=f"line {reader.line_num}: {exc}")) from None
        return
    line, start = 0, 0
    while start < len(raw):
        end = raw.find(b"\n", start + BLOCK_BYTES)
        end = len(raw) if end < 0 else end + 1
        block = np.frombuffer(raw, np.uint8, count=end - start, offset=start)
        ends = np.flatnonzero(block == 10)
        if ends.size == 0 or ends[-1] != block.size - 1:
            ends = np.append(ends, block.size - 1)  # the file's last line, without a line end
        bounds = np.concatenate(([0], ends + 1))  # each line is block[bounds[i]:bounds[i + 1]]
        commas = np.concatenate(([0], np.cumsum(block == ord(","), dtype=np.int32)))[bounds]
        solid = np.concatenate(([0], np.cumsum(block > ord(" "), dtype=np.int32)))[bounds]
        cells = np.diff(commas) + 1
        bad = np.flatnonzero((np.diff(solid) > 0) & (cells != columns))
        if bad.size:
            _refuse_line(path, line + int(bad[0]) + 1, int(cells[bad[0]]), columns)
        line += ends.size
        start = end


def _refuse_line(path: str, line: int, found: int, columns: int) -> None:
    detail = Text("csv.ragged_line", line=line, found=found, columns=columns)
    raise _refuse(path, Text("csv.ragged", detail=detail))


def _first_bad_cell(path: str, text: str, frame: Any, names: list[str]) -> None:
    """Raise the refusal of the first cell of `frame` (read as text) that is not a finite number of at most
    MAX_CELL; return where there is none."""
    import pandas as pd

    if len(frame) > MAX_ROWS:
        raise _refuse(path, Text("csv.too_many_rows", most=MAX_ROWS))
    for name in names:
        column = frame[name].str.strip()
        numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)  # True, "": NaN
        bad = ~(np.abs(numbers) <= MAX_CELL)
        if bad.any():
            i = int(np.argmax(bad))
            cell = column.iloc[i]
            what = Text("csv.empty_cell") if cell == "" else repr(cell)
            if not _is_number(cell):
                kind = Text("csv.not_a_number")
            elif np.isfinite(numbers[i]):
                kind = Text("csv.too_large", most="1e15")
            else:
                kind = Text("csv.not_finite")
            line = _line_numbers(text, i + 1)[i]
            raise _refuse(
                path, Text("csv.bad_cell", line=line, name=repr(name), what=what, kind=kind)
            )


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
    _check_lines(path, raw, len(names))
    cells = _cells(path, raw, text, names, [*chosen, target])  # (N, d + 1): the features, then the target
    X = np.ascontiguousarray(cells[:, : len(chosen)])  # (N, d)
    y = np.ascontiguousarray(cells[:, len(chosen)])  # (N,)
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
    lines = list(itertools.islice((line for line in _lines(text) if line.strip()), 1, rows + 1))
    return tuple(names), [[c.strip() for c in cells] for cells in _split(path, lines, 2)]


CACHED_TABLES = 2  # tables kept by load: the file in use and the one before it (validation and training)
_tables: OrderedDict[tuple, Table] = OrderedDict()  # by (path, target, features, (size, mtime)), oldest first
_tables_lock = threading.Lock()


def load(path: str, target: str, features: tuple[str, ...] = ()) -> Table:
    """read_table, read once per version of the file in this process (validation and training share it)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _refuse(path, Text("csv.readable", why=exc.strerror or exc)) from None
    key = (str(path), target, tuple(features), (st.st_size, st.st_mtime_ns))
    with _tables_lock:
        if key in _tables:
            _tables.move_to_end(key)
            return _tables[key]
    table = read_table(path, target, features)  # outside the lock: another file is read meanwhile
    with _tables_lock:
        _tables[key] = table
        while len(_tables) > CACHED_TABLES:
            _tables.popitem(last=False)
    return table


def forget(path: str) -> None:
    """Drop the tables kept for `path` (an upload replaced by another): their arrays are freed once no run
    holds them, not when two more files have been read."""
    with _tables_lock:
        for key in [k for k in _tables if k[0] == str(path)]:
            del _tables[key]


def cached_paths() -> list[str]:
    """The files whose tables load keeps, oldest first."""
    with _tables_lock:
        return [k[0] for k in _tables]


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
        raise ConfigError("data", shown_path(cfg.data), Text("csv.changed", sha=cfg.data_sha256[:12]))
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
