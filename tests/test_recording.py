"""Record and replay: the round trip is exact, a replay obeys Control, and a bad file is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fitcore.core import i18n
from fitcore.core.config import ConfigError, FitConfig, validate
from fitcore.core.events import RunEnded, RunStarted, Status, Step
from fitcore.core.train import Control
from fitcore.runs import recording
from fitcore.runs.recording import Recorder, RecordingError, read, replayer
from fitcore.runs.runner import Run
from fitcore.strategies.dataparallel.train import train
from tests.helpers import wait_for
from tests.test_cli import run_cli

CFG = FitConfig(devices="virtual:3", epochs=3, batch_size=70, seed=4)  # 3 batches of 70/70/60 an epoch


def record(path, cfg: FitConfig = CFG) -> list:
    """Train cfg, recording to path; the events as the live run emitted them."""
    events: list = []
    recorder = Recorder(str(path), clock=lambda: 1_700_000_000.0)

    def on_event(event):
        events.append(event)
        recorder(event)

    train(validate(cfg), on_event)
    return events


def test_round_trip_gives_back_every_event_exactly(tmp_path):
    path = tmp_path / "run.fitrec"
    live = record(path)
    rec = read(str(path))
    assert rec.events == tuple(live)  # every Step: its replicas, row ids, phases, times, bytes; floats exact
    steps = [e for e in rec.events if isinstance(e, Step)]
    assert len(steps) == 9 and [r.rows for r in steps[0].replicas] == [24, 24, 22]  # 70 rows: tensor.chunk(3)
    assert rec.ended.weights == live[-1].weights and rec.ended.bias == live[-1].bias
    assert rec.header["recorded"] == "2023-11-14T22:13:20Z"
    assert rec.label.startswith("recorded on ") and rec.label.endswith(" on 2023-11-14")
    first = json.loads(path.read_text().splitlines()[0])
    assert first["format"] == "fitcore-recording" and first["version"] == 3
    assert set(first["machine"]) == {"python", "torch", "cuda", "gpus", "cpu", "os"}
    assert os.uname().nodename not in path.read_text()  # no host name


def test_replay_through_a_run_reproduces_every_split_and_the_final_parameters(tmp_path, no_leftover_threads):
    path = tmp_path / "run.fitrec"
    live = record(path)
    rec = read(str(path))
    seen: list = []
    run = Run(rec.config, trainer=lambda *a, **k: replayer(rec)(a[0], _tee(a[1], seen), *a[2:], **k))
    run.start()
    assert run.wait(10)
    snap = run.snapshot()
    ended = live[-1]
    assert snap.status == Status.FINISHED and snap.step == 9
    assert (snap.weights, snap.bias) == (ended.weights, ended.bias)
    live_steps = [e for e in live if isinstance(e, Step)]
    assert [e for e in seen if isinstance(e, Step)] == live_steps
    assert [[(r.device, r.start, r.stop, r.ids) for r in s.replicas] for s in live_steps] == [
        [(r.device, r.start, r.stop, r.ids) for r in s.replicas] for s in seen if isinstance(s, Step)
    ]
    assert snap.lstsq_weights == next(e for e in live if isinstance(e, RunStarted)).lstsq_weights


def test_the_end_keeps_its_message_as_a_key_and_a_replay_says_it_in_its_own_language(tmp_path):
    path = tmp_path / "run.fitrec"
    live = record(path)
    end = json.loads(_lines(path)[-1])
    assert end["message"]["key"] == "run.message.finished"  # data: the key and its fields, no words
    assert end["message"]["fields"]["steps"] == {"key": "count.step.other", "fields": {"n": 9}}
    message = read(str(path)).ended.message
    assert message == live[-1].message and str(message).startswith("finished 9 steps in ")
    with i18n.using("zh"):
        assert str(message).startswith("完成 9 步，用时 ")


def test_a_version_1_recording_still_replays_its_message_as_written(tmp_path, capsys):
    """Version 1 wrote the message as English text: it is read, and shown, as it was written."""
    path = tmp_path / "old.fitrec"
    record(path)
    lines = _lines(path)
    lines[0] = lines[0].replace('"version":3,', '"version":1,')
    lines[-1] = _message(lines[-1], "finished 9 steps in 0.05 s")
    path.write_text("\n".join(lines) + "\n")
    rec = read(str(path))
    assert rec.header["version"] == 1 and rec.ended.status == Status.FINISHED
    for lang in ("en", "zh"):
        with i18n.using(lang):
            assert str(rec.ended.message) == "finished 9 steps in 0.05 s"
    code, out, _ = run_cli(capsys, "replay", "--quiet", str(path))
    assert code == 0 and out[-1].startswith("Status: finished (finished 9 steps in 0.05 s")
    # version 1 held text: a key and fields there is a bad file, as text is in version 2
    lines[-1] = _message(lines[-1], {"key": "run.message.stopped", "fields": {}})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError, match=f"line {len(lines)}: a bad ended event \\(message: text, found"):
        read(str(path))


def _tee(on_event, seen):
    def both(event):
        seen.append(event)
        on_event(event)

    return both


def test_replay_obeys_pause_step_and_stop(tmp_path, no_leftover_threads):
    path = tmp_path / "run.fitrec"
    record(path)
    rec = read(str(path))
    run = Run(rec.config, trainer=replayer(rec))
    run.pause()
    run.start()
    wait_for(
        lambda: run.snapshot().status == Status.PAUSED
        and str(run.snapshot().message) == "paused between steps"
    )
    assert run.snapshot().step == 0
    run.step_once()
    wait_for(lambda: run.snapshot().step == 1)
    run.step_once()
    wait_for(lambda: run.snapshot().step == 2)
    run.stop()
    assert run.wait(5)
    snap = run.snapshot()
    assert snap.status == Status.STOPPED and snap.step == 2
    second = [e for e in rec.events if isinstance(e, Step)][1]
    assert (snap.weights, snap.bias) == (second.weights, second.bias)


def test_replay_keeps_the_pace(tmp_path):
    path = tmp_path / "run.fitrec"
    record(path)
    rec = read(str(path))
    now = [0.0]

    class Clock:
        def __call__(self):
            return now[0]

    control = Control(pace=2.0, clock=Clock())
    waits: list[float] = []
    control._stop.wait = lambda t: (waits.append(t), now.__setitem__(0, now[0] + t))[0] and False
    ended = replayer(rec)(rec.config, lambda e: None, control)
    assert ended == rec.ended
    assert waits == [0.5] * 8  # 9 steps at 2 a second: the first at once, then one every 0.5 s


def test_cli_replay_prints_the_live_lines_and_the_same_json(tmp_path, capsys):
    path = str(tmp_path / "run.fitrec")
    args = ["--devices", "virtual:3", "--epochs", "2", "--batch-size", "70"]
    code, live_json, err = run_cli(capsys, *args, "--json", "--record", path)
    assert (code, err) == (0, [])
    code, replay_json, err = run_cli(capsys, "replay", path, "--json")
    assert (code, err) == (0, [])
    assert json.loads(replay_json[0]) == json.loads(live_json[0])

    code, replay_lines, _ = run_cli(capsys, "replay", path)
    assert code == 0 and replay_lines[0].startswith("Replaying a recording: recorded on ")
    assert replay_lines[1].startswith("Emulating 3 devices on the CPU")
    assert sum(line.startswith("Outside:") for line in replay_lines) == 6
    assert sum(line.startswith("\tIn Model:") for line in replay_lines) == 18


def test_a_replay_never_writes_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # files named as given, however long the test's folder is
    path = Path("run.fitrec")
    record(path)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    os.chmod(path, 0o444)
    assert run_cli(capsys, "replay", str(path), "--quiet")[0] == 0
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    code, _, err = run_cli(capsys, "replay", str(path), "--record", "again.fitrec")
    assert code == 2 and err == [
        "fitcore: error: --record: got 'again.fitrec'; allowed: nothing: a replay writes no recording"
    ]


# ---------------------------------------------------------------------------------------------------------
# Bad recordings: one line naming the line and the problem.


def _lines(path) -> list[str]:
    return path.read_text().splitlines()


def _message(line: str, message) -> str:
    """The end's line with `message` in place of its message."""
    return json.dumps({**json.loads(line), "message": message}, separators=(",", ":"))


