"""The two file readers fuzzed: whatever a CSV file or a recording holds, the reader gives its table (or
recording) or a one-line refusal (ConfigError, RecordingError), never another exception.

Bounded: about 100 examples each, no deadline (a slow CI machine must not turn a pass into a failure).
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore.core import csvdata
from fitcore.core.errors import ConfigError
from fitcore.runs import recording
from fitcore.runs.recording import Recording, RecordingError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = (ROOT / "examples" / "dataparallel-virtual3.fitrec").read_text(encoding="utf-8").splitlines()
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# text that looks like a CSV file: a few cells of numbers, names, blanks and the characters that break them
CELL = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["", " ", "x", "n/a", "nan", "inf", "-inf", "1e999", "0x10", '"1,2"', '"', "١", "²"]),
    st.text(max_size=6),
)
CSV_LINE = st.lists(CELL, min_size=0, max_size=5).map(",".join)
CSV_TEXT = st.lists(CSV_LINE, max_size=8).map("\n".join)


def _write(data: bytes) -> str:
    handle, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(handle, "wb") as f:
        f.write(data)
    return path


def _read_csv(data: bytes, target: str) -> None:
    path = _write(data)
    try:
        table = csvdata.read_table(path, target)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(("data: got ", "target: got ", "features: got "))
        return
    finally:
        os.unlink(path)
    # accepted: finite numbers, one row per line read, a target and 1 to 16 features; every line has the
    # header's cells, as the csv module counts them (the parse reads only the used columns)
    rows = [r for r in csv.reader(io.StringIO(data.decode("utf-8-sig"))) if any(c.strip() for c in r)]
    assert {len(r) for r in rows} == {len(rows[0])}, rows
    assert np.isfinite(table.X).all() and np.isfinite(table.y).all()
    assert table.X.shape == (len(table.y), len(table.features)) and 1 <= len(table.features) <= 16
    assert table.target == target and target not in table.features


@FUZZ
@given(data=st.binary(max_size=300), target=st.sampled_from(["a", "y", ""]))
def test_any_bytes_as_a_csv_file_are_a_table_or_one_refusal(data, target):
    _read_csv(data, target)


@FUZZ
@given(body=CSV_TEXT, target=st.sampled_from(["a", "b", "y"]))
def test_any_text_under_a_header_is_a_table_or_one_refusal(body, target):
    _read_csv(("a,b,y\n" + body).encode("utf-8"), target)


@FUZZ
@given(text=CSV_TEXT, encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1"]))
def test_any_text_in_any_encoding_is_a_table_or_one_refusal(text, encoding):
    _read_csv(text.encode(encoding, errors="replace"), "a")


# ---------------------------------------------------------------------------------------------------------
# Recordings.


def _recording_file(lines: list[str]) -> str:
    """A temporary .fitrec file holding `lines`; the caller removes it."""
    handle, path = tempfile.mkstemp(suffix=".fitrec")
    with os.fdopen(handle, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _read_recording(lines: list[str]) -> None:
    path = _recording_file(lines)
    try:
        before = Path(path).read_bytes()
        try:
            rec = recording.read(path)
        except RecordingError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("recording: got ")
            return
        assert isinstance(rec, Recording) and rec.ended is rec.events[-1]
        assert Path(path).read_bytes() == before  # a replay never changes the file
    finally:
        os.unlink(path)


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(lines=st.lists(st.text(max_size=40), max_size=6))
def test_any_lines_are_a_recording_or_one_refusal(lines):
    _read_recording(lines)


@FUZZ
@given(
    index=st.integers(0, len(EXAMPLE) - 1),
    key=st.sampled_from(["event", "step", "config", "replicas", "phases", "weights", "status", "x"]),
    value=JSON_VALUE,
)
def test_a_recording_with_one_field_changed_is_read_or_refused_with_its_line(index, key, value):
    lines = list(EXAMPLE)
    event = json.loads(lines[index])
    event[key] = value
    lines[index] = json.dumps(event)
    _read_recording(lines)


@FUZZ
@given(cut=st.integers(0, len(EXAMPLE) - 1), junk=st.text(max_size=30))
def test_a_truncated_or_extended_recording_is_refused_with_its_line(cut, junk):
    lines = EXAMPLE[:cut] + ([junk] if junk else [])
    _read_recording(lines)


@FUZZ
@given(
    total=st.one_of(st.just(20), st.integers(-3, 10**16)),
    kept=st.integers(0, 20),
    end_steps=st.one_of(st.none(), st.integers(-3, 10**16)),
    status=st.sampled_from(["finished", "stopped", "failed", "diverged"]),
)
def test_a_recording_is_read_only_when_its_start_steps_and_end_agree(total, kept, end_steps, status):
    """The example: header, start (20 steps: 10 epochs of 2 batches), 20 steps, end. The start's total, the
    steps kept and the end's count are changed; the file is read exactly when they agree."""
    lines = list(EXAMPLE)
    started, ended = json.loads(lines[1]), json.loads(lines[-1])
    started["total_steps"] = total
    ended["steps"] = kept if end_steps is None else end_steps
    ended["status"] = status
    lines = [lines[0], json.dumps(started), *lines[2 : 2 + kept], json.dumps(ended)]
    agree = total == 20 and ended["steps"] == kept and (status != "finished" or kept == 20)
    path = _recording_file(lines)
    try:
        rec = recording.read(path)
    except RecordingError as exc:
        assert not agree, str(exc)
        assert "\n" not in str(exc) and len(str(exc)) <= 300
        return
    finally:
        os.unlink(path)
    assert agree and sum(e.__class__.__name__ == "Step" for e in rec.events) == kept


# a config field changed to any JSON value, huge integers and invalid settings among them: the recording is
# read only with a config that validates as a run on the recording's machine, else refused with its line
CONFIG_VALUE = st.one_of(
    JSON_VALUE,
    st.integers(10**4000, 10**4400),  # past Python's 4,300-digit int conversion limit once written
    st.sampled_from(["bogus", "virtual:999", "cuda:7", "virtual:4@cuda:0", [1.0] * 600, -1, 0, 10**30]),
)


@FUZZ
@given(key=st.sampled_from(sorted(json.loads(EXAMPLE[1])["config"])), value=CONFIG_VALUE)
def test_a_recording_with_any_config_value_is_read_or_refused_with_its_line(key, value):
    import sys

    from fitcore.core.config import FitConfig, validate

    lines = list(EXAMPLE)
    started = json.loads(lines[1])
    started["config"][key] = value
    default = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # so that the huge integer can be written, as a hostile file would
    try:
        lines[1] = json.dumps(started)
    finally:
        sys.set_int_max_str_digits(default)
    path = _recording_file(lines)
    try:
        rec = recording.read(path)
    except RecordingError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("recording: got ") and len(str(exc)) <= 400
        return
    finally:
        os.unlink(path)
    assert validate(rec.config, recorded=True) == rec.config and isinstance(rec.config, FitConfig)
