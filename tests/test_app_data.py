"""The page's own data and recordings through AppTest: a CSV upload trained to its least-squares answer, a
bad file refused with one line, a recording replayed to its recorded end, and the Record and Trace downloads.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fitcore.core import csvdata
from fitcore.core.events import Status
from fitcore.core.uploads import KEEP_PER_KIND, UploadStore, safe_name
from fitcore.kit import live
from fitcore.protocols import registry
from fitcore.runs import recording
from fitcore.view import datasource, results
from fitcore.view.status import status_line
from tests import test_app
from tests.test_app import wait_for_run

ROOT = Path(__file__).resolve().parents[1]
HOUSES = ROOT / "examples" / "houses.csv"
page = test_app.page  # the fixture: fresh sessions of the page, every run stopped afterwards


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def upload_csv(at, name: str, data: bytes):
    at.radio(key="data_source").set_value("csv").run()
    at.file_uploader(key="csv_upload").set_value((name, data, "text/csv")).run()
    assert not at.exception
    return at


def snapshot(at):
    pool, owner = at.session_state["pool"], at.session_state["owner"]
    return pool.snapshot(owner, at.session_state["run_id"])


def test_an_uploaded_csv_trains_to_least_squares_on_the_raw_file(page):
    at = upload_csv(page(), "houses.csv", HOUSES.read_bytes())
    assert errors(at) == []
    assert at.selectbox(key="csv_target").value == "price"
    assert at.multiselect(key="csv_features").value == ["area", "rooms", "age"]
    assert at.checkbox(key="csv_standardize").value is True  # on by default
    assert at.number_input(key="batch_size").value == 120  # 120 rows: one batch, as the command line
    (preview,) = [d.value for d in at.sidebar.dataframe]
    assert list(preview.columns) == ["area", "rooms", "age", "price"] and len(preview) == 5
    first = HOUSES.read_text().splitlines()[1].split(",")
    assert list(preview.iloc[0]) == first
    at.number_input(key="epochs").set_value(300)
    at.selectbox(key="pace").set_value("max")
    at.button(key="start").click().run()
    at = wait_for_run(at, lambda s: not s.active)
    assert not at.exception and errors(at) == []
    snap = snapshot(at)
    assert snap.status == Status.FINISHED and snap.config.standardize

    table = csvdata.read_table(str(HOUSES), "price")
    A = np.hstack([table.X, np.ones((len(table.y), 1))])
    expected = np.linalg.lstsq(A, table.y, rcond=None)[0]  # (area, rooms, age, b) on the raw columns
    # the page's two tables of the parameters, in order: standardised (the run's), then in the file's units
    params, units = [tb.value for tb in at.table if "area" in list(tb.value.iloc[:, 0])]
    assert list(units.iloc[:, 0]) == ["area", "rooms", "age", "b"]
    shown = units.iloc[:, 1].astype(float).to_numpy()
    np.testing.assert_allclose(shown, expected, rtol=1e-4, atol=5e-5)  # shown to 4 decimals
    source = at.session_state["run_files"][snap.run_id]["source"]
    learned = [r["Learned"] for r in datasource.file_units_rows(snap, source)]
    np.testing.assert_allclose(learned, expected, rtol=1e-4)
    # the standardised parameters' table has no "true" values: a file has none
    # the standardised parameters' table names the columns too, and has no "true" values: a file has none
    assert list(params.iloc[:, 0]) == ["area", "rooms", "age", "b"] and "True" not in params.columns
    assert "Learned − true" not in params.columns  # a file has no true values: no true columns either
    result = json.loads(results.result_json(snap, "houses.csv"))
    assert result["config"]["data"] == "houses.csv"  # as the page's download names it, not the server's path
    assert result["true_weights"] is None and result["true_bias"] is None
    assert live.payload(snap)["true"] is None and live.payload(snap)["lstsq"] is not None

    # the run was recorded: its file replays to the same final parameters
    labels = [b.label for b in at.get("download_button")]
    assert labels[-2:] == ["Record (.fitrec)", "Trace (Chrome JSON)"]
    path = at.session_state["run_files"][snap.run_id]["path"]
    rec = recording.read(str(path))
    assert rec.ended.weights == snap.weights and rec.ended.bias == snap.bias
    assert rec.header["data"]["target_scale"] == pytest.approx(table.y.std())
    trace = json.loads(datasource.trace_json(path))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["args"]["step"] for e in complete} == set(range(1, 301))


@pytest.mark.parametrize(
    "name, data, message",
    [
        (
            "bad.csv",
            b"area,price\n1,2\nn/a,3\n",
            "CSV file: got 'bad.csv'; allowed: a finite number in every cell; line 3, column 'area' holds "
            "'n/a' (not a number written with 0-9)",
        ),
        (
            "bin.csv",
            b"\x00\x01\x02",
            "CSV file: got 'bin.csv'; allowed: a text CSV file; found binary data (a NUL byte at byte 0)",
        ),  # fmt: skip
        (
            "empty.csv",
            b"",
            "CSV file: got 'empty.csv'; allowed: a CSV file with a header line and rows; the file is empty",
        ),  # fmt: skip
    ],
)
def test_a_bad_csv_is_one_error_line_and_nothing_else(page, name, data, message):
    at = upload_csv(page(), name, data)
    assert errors(at) == [message]
    assert at.button(key="start").disabled
    assert not at.exception


def test_a_replay_plays_to_its_recorded_end_with_its_label(page):
    example = ROOT / "examples" / "dataparallel-virtual3.fitrec"
    rec = recording.read(str(example))
    at = page()
    at.selectbox(key="replay_choice").set_value(example.name)
    at.selectbox(key="pace").set_value("max")
    at.button(key="replay").click().run()
    at = wait_for_run(at, lambda s: not s.active)
    assert not at.exception and errors(at) == []
    snap = snapshot(at)
    assert snap.status == Status.FINISHED and snap.step == rec.ended.steps == 20
    assert (snap.weights, snap.bias) == (rec.ended.weights, rec.ended.bias)  # exactly the recorded ones
    label = "recorded on a CPU on 2026-12-04"
    assert rec.short_label == label and rec.label.startswith("recorded on a CPU (x86_64, Linux, torch ")
    run = live.payload(snap, 0, 1)["run"]
    assert status_line(snap).startswith(f"Finished · {label} · epoch 10 / 10 · step 20 / 20 · ")
    assert run["status_line"] == status_line(snap)
    assert run["label"] == f"Run 1 · DataParallel · virtual:3 · {label}"
    assert [b.label for b in at.get("download_button")][-2:] == ["Record (.fitrec)", "Trace (Chrome JSON)"]


def test_a_bad_recording_upload_is_one_error_line(page):
    at = page()
    at.selectbox(key="replay_choice").set_value("upload").run()
    upload = ("run.fitrec", b'{"format": "other"}\n', "text/plain")
    at.file_uploader(key="replay_upload").set_value(upload).run()
    at.button(key="replay").click().run()
    assert errors(at) == [
        "Recording: got 'run.fitrec'; allowed: a fitcore-recording file of version 1 or 2 or 3; line 1: "
        'not a recording header (expected {"format": "fitcore-recording", ...})'
    ]
    assert at.session_state["run_id"] is None and not at.exception


# ---------------------------------------------------------------------------------------------------------
# The store of uploads.


def test_the_store_keeps_two_files_per_owner_and_kind_under_their_own_names(tmp_path):
    store = UploadStore(str(tmp_path))
    paths = [store.save("owner", "csv", "../../etc/houses.csv", b"%d" % i) for i in range(4)]
    assert all(p.name == "houses.csv" and tmp_path in p.parents for p in paths)
    assert len({p.parent for p in paths}) == 4  # a fresh directory per upload
    kept = store.files("owner", "csv")
    assert kept == paths[-KEEP_PER_KIND:] and [p.read_bytes() for p in kept] == [b"2", b"3"]
    assert not paths[0].exists() and not paths[0].parent.exists()
    other = store.save("someone else", "csv", "a.csv", b"x")
    assert other.parents[2] != paths[-1].parents[2]  # owners apart, by a digest of their id
    assert store.files("owner", "csv") == kept


def test_the_store_bounds_the_bytes_of_every_owner_together(tmp_path):
    store = UploadStore(str(tmp_path), max_total_bytes=250)
    first = store.save("a", "csv", "a.csv", b"x" * 100)
    second = store.save("b", "csv", "b.csv", b"y" * 100)
    third = store.save("c", "csv", "c.csv", b"z" * 100)  # 300 > 250: the oldest file goes
    assert not first.exists() and second.exists() and third.exists()


@pytest.mark.parametrize(
    "name, safe", [("houses.csv", "houses.csv"), ("../x/y.csv", "y.csv"), (".hidden", "hidden"),
                   ("a b;c.csv", "a_b_c.csv"), ("..", "upload.csv"), ("价格.csv", "_.csv")],
)  # fmt: skip
def test_safe_names(name, safe):
    assert safe_name(name, "upload.csv") == safe


@pytest.mark.slow  # about 8 s on 2 cores
def test_a_ddp_replay_shows_ddps_title_and_no_lesson_of_the_sidebars_preset(page):
    at = page()
    assert at.selectbox(key="preset").value == "The tutorial"  # the sidebar: DataParallel's tutorial
    at.selectbox(key="replay_choice").set_value("ddp-2ranks.fitrec")
    at.selectbox(key="pace").set_value("1")
    at.button(key="replay").click().run()
    assert not at.exception and snapshot(at).config.strategy == "ddp"
    assert at.header[0].value == "How DistributedDataParallel shards the data"
    # the tutorial's lesson ("two chunks of 100") is not the recording's: its settings match no preset
    assert not [i for i in at.info if "The tutorial" in i.value]
    at.button(key="stop").click().run()
    at = wait_for_run(at, lambda s: not s.active)
    assert [c.value for c in at.caption if c.value.startswith("Shown: the recording's own settings")]


def test_a_replaced_upload_lets_its_table_go(page, tmp_path):
    from fitcore.core import csvdata

    at = upload_csv(page(), "houses.csv", HOUSES.read_bytes())
    first = at.session_state["csv_path"]
    assert first in csvdata.cached_paths()  # read for the run's config
    other = HOUSES.read_text().replace("\n1", "\n2", 1).encode()  # another file: one area changed
    at.file_uploader(key="csv_upload").set_value(("houses2.csv", other, "text/csv")).run()
    assert not at.exception and errors(at) == []
    second = at.session_state["csv_path"]
    assert second != first and second in csvdata.cached_paths()
    assert first not in csvdata.cached_paths()  # let go at once, not after two more reads


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.fitrec")))
def test_every_shipped_recording_replays_and_reloads_on_a_machine_without_gpus(page, monkeypatch, example):
    """A replay's settings are the recording machine's (cuda:0 on an H200): a page on this CPU-only machine
    shows them, reloaded too, and its own controls keep what this machine has."""
    from dashboard import state

    monkeypatch.setattr(state, "browser_owner", lambda: "teacher")  # the reload is the same browser
    at = page()
    at.selectbox(key="replay_choice").set_value(example)
    at.selectbox(key="pace").set_value("1")
    at.button(key="replay").click().run()
    assert not at.exception and errors(at) == []
    recorded = recording.read(str(ROOT / "examples" / example)).config
    assert snapshot(at).config == recorded
    # the heading says what ran: one GPU's recording splits nothing
    (heading,) = [h.value for h in at.header]
    one = not registry.strategy(recorded.strategy).processes and recorded.devices in ("cuda:0", "cpu")
    assert (heading == "One device: the whole batch, nothing split") == one, (example, heading)
    again = page()  # the reload: the same owner finds its replay
    assert not again.exception and errors(again) == []
    assert snapshot(again).config == recorded
    assert again.session_state["device_mode"] == "virtual"  # no GPU here: the controls stay this machine's
    again.button(key="stop").click().run()
    assert not again.exception