def _nested(depth: int) -> dict:
    """A message whose one field is a message, `depth` deep."""
    inner = {"key": "run.message.error", "fields": {"error": "boom"}}
    for _ in range(depth):
        inner = {"key": "run.message.before_start", "fields": {"reason": inner}}
    return inner


BOMB = "[" * 100_000 + "]" * 100_000
BAD = [
    # (id, how the good file's lines are changed, the message's end)
    ("truncated", lambda ls: ls[:-1], "line 15: the run's end; the file stops before it (truncated)"),
    ("cut-mid-line", lambda ls: ls[:-1] + [ls[-1][:20]], "line 15: not JSON"),
    ("corrupted", lambda ls: ls[:3] + ['{"event": "step", ' + ls[3][30:]] + ls[4:], "line 4: not JSON"),
    (
        "unknown-version",
        lambda ls: [ls[0].replace('"version":3', '"version":99')] + ls[1:],
        "line 1: unknown version 99",
    ),
    ("not-a-recording", lambda ls: ['{"hello": 1}'] + ls[1:], "line 1: not a recording header"),
    (
        "unknown-event",
        lambda ls: ls[:2] + ['{"event": "explode"}'] + ls[2:],
        "line 3: an unknown event 'explode'",
    ),
    (
        "bad-field",
        lambda ls: ls[:2] + [ls[2].replace('"loss":', '"loss":"x","was":')] + ls[3:],
        "line 3: a bad step event (loss: a number, found 'x')",
    ),
    (
        "missing-field",
        lambda ls: ls[:2] + [ls[2].replace('"weights":', '"w":')] + ls[3:],
        "line 3: a bad step event (missing 'weights')",
    ),
    (
        "steps-out-of-order",
        lambda ls: ls[:2] + ls[4:5] + ls[2:4] + ls[5:],  # step 2 before step 1 (and its held bytes)
        "line 3: step 1 next, found step 2",
    ),
    ("after-the-end", lambda ls: ls + ls[-1:], "line 16: nothing after the run's end"),
    ("pickle", lambda ls: ["\x80\x04\x95 not json"], "line 1: not a recording header"),
    ("empty", lambda ls: [], "line 1: a header line; the file is empty"),
    # a line nested 100,000 deep is one line too, wherever it is (json's parser would run out of recursion)
    ("nested-header", lambda ls: [BOMB] + ls[1:], "line 1: not a recording header"),
    ("nested-line-2", lambda ls: ls[:1] + [BOMB] + ls[2:], "line 2: JSON nested a few levels deep; this"),
    ("nested-step", lambda ls: ls[:5] + [BOMB] + ls[6:], "line 6: JSON nested a few levels deep; this"),
    # the header, the steps and the end agree, or the file is refused
    (
        "total-steps-forged",
        lambda ls: [ls[0], ls[1].replace('"total_steps":10,', '"total_steps":1000000000000000,')] + ls[2:],
        "line 2: total_steps 10 (its config's epochs x batches per epoch: 10 x 1), found 1000000000000000",
    ),
    (
        "too-many-steps",
        lambda ls: [ls[0], ls[1].replace('"epochs":10,', '"epochs":1000000000000000,')
                    .replace('"total_steps":10,', '"total_steps":1000000000000000,')] + ls[2:],
        "line 2: a bad started event (epochs: got 1000000000000000; allowed: at most 1000000 steps and "
        "1000000000 rows through the model in all",  # no run could have been this long
    ),  # fmt: skip
    (
        "end-counts-other-steps",
        lambda ls: ls[:-1] + [ls[-1].replace('"steps":10,', '"steps":7,')],
        "line 15: an end that counts the file's 10 steps, found 7",
    ),
    (
        "finished-short",
        lambda ls: ls[:12] + [ls[-1].replace('"steps":10,', '"steps":9,')],
        "line 13: a finished run's 10 steps, the file holds 9",
    ),
    (
        "step-beyond-the-total",
        lambda ls: ls[:13] + [ls[12].replace('"step":10,', '"step":11,')] + ls[13:],
        "line 14: at most the run's 10 steps, found step 11",
    ),
    ("step-before-start", lambda ls: ls[:1] + ls[2:3] + ls[1:2] + ls[3:], "line 2: the run's start first"),
    ("two-starts", lambda ls: ls[:3] + ls[1:2] + ls[3:], "line 4: the run's start first and once"),
    # version 2 holds the end's message as a key of the catalog and its fields, each checked
    (
        "message-as-text",
        lambda ls: ls[:-1] + [_message(ls[-1], "finished 10 steps in 0.01 s")],
        "line 15: a bad ended event (message: a message {\"key\": ..., \"fields\": {...}}, found 'finished",
    ),
    (
        "message-unknown-key",
        lambda ls: ls[:-1] + [_message(ls[-1], {"key": "run.message.nope", "fields": {}})],
        "line 15: a bad ended event (message.key: a message key of this fitcore, found 'run.message.nope')",
    ),
    (
        "message-missing-field",
        lambda ls: ls[:-1] + [_message(ls[-1], {"key": "run.message.time_limit", "fields": {}})],
        "line 15: a bad ended event (message.fields: the fields of 'run.message.time_limit': ['seconds'], "
        "found [])",
    ),
    (
        "message-bad-field",
        lambda ls: ls[:-1] + [_message(ls[-1], {"key": "run.message.error", "fields": {"error": [1]}})],
        "line 15: a bad ended event (message.fields.error: text, a number or a message, found [1])",
    ),
    (
        "message-nested-deep",
        lambda ls: ls[:-1] + [_message(ls[-1], _nested(9))],
        "line 15: a bad ended event (message.fields.reason: text, a number or a message, "
        "found an object of 2)",
    ),
    (
        "bad-config",
        lambda ls: [ls[0], ls[1].replace('"epochs":', '"epochz":')] + ls[2:],
        "line 2: a bad started event (epochz: got 1",
    ),
]


