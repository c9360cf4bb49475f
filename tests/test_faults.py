"""The hostile probe's faults, each held to its fix: outputs never overwrite inputs and are written whole,
bad files and values are one line (exit 2), replay refuses what no run could have recorded, and the server's
log keeps a malformed request to one line.

The page's side (the shipped GPU recordings on a machine without CUDA, a bad preset, script or room in the
link) is in tests/test_app_data.py and tests/test_app.py; the server's file descriptors and SIGTERM in
tests/test_reliability.py.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fitcore.cli as cli
from fitcore import serve
from fitcore.core.events import RunEnded

ROOT = Path(__file__).resolve().parents[1]
HOUSES = ROOT / "examples" / "houses.csv"
DDP = ROOT / "examples" / "ddp-2ranks.fitrec"


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# -- outputs: never an input, never another output, written whole ---------------------------------------
@pytest.mark.parametrize(
    "argv, flag, other",
    [
        (["--data", "{csv}", "--target", "price", "--record", "{csv}"], "--record", "--data"),
        (["--data", "{csv}", "--target", "price", "--trace", "./{csv}"], "--trace", "--data"),
        (["--epochs", "2", "--trace", "{csv}", "--record", "{csv}"], "--trace", "--record"),
        (["replay", "{rec}", "--trace", "{rec}"], "--trace", "the recording"),
    ],
)
def test_an_output_named_as_an_input_or_another_output_is_refused_and_nothing_changes(
    capsys, tmp_path, monkeypatch, argv, flag, other
):
    monkeypatch.chdir(tmp_path)
    shutil.copy(HOUSES, "X.csv")
    shutil.copy(DDP, "R.fitrec")
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = run(capsys, [a.format(csv="X.csv", rec="R.fitrec") for a in argv])
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"fitcore: error: {flag}: got ") and f"a file other than {other} (" in line
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written, nothing left


def test_a_link_to_the_input_is_the_same_file(capsys, tmp_path):
    shutil.copy(HOUSES, tmp_path / "X.csv")
    os.symlink(tmp_path / "X.csv", tmp_path / "link.csv")
    code, _, err = run(capsys, ["--data", str(tmp_path / "X.csv"), "--target", "price",
                                "--record", str(tmp_path / "link.csv")])  # fmt: skip
    assert code == 2 and "--record" in one_line(err)
    assert (tmp_path / "X.csv").read_bytes() == HOUSES.read_bytes()


def test_a_run_that_dies_leaves_the_old_recording_and_trace_as_they_were(capsys, tmp_path, monkeypatch):
    """Half a run: every event but the run's end is written, then the process's run dies (an exception
    out of the trainer). The files that were there stay whole, and no temporary file is left beside them."""
    old_rec, old_trace = tmp_path / "run.fitrec", tmp_path / "run.json"
    old_rec.write_text("a good recording\n")
    old_trace.write_text("{}")
    real = cli.trainer_for

    def dying(cfg):
        trainer = real(cfg)

        def train(cfg, on_event, control):
            trainer(cfg, lambda event: None if isinstance(event, RunEnded) else on_event(event), control)
            raise RuntimeError("the machine went away")

        return train

    monkeypatch.setattr(cli, "trainer_for", dying)
    with pytest.raises(RuntimeError, match="went away"):
        cli.main(["--epochs", "3", "--quiet", "--record", str(old_rec), "--trace", str(old_trace)])
    assert old_rec.read_text() == "a good recording\n" and old_trace.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.fitrec", "run.json"]


def test_a_finished_run_replaces_the_files_whole_with_the_usual_mode(capsys, tmp_path):
    rec, trace = tmp_path / "run.fitrec", tmp_path / "run.json"
    rec.write_text("old")
    code, _, _ = run(capsys, ["--epochs", "2", "--quiet", "--record", str(rec), "--trace", str(trace)])
    assert code == 0
    lines = rec.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "fitcore-recording" and json.loads(lines[-1])["event"] == "ended"
    assert "traceEvents" in json.loads(trace.read_text())
    umask = os.umask(0)
    os.umask(umask)
    assert {p.stat().st_mode & 0o777 for p in (rec, trace)} == {0o666 & ~umask}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.fitrec", "run.json"]


@pytest.mark.parametrize("flag", ["--record", "--trace"])
def test_an_output_that_is_a_folder_is_refused_before_the_run(capsys, tmp_path, flag):
    code, out, err = run(capsys, ["--epochs", "2", flag, str(tmp_path)])
    assert code == 2 and out == ""
    allowed = "a file that can be written (Is a directory)"
    assert one_line(err) == f"fitcore: error: {flag}: got '{tmp_path}'; allowed: {allowed}"


def _char_device(path) -> None:
    """A character device like /dev/null (major 1, minor 3), made in the test's own folder."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


