"""The Chrome trace: the Trace Event Format's required fields, one track per device, one event per phase."""

from __future__ import annotations

import json

import pytest

from fitcore.core.config import FitConfig, validate
from fitcore.core.events import Step
from fitcore.runs.pool import RunPool
from fitcore.runs.recording import Recorder, read
from fitcore.runs.trace import PID, TraceBuilder, trace_of
from fitcore.strategies.dataparallel.train import train
from tests.helpers import wait_for
from tests.test_cli import run_cli


def run_events(cfg: FitConfig) -> list:
    events: list = []
    train(validate(cfg), events.append)
    return events


def check_format(trace: dict) -> None:
    """The Trace Event Format's rules for what we write: the JSON object form, each phase type's fields."""
    assert set(trace) >= {"traceEvents"} and isinstance(trace["traceEvents"], list)
    json.dumps(trace, allow_nan=False)  # strict JSON: no NaN or inf anywhere
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":  # complete events: a duration, in microseconds
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        else:
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index") and "args" in e


def test_dataparallel_trace_has_a_track_per_device_and_an_event_per_phase():
    events = run_events(FitConfig(devices="virtual:3", epochs=2, batch_size=70))
    trace = trace_of(events)
    check_format(trace)
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names == {
        1: "virtual:0 (emulated on CPU)",
        2: "virtual:1 (emulated on CPU)",
        3: "virtual:2 (emulated on CPU)",
    }
    (process,) = [e for e in meta if e["name"] == "process_name"]
    assert process["pid"] == PID and process["args"]["name"] == "fitcore run: dataparallel on virtual:3"

    steps = [e for e in events if isinstance(e, Step)]
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == sum(len(s.phases.specs) for s in steps)
    assert {e["tid"] for e in spans} <= set(names)
    for s in steps:
        mine = [e for e in spans if e["args"]["step"] == s.step]
        assert sum(e["args"]["bytes"] for e in mine) == s.phases.bytes
        for e, p in zip(mine, s.phases.phases()):
            assert e["name"] == p.name and names[e["tid"]] == p.device
            assert e["dur"] == pytest.approx(p.duration * 1e6, abs=1e-3)
            assert e["args"]["rows"] == next(r.rows for r in s.replicas if r.device == p.device)
        # the step ends where the run's clock was when it was emitted
        assert max(e["ts"] + e["dur"] for e in mine) == pytest.approx(s.elapsed * 1e6, abs=0.01)
    # the steps follow one another on the timeline
    starts = [min(e["ts"] for e in spans if e["args"]["step"] == s.step) for s in steps]
    assert starts == sorted(starts)


def test_a_run_without_phase_records_is_one_event_per_step():
    events = run_events(FitConfig(devices="cpu", epochs=3))  # one device, no DataParallel: no phases
    steps = [e for e in events if isinstance(e, Step)]
    assert all(s.phases is None for s in steps)
    trace = trace_of(events)
    check_format(trace)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["tid"], e["args"]["step"], e["args"]["rows"]) for e in spans] == [
        ("step", 1, 1, 200),
        ("step", 1, 2, 200),
        ("step", 1, 3, 200),
    ]
    # each step runs from the previous step's end to its own
    assert spans[1]["ts"] == pytest.approx(steps[0].elapsed * 1e6, abs=0.01)
    assert spans[2]["ts"] + spans[2]["dur"] == pytest.approx(steps[2].elapsed * 1e6, abs=0.01)


def test_cli_trace_and_replay_trace_hold_the_same_events(tmp_path, capsys):
    rec, live, again = tmp_path / "r.fitrec", tmp_path / "live.json", tmp_path / "replay.json"
    code, _, err = run_cli(
        capsys,
        "--devices",
        "virtual:2",
        "--epochs",
        "3",
        "--quiet",
        "--record",
        str(rec),
        "--trace",
        str(live),
    )
    assert (code, err) == (0, [])
    code, _, err = run_cli(capsys, "replay", str(rec), "--quiet", "--trace", str(again))
    assert (code, err) == (0, [])
    a, b = json.loads(live.read_text()), json.loads(again.read_text())
    check_format(a)
    check_format(b)
    spans = [e for e in a["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 3 * 13  # 3 steps of 13 phase records on 2 devices (fitcore.core.phases)
    assert spans == [e for e in b["traceEvents"] if e["ph"] == "X"]
    name = next(e for e in b["traceEvents"] if e["name"] == "process_name")["args"]["name"]
    assert name.startswith("replay: recorded on ")


def test_trace_refuses_an_unwritable_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # named as given, however long the test's folder is
    code, out, err = run_cli(capsys, "--epochs", "1", "--trace", "no/t.json")
    assert (code, out) == (2, [])
    assert err == [
        "fitcore: error: --trace: got 'no/t.json'; allowed: a file that can be written "
        "(No such file or directory)"
    ]


def test_builder_keeps_going_after_run_ended_and_names_a_shared_track():
    builder = TraceBuilder("x")
    for e in run_events(FitConfig(devices="virtual:2", epochs=1)):
        builder(e)
    assert builder.steps == 1 and set(builder.tracks) <= {
        "virtual:0 (emulated on CPU)",
        "virtual:1 (emulated on CPU)",
        "host",
    }


def test_pool_replays_a_recording_like_a_run(tmp_path, no_leftover_threads):
    path = tmp_path / "r.fitrec"
    train(validate(FitConfig(devices="virtual:2", epochs=4)), Recorder(str(path)))
    rec = read(str(path))
    pool = RunPool()
    try:
        snap = pool.submit_replay("owner", rec, pace=None)
        done = wait_for(lambda: (s := pool.snapshot("owner", snap.run_id)).status == "finished" and s)
        assert done.step == 4 and (done.weights, done.bias) == (rec.ended.weights, rec.ended.bias)
    finally:
        pool.shutdown()