@pytest.mark.parametrize("change, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_recording_is_one_line_naming_the_line(tmp_path, monkeypatch, capsys, change, message):
    monkeypatch.chdir(tmp_path)  # named as given, however long the test's folder is
    good = Path("good.fitrec")
    record(good, FitConfig(devices="virtual:2", epochs=10, seed=1))  # header, started, 10 steps, ended
    assert len(_lines(good)) == 15  # header, start, 10 steps, the held bytes after step 1 and at the end
    bad = Path("bad.fitrec")
    lines = change(_lines(good))
    bad.write_text("\n".join(lines) + ("\n" if lines else ""))
    with pytest.raises(RecordingError) as info:
        read(str(bad))
    assert str(info.value).startswith(
        f"recording: got '{bad}'; allowed: a fitcore-recording file of version 1 or 2 or 3; "
    )
    assert message in str(info.value)
    code, out, err = run_cli(capsys, "replay", str(bad))
    assert (code, out) == (2, []) and err == [f"fitcore: error: {info.value}"]


def test_an_oversized_or_binary_or_missing_recording_is_refused(tmp_path):
    big = tmp_path / "big.fitrec"
    with open(big, "wb") as f:
        f.truncate(recording.MAX_BYTES + 1)
    with pytest.raises(
        RecordingError, match=r"at most 268435456 bytes \(256 MiB\); this file has 268435457$"
    ):
        read(str(big))
    binary = tmp_path / "bin.fitrec"
    binary.write_bytes(b'{"format"\xff\xfe')
    binary_line = r"a fitcore-recording file, which is UTF-8 text; this file is binary \(byte 9 is not UTF-8"
    with pytest.raises(RecordingError, match=binary_line):
        read(str(binary))
    with pytest.raises(RecordingError, match=r"a readable file \(No such file or directory\)$"):
        read(str(tmp_path / "none.fitrec"))


def test_record_refuses_an_unwritable_path_and_a_run_too_long(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # named as given, however long the test's folder is
    os.mkdir("runs")
    code, _, err = run_cli(capsys, "--epochs", "1", "--record", "runs")
    assert code == 2 and err == ["fitcore: error: --record: got 'runs'; allowed: a file that can be written "
                                 "(Is a directory)"]  # fmt: skip
    code, _, err = run_cli(capsys, "--batch-size", "1", "--epochs", "501", "--record", "r.fitrec")
    assert code == 2 and err == [
        "fitcore: error: --record: got 'r.fitrec'; allowed: runs of at most 100000 steps; this one has 100200"
    ]


def test_a_failed_run_is_recorded_and_replayed_as_failed(tmp_path):
    path = tmp_path / "fail.fitrec"
    recorder = Recorder(str(path))
    train(validate(FitConfig(lr=1e30, epochs=5)), recorder)
    rec = read(str(path))
    assert isinstance(rec.ended, RunEnded) and rec.ended.status == Status.DIVERGED
    assert replayer(rec)(rec.config).status == Status.DIVERGED


@pytest.mark.slow
def test_ddp_round_trip(tmp_path, capsys):
    path = str(tmp_path / "ddp.fitrec")
    args = ["--strategy", "ddp", "--devices", "cpu", "--workers", "2", "--epochs", "2", "--batch-size", "50"]
    code, live_json, _ = run_cli(capsys, *args, "--json", "--record", path)
    assert code == 0
    code, replay_json, _ = run_cli(capsys, "replay", path, "--json")
    assert code == 0 and json.loads(replay_json[0]) == json.loads(live_json[0])
    rec = read(path)
    steps = [e for e in rec.events if isinstance(e, Step)]
    assert len(steps) == 8 and all(len(s.replicas) == 2 and s.phases is not None for s in steps)
    assert {e.key for e in rec.events if not isinstance(e, (Step, RunStarted, RunEnded))} == {
        "group",
        "shards",
        "final",
        "memory",
    }


@pytest.mark.slow
def test_fsdp_round_trip_with_its_shards_memory_and_trace(tmp_path, capsys):
    path, trace = str(tmp_path / "fsdp.fitrec"), str(tmp_path / "fsdp.json")
    args = ["--strategy", "fsdp", "--devices", "cpu", "--workers", "2", "--epochs", "2", "--batch-size", "50",
            "--weights", "5.2", "9.6", "-1", "--reshard-after-forward", "false"]  # fmt: skip
    code, live_json, _ = run_cli(capsys, *args, "--json", "--record", path, "--trace", trace)
    assert code == 0
    live = json.loads(live_json[0])
    code, replay_json, _ = run_cli(capsys, "replay", path, "--json")
    assert code == 0 and json.loads(replay_json[0]) == live
    # ZeRO-2 on 2 ranks, 3 weights: rank 0 holds w1, w2 and b, rank 1 w3; padded shards of 3 numbers
    assert [m["parameters"] for m in live["per_rank_memory"]] == [12, 12]
    assert [m["optimizer_state"] for m in live["per_rank_memory"]] == [2 * 3 * 4 + 8, 2 * 1 * 4 + 8]
    rec = read(path)
    assert rec.config.reshard_after_forward is False
    steps = [e for e in rec.events if isinstance(e, Step)]
    # one all-gather a step under ZeRO-2, and the reduce-scatter, on each rank
    assert len(steps) == 8 and all(
        [p.name for p in s.phases.phases()].count("all_gather") == 2 and len(s.replicas) == 2 for s in steps
    )
    events = json.loads(open(trace, encoding="utf-8").read())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e.get("name") for e in events}
    assert {"all_gather", "reduce_scatter", "forward", "backward"} <= names


def test_a_csv_run_is_recorded_with_its_file_name_only_and_replays_in_file_units(tmp_path, capsys):
    from tests.test_csvdata import exact_csv

    data, path = tmp_path / "exact.csv", str(tmp_path / "csv.fitrec")
    exact_csv(data)
    code, live, _ = run_cli(
        capsys, "--data", str(data), "--target", "y", "--epochs", "50", "--json", "--record", path
    )
    assert code == 0
    text = open(path).read()
    assert str(tmp_path) not in text and '"data":"exact.csv"' in text
    data.unlink()  # the replay needs no file
    code, replayed, err = run_cli(capsys, "replay", path, "--json")
    assert (code, err) == (0, [])
    a, b = json.loads(live[0]), json.loads(replayed[0])
    assert b["data"] == a["data"] and b["weights"] == a["weights"]
    assert b["config"]["data"] == "exact.csv"


# ---------------------------------------------------------------------------------------------------------
# A path named in a recording is shown, never opened.


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every path this process opens (open, io.open, os.open) from now on, resolved."""
    import builtins
    import io

    seen: list[str] = []

    def spy(real):
        def wrapped(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)):
                seen.append(os.path.realpath(os.fsdecode(file)))
            return real(file, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(builtins, "open", spy(builtins.open))
    monkeypatch.setattr(io, "open", spy(io.open))
    monkeypatch.setattr(os, "open", spy(os.open))
    return seen


def forged_csv_recording(tmp_path, data: str):
    """A CSV run's recording whose config names `data` (a file that exists: opening it would succeed)."""
    from tests.test_csvdata import exact_csv

    exact_csv(tmp_path / "exact.csv")
    path = tmp_path / "run" / "forged.fitrec"
    path.parent.mkdir()
    cfg = validate(FitConfig(data=str(tmp_path / "exact.csv"), target="y", epochs=5, batch_size=20))
    record(path, cfg)
    lines = _lines(path)
    lines[1] = lines[1].replace('"data":"exact.csv"', f'"data":{json.dumps(data)}')
    assert json.dumps(data) in lines[1]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_a_replay_shows_the_data_path_it_names_never_opening_it(tmp_path, capsys, monkeypatch, opened, kind):
    secret = tmp_path / "secret.csv"
    secret.write_text("a,y\n1,2\n")
    data = str(secret) if kind == "absolute" else "../secret.csv"  # from the recording's folder
    path = forged_csv_recording(tmp_path, data)
    monkeypatch.chdir(path.parent)  # so that "../secret.csv" names the secret from where the replay runs
    del opened[:]
    code, out, err = run_cli(capsys, "replay", str(path), "--json")
    assert (code, err) == (0, [])
    assert json.loads(out[0])["config"]["data"] == data  # shown as the recording wrote it
    rec = read(str(path))
    run = Run(rec.config, trainer=replayer(rec))
    run.start()
    assert run.wait(10) and run.snapshot().config.data == data
    assert str(path) in opened  # the spy sees what is opened
    assert str(secret.resolve()) not in opened


def test_a_pages_recording_that_cannot_be_written_is_named_by_its_own_name(tmp_path):
    # the page records into the server's store: a refusal names `run.fitrec`, not the server's directory
    from fitcore.core.outfiles import Pending
    from fitcore.core.uploads import UploadStore

    store = UploadStore(str(tmp_path / "store"))
    path = store.new_path("owner", "record", "run.fitrec")
    path.mkdir()  # a folder where the recording would go: it cannot be written
    with pytest.raises(ConfigError) as info:
        Pending(str(path), "record")
    assert info.value.value == "run.fitrec" and str(store.root) not in str(info.value)
    with pytest.raises(ConfigError) as info:
        recording.check_recordable(validate(FitConfig(batch_size=1, epochs=501)), str(path))
    assert info.value.value == "run.fitrec"