@pytest.mark.parametrize("flag", ["--record", "--trace"])
def test_an_output_onto_a_device_writes_through_and_leaves_the_device(capsys, tmp_path, flag):
    """`--record /dev/null` discards the recording; the device stays a device (never a regular file)."""
    null = tmp_path / "null"
    _char_device(null)
    before = os.stat(null)
    code, _, err = run(capsys, ["--epochs", "2", "--quiet", flag, str(null)])
    after = os.stat(null)
    assert (code, err) == (0, "")
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_ino) == (before.st_rdev, before.st_ino)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temporary file left beside it


@pytest.mark.parametrize("flag", ["--record", "--trace"])
def test_an_output_onto_a_fifo_without_a_reader_is_refused_at_once(capsys, tmp_path, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, out, err = run(capsys, ["--epochs", "2", flag, "pipe"])  # never blocks: no reader, no wait
    assert (code, out) == (2, "")
    allowed = "a file that can be written (a FIFO with no reader; start its reader first)"
    assert one_line(err) == f"fitcore: error: {flag}: got 'pipe'; allowed: {allowed}"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_an_output_onto_a_fifo_with_a_reader_is_written_through(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    deadline = time.monotonic() + 10
    code = None
    while code is None and time.monotonic() < deadline:  # the reader opens the FIFO a moment after starting
        code, _, err = run(capsys, ["--epochs", "2", "--quiet", "--record", str(fifo)])
        code = None if code == 2 and "no reader" in err else code
    reader.join(10)
    assert code == 0 and stat.S_ISFIFO(os.stat(fifo).st_mode)
    lines = got[0].decode().splitlines()
    assert json.loads(lines[0])["format"] == "fitcore-recording" and json.loads(lines[-1])["event"] == "ended"


def test_an_output_through_a_symlink_writes_the_file_it_names_and_keeps_the_link(capsys, tmp_path):
    (tmp_path / "real.fitrec").write_text("old")
    (tmp_path / "run.fitrec").symlink_to("real.fitrec")
    (tmp_path / "dangling.json").symlink_to("made.json")
    argv = ["--epochs", "2", "--quiet", "--record", str(tmp_path / "run.fitrec")]
    code, _, _ = run(capsys, [*argv, "--trace", str(tmp_path / "dangling.json")])
    assert code == 0
    assert os.readlink(tmp_path / "run.fitrec") == "real.fitrec"  # still a link, to the same file
    assert os.readlink(tmp_path / "dangling.json") == "made.json"
    assert json.loads((tmp_path / "real.fitrec").read_text().splitlines()[-1])["event"] == "ended"
    assert "traceEvents" in json.loads((tmp_path / "made.json").read_text())


@pytest.mark.parametrize("flag", ["--record", "--trace"])
def test_a_read_only_output_is_refused_even_for_root_and_kept(capsys, tmp_path, monkeypatch, flag):
    """As `cp` refuses it: root could write the file, but its owner made it read-only for a reason."""
    monkeypatch.chdir(tmp_path)
    kept = tmp_path / "kept.fitrec"
    kept.write_text("mine")
    kept.chmod(0o444)
    code, out, err = run(capsys, ["--epochs", "2", flag, "kept.fitrec"])
    assert (code, out) == (2, "")
    allowed = "a file that can be written (it is read-only; make it writable or name another file)"
    assert one_line(err) == f"fitcore: error: {flag}: got 'kept.fitrec'; allowed: {allowed}"
    assert kept.read_text() == "mine" and stat.S_IMODE(kept.stat().st_mode) == 0o444
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.fitrec"]


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_data_that_is_no_regular_file_is_refused_without_waiting(capsys, tmp_path, monkeypatch, kind):
    """A FIFO with no writer would hang a read (and Ctrl-C with it): refused, as a device or a folder is."""
    monkeypatch.chdir(tmp_path)
    {"fifo": os.mkfifo, "device": _char_device, "folder": os.mkdir}[kind](tmp_path / "data.csv")
    code, out, err = run(capsys, ["--data", "data.csv", "--target", "y"])
    words = {"fifo": "a FIFO (named pipe)", "device": "a device", "folder": "a folder"}[kind]
    assert (code, out) == (2, "")
    allowed = f"a regular CSV file; this is {words}"
    assert one_line(err) == f"fitcore: error: --data: got 'data.csv'; allowed: {allowed}"


def test_a_replaced_output_keeps_its_mode(capsys, tmp_path):
    """A private recording (0600) stays private when a run writes it again, as `cp` keeps a file's mode."""
    rec = tmp_path / "private.fitrec"
    rec.write_text("old")
    rec.chmod(0o600)
    code, _, _ = run(capsys, ["--epochs", "2", "--quiet", "--record", str(rec)])
    assert code == 0 and stat.S_IMODE(rec.stat().st_mode) == 0o600
    assert json.loads(rec.read_text().splitlines()[-1])["event"] == "ended"


# any mix of the input and output flags naming a few files: every file that was there is unchanged unless it
# was named only as an output, and then it holds a whole recording or trace
NAMES = st.sampled_from(["a.csv", "b.csv", "c.fitrec", "d.json"])


@settings(max_examples=25, deadline=None)
@given(data=NAMES, record=st.none() | NAMES, trace=st.none() | NAMES)
def test_any_mix_of_data_record_and_trace_never_destroys_an_input(tmp_path_factory, data, record, trace):
    folder = tmp_path_factory.mktemp("mix")
    for name in ("a.csv", "b.csv", "c.fitrec", "d.json"):
        shutil.copy(HOUSES if name.endswith(".csv") else DDP, folder / name)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    argv = ["--data", str(folder / data), "--target", "price", "--epochs", "1", "--quiet"]
    argv += ["--record", str(folder / record)] if record else []
    argv += ["--trace", str(folder / trace)] if trace else []
    code = cli.main(argv)
    clash = data in (record, trace) or (record is not None and record == trace)
    assert code == (2 if clash or data.endswith((".fitrec", ".json")) else 0)
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(after) == set(before)  # no temporary file left
    for name, content in before.items():
        if code != 0 or name not in (record, trace):
            assert after[name] == content, name


# -- bad files and values: one line, exit 2 -------------------------------------------------------------
def test_a_recording_with_an_integer_of_5000_digits_is_one_line(capsys, tmp_path):
    lines = DDP.read_text().splitlines()
    path = tmp_path / "huge.fitrec"
    huge = lines[1].replace('"epochs":', '"epochs":' + "9" * 5000 + ',"x":')
    path.write_text(lines[0] + "\n" + huge + "\n")
    code, out, err = run(capsys, ["replay", str(path)])
    assert code == 2 and out == ""
    says = "line 2: numbers of a few digits; this line has an integer too long to read"
    assert one_line(err).endswith(says)


@pytest.mark.parametrize(
    "cells, line",
    [
        ("1e300", "line 3, column 'a' holds '1e300' (larger than 1e15: scale the column down)"),
        ("True", "line 3, column 'a' holds 'True' (not a number written with 0-9)"),
        ("false", "line 3, column 'a' holds 'false' (not a number written with 0-9)"),
        ("١٢", "line 3, column 'a' holds '١٢' (not a number written with 0-9)"),  # Arabic-Indic digits
        ("１２", "line 3, column 'a' holds '１２' (not a number written with 0-9)"),  # full-width digits
    ],
)
def test_huge_and_boolean_cells_are_refused_with_their_line(capsys, tmp_path, cells, line):
    path = tmp_path / "x.csv"
    path.write_text(f"a,b,y\n1,2,3\n{cells},1,2\n3,4,5\n")
    code, _, err = run(capsys, ["--data", str(path), "--target", "y"])
    assert code == 2 and one_line(err).endswith(line)


def test_a_column_named_true_is_no_boolean_cell(capsys, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,true,y\n1,2,3\n2,1,2\n3,4,6\n")
    assert run(capsys, ["--data", str(path), "--target", "y", "--epochs", "2", "--quiet"])[0] == 0


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--data", "/etc", "--target", "y"],
         "--data: got '/etc'; allowed: a regular CSV file; this is a folder"),
        (["--data", str(HOUSES), "--target", "price", "--features", ""],
         "--features: got ''; allowed: column names separated by commas"),
        (["--data", str(HOUSES), "--target", "price", "--features", "area,,rooms"],
         "--features: got 'area,,rooms'; allowed: column names separated by commas"),
        (["--workers", "0"], "--workers: got 0; allowed: an integer from 1 to 8"),
        (["--workers", "-1"], "--workers: got -1; allowed: an integer from 1 to 8"),
        (["--bias", "-inf"], "--bias: got -inf; allowed: a finite number"),
        (["--strategy", "ddp", "--reshard-after-forward", "false"],  # as typed, not Python's False
         "--reshard-after-forward: got 'false'; allowed: its default: it applies only to the FSDP strategy"),
        (["--epochs", "9" * 24],
         f"--epochs: got {'9' * 24}; allowed: at most 1000000 steps and 1000000000 rows through the model in "
         f"all (epochs × data size); this run has {'9' * 24} steps and 1999…(27 digits) rows"),
        (["--epochs", "7" * 4300],  # Python prints no int of more digits: quoted by its start and its length
         "--epochs: got 7777…(4300 digits); allowed: at most 1000000 steps and 1000000000 rows through the "
         "model in all (epochs × data size); this run has 7777…(4300 digits) steps and 1555…(4303 digits) "
         "rows"),
        (["--data-size", "10000001"],
         "--epochs: got 200; allowed: at most 1000000 steps and 1000000000 rows through the model in all "
         "(epochs × data size); this run has 10000200 steps and 2000000200 rows"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_naming_the_flag_and_the_value(capsys, argv, line):
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "" and one_line(err) == "fitcore: error: " + line


def test_negative_numbers_in_exponent_form_are_values_not_flags(capsys):
    code, out, _ = run(capsys, ["--bias", "-1e-3", "--epochs", "1", "--quiet"])
    assert code == 0 and "b = -0.0010" in out.splitlines()[1]  # the true bias, as given


@pytest.mark.parametrize(
    "flag, unit, least", [("--memory-gb", "GB", "1e-09"), ("--tflops", "TFLOP/s", "1e-12"),
                          ("--bandwidth", "GB/s", "1e-09")],
)  # fmt: skip
@pytest.mark.parametrize("value", ["1e-300", "0", "1e400"])
def test_whatif_names_the_flag_and_the_value_as_given(capsys, flag, unit, least, value):
    code, _, err = run(capsys, ["whatif", "--epochs", "1", flag, value])
    assert code == 2
    assert one_line(err) == f"fitcore whatif: error: {flag}: got '{value}'; allowed: {unit} from {least}"


# -- replay: what no run could have recorded ------------------------------------------------------------
def _forged(tmp_path: Path, header=None, config=None, devices=None) -> str:
    lines = DDP.read_text().splitlines()
    head, start = json.loads(lines[0]), json.loads(lines[1])
    head.update(header or {})
    start["config"].update(config or {})
    if devices is not None:
        start["devices"] = devices
    path = tmp_path / "forged.fitrec"
    path.write_text("\n".join([json.dumps(head), json.dumps(start), *lines[2:]]) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "forged, says",
    [
        ({"header": {"version": True}}, "line 1: unknown version True"),
        ({"header": {"version": 1.0}}, "line 1: unknown version 1.0"),
        ({"config": {"strategy": "bogus"}}, "line 2: a bad started event (strategy: got 'bogus'"),
        ({"config": {"devices": "virtual:999"}}, "line 2: a bad started event (devices: got 'virtual:999'"),
        ({"config": {"weights": [1.0] * 600}}, "(600 in all); allowed: 1 to 16 numbers)"),
        ({"devices": ["cpu"] * 100_000},
         "line 2: a bad started event (devices: a list of 1 to 64 items, found a list of 100000)"),
    ],
)
def test_replay_refuses_a_recording_no_run_could_have_made(capsys, tmp_path, forged, says):
    code, out, err = run(capsys, ["replay", _forged(tmp_path, **forged)])
    assert code == 2 and out == "" and says in one_line(err)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="a machine without /dev/zero")
def test_replay_of_a_device_says_it_is_no_file(capsys):
    code, _, err = run(capsys, ["replay", "/dev/zero"])
    assert code == 2 and one_line(err).endswith("a regular file; this is a device or a pipe")


def test_every_shipped_recording_replays_on_this_machine(capsys):
    for path in sorted((ROOT / "examples").glob("*.fitrec")):
        code, _, err = run(capsys, ["replay", str(path), "--quiet"])
        assert (code, err) == (0, ""), path


# -- the server's log ------------------------------------------------------------------------------------
def test_a_protocol_error_is_one_line_in_the_servers_log_and_other_errors_keep_their_traceback():
    import h11

    keep = serve.ProtocolErrorsInOneLine()

    def record(exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            info = sys.exc_info()
        message = "Exception in ASGI application\n"
        return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, (), info)

    malformed = record(h11.LocalProtocolError("can't handle event type Response"))
    assert keep.filter(malformed) and malformed.exc_info is None
    assert malformed.getMessage() == (
        "a malformed HTTP request was refused: LocalProtocolError: can't handle event type Response"
    )
    other = record(ValueError("a bug"))
    assert keep.filter(other) and other.exc_info is not None and other.getMessage().startswith("Exception")



def test_the_shipped_recordings_are_listed_and_replayed_by_name(capsys):
    code, out, _ = run(capsys, ["examples"])
    names = [line.split()[0] for line in out.splitlines()[:-1]]
    assert code == 0 and names == sorted(p.stem for p in (ROOT / "examples").glob("*.fitrec"))
    (h200,) = [line for line in out.splitlines() if line.startswith("h200-cuda0 ")]
    assert " ".join(h200.split()) == "h200-cuda0 recorded on 1 x NVIDIA H200 on 2026-12-04 · 40 steps, " \
                                     "DataParallel on cuda:0"  # fmt: skip
    code, out, _ = run(capsys, ["replay", "--example", "h200-cuda0", "--json"])
    assert code == 0 and json.loads(out)["steps"] == 40
    code, _, err = run(capsys, ["replay", "--example", "nope"])
    assert one_line(err).startswith("fitcore: error: --example: got 'nope'; allowed: dataparallel-virtual3")
    assert code == 2
    code, _, err = run(capsys, ["replay", str(DDP), "--example", "h200-cuda0"])
    assert code == 2 and "a recording file or --example NAME, one of the two" in one_line(err)
