"""Crafted recordings, as a hostile hand makes them: every `bad-*` of tests/recordings/ is refused in one line
by `fitcore replay` and by the page's reader; every `good-*` and `ok-*` replays, its JSON strict and its page
drawn. Hypothesis then mutates the good recordings' leaves (types swapped, emptied, made non-finite, huge)
and holds every result to the same two outcomes.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore.cli import main
from fitcore.core.errors import ConfigError
from fitcore.core.events import Status
from fitcore.kit import live
from fitcore.protocols import registry
from fitcore.runs.recording import read, replayer
from fitcore.runs.runner import Run
from fitcore.view import datasource
from tests.recordings import craft

HERE = Path(__file__).resolve().parent / "recordings"
BAD = sorted(p.name for p in HERE.glob("bad-*.fitrec"))
GOOD = sorted(p.name for p in HERE.glob("good-*.fitrec")) + sorted(p.name for p in HERE.glob("ok-*.fitrec"))
LONGEST_LINE = 400  # the path, the frame and the field; the value quoted in it is cut far shorter


def _strict(text: str) -> Any:
    """JSON as a strict parser reads it: NaN and Infinity are no JSON."""

    def refuse(constant: str) -> Any:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _replay_cli(capsys, path: Path | str) -> tuple[int, list[str], list[str]]:
    try:
        code = main(["replay", "--json", str(path)])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def _refused_in_one_line(capsys, path: Path | str) -> str:
    code, out, err = _replay_cli(capsys, path)
    assert (code, out, len(err)) == (2, [], 1), (code, out[:2], err[:3])
    line = err[0]
    assert line.startswith("fitcore: error: recording: got ") and len(line) <= LONGEST_LINE, line
    with pytest.raises(ConfigError) as page:  # the page reads an upload through the same reader
        datasource.read_recording(path)
    assert "\n" not in str(page.value) and len(str(page.value)) <= LONGEST_LINE
    return line


def _replayed(capsys, path: Path | str) -> dict:
    """Replay on the command line (strict JSON out) and as the page does (a Run, its payload, its tables)."""
    code, out, err = _replay_cli(capsys, path)
    rec = read(str(path))
    expected = {Status.FINISHED: 0, Status.STOPPED: 130}.get(rec.ended.status, 1)
    assert (code, err) == (expected, []), err[:3]
    result = _strict("\n".join(out))
    run = Run(rec.config, trainer=replayer(rec), plan=rec.plan)  # as the pool starts a replay
    run.start()
    assert run.wait(30), "the replay did not end"
    snap = run.snapshot()
    json.dumps(live.payload(snap, 0, 1), allow_nan=False)  # the live route's body: strict JSON
    registry.of(snap.config).view_module.sections(snap, snap.config, snap.plan)  # the page's tables of it
    return result


def test_the_corpus_is_what_craft_makes():
    made = {name: "\n".join(make()) + "\n" for name, make in craft.CRAFTED.items()}
    here = {p.stem: p.read_text(encoding="utf-8") for p in HERE.glob("*.fitrec")}
    here = {name: text for name, text in here.items() if not name.startswith("good-")}
    assert here == made


@pytest.mark.parametrize("name", BAD)
def test_a_crafted_recording_is_refused_in_one_line(capsys, name):
    _refused_in_one_line(capsys, HERE / name)


def test_each_finding_is_refused_naming_its_line_and_field(capsys):
    expected = {
        "bad-hosts-as-a-number": "a bad detail event (value.hosts: a list, found 3)",
        "bad-input-shape-empty": "a bad step event (input_shape: a list of exactly 2 items, found [])",
        "bad-memory-as-text": "a bad detail event (value: a list, found '12 B')",
        "bad-nan-in-times": "line 3: a bad step event (phases.times[0]: a finite number, found nan)",
        "bad-epochs-of-4300-digits": "line 2: a bad started event (epochs: got 7777…(4300 digits); allowed:",
    }
    for name, words in expected.items():
        assert words in _refused_in_one_line(capsys, HERE / f"{name}.fitrec"), name


@pytest.mark.parametrize("name", GOOD)
def test_a_good_recording_replays_to_strict_json_and_a_drawn_page(capsys, name):
    result = _replayed(capsys, HERE / name)
    assert result["status"] in ("finished", "stopped")


def test_thirty_thousand_gpu_names_make_a_short_label(capsys):
    rec = read(str(HERE / "ok-30000-gpu-names.fitrec"))
    label = rec.label
    assert label.startswith("recorded on 300 x G0, 300 x G1, 300 x G10 and 97 more (CUDA"), label
    assert len(label) < 200 and len(rec.short_label) < 120


@pytest.mark.parametrize("status", ["running", "paused"])
def test_a_recording_that_ends_mid_run_ends_at_its_last_event_and_says_so(capsys, status):
    rec = read(str(HERE / f"ok-ends-while-{status}.fitrec"))
    assert rec.ended.status == Status.STOPPED
    assert str(rec.ended.message).startswith(f"the recording stopped mid-run (its run was still {status})")
    result = _replayed(capsys, HERE / f"ok-ends-while-{status}.fitrec")
    assert result["status"] == "stopped" and result["steps"] == rec.ended.steps


# ---------------------------------------------------------------------------------------------------------
# Hypothesis: any one leaf of a good recording changed.

SOURCES = {name: (HERE / name).read_text(encoding="utf-8").splitlines() for name in GOOD if "good-" in name}


def _leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON value, containers too (a list can be emptied, an object swapped for a number)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:4]):  # a few items of each list: the rest are of the same shape
            found += _leaves(item, (*path, i))
    return found


def _set(value: Any, path: tuple, new: Any) -> None:
    for part in path[:-1]:
        value = value[part]
    value[path[-1]] = new


MUTATIONS = {
    "text": lambda old: "x",
    "number": lambda old: 7,
    "float": lambda old: 0.5,
    "bool": lambda old: True,
    "null": lambda old: None,
    "empty list": lambda old: [],
    "empty object": lambda old: {},
    "empty text": lambda old: "",
    "nan": lambda old: math.nan,
    "infinity": lambda old: math.inf,
    "-infinity": lambda old: -math.inf,
    "huge int": lambda old: 10**30,
    "huge float": lambda old: 1e308,
    "negative": lambda old: -1,
    "huge list": lambda old: [old] * 70_000,
    "long text": lambda old: "y" * 200_000,
}
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.data(), name=st.sampled_from(sorted(SOURCES)), mutation=st.sampled_from(sorted(MUTATIONS)))
def test_any_leaf_of_a_recording_changed_is_refused_in_one_line_or_replays_strictly(
    capsys, data, name, mutation
):
    lines = list(SOURCES[name])
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    event = json.loads(lines[index])
    places = _leaves(event)
    place = data.draw(st.sampled_from(places), label="place")
    old = event
    for part in place:
        old = old[part]
    _set(event, place, MUTATIONS[mutation](old))
    lines[index] = json.dumps(event)  # NaN and Infinity as Python writes them, as a hand-edited file may
    handle, path = tempfile.mkstemp(suffix=".fitrec")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        try:
            read(path)
        except ConfigError:
            _refused_in_one_line(capsys, path)
        else:
            _replayed(capsys, path)
    finally:
        os.unlink(path)
