"""Your own data and recordings (fitcore.view.datasource): a CSV upload, a replay, the Record and Trace
downloads. Uploads and the page's recordings are files of this browser's owner in the server's store."""

from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from dashboard.state import archive_current, get_pool
from fitcore.core.config import Checked, ConfigError
from fitcore.core.i18n import t
from fitcore.core.uploads import server_store
from fitcore.runs.runner import Snapshot
from fitcore.view import controls, datasource
from fitcore.view.common import escape_markdown

REPLAY_UPLOAD = "upload"  # the replay choice that takes an uploaded file rather than an example
KEEP_RUN_FILES = 8  # runs whose recording, label and data source the page remembers


def data_source_ui() -> bool:
    """The data-source choice; with a CSV file, its upload, columns and preview. True for a CSV file."""
    ss = st.session_state
    st.subheader(t("data.source.title"))
    st.radio(
        t("data.source.title"), datasource.SOURCES, key="data_source", horizontal=True,
        format_func=lambda s: t(f"data.source.{s}"), label_visibility="collapsed",
    )  # fmt: skip
    if ss.data_source != "csv":
        return False
    mb = st.get_option("server.maxUploadSize")
    upload = st.file_uploader(
        t("data.upload.label"), type=["csv"], key="csv_upload", help=t("data.upload.help", mb=mb)
    )
    if upload is not None and upload.file_id != ss.get("csv_file_id"):
        csv_chosen(upload.name, upload.getvalue(), upload.file_id)
    elif upload is None and ss.get("csv_file_id") not in (None, "example"):
        datasource.csvdata.forget(ss.csv_path)  # the upload was removed
        ss.csv_path = ss.csv_file_id = None
    st.button(t("data.example.button"), key="csv_example", on_click=csv_example)
    if ss.get("csv_path"):
        csv_columns_ui()
    else:
        st.caption(t("data.no_file"))
    return True


def csv_chosen(name: str, data: bytes, file_id: str) -> None:
    """Keep a new file as this browser's latest upload; its columns are chosen afresh."""
    ss = st.session_state
    replaced = ss.get("csv_path")
    ss.csv_path = str(datasource.save_upload(server_store(), ss.owner, name, data))
    ss.csv_file_id, ss.csv_preview = file_id, None
    if replaced and replaced != ss.csv_path:  # its table goes now, not once two more files are read
        datasource.csvdata.forget(replaced)
    for key in ("csv_target", "csv_features"):
        ss.pop(key, None)


def csv_example() -> None:
    """The example file, examples/houses.csv, as if it were uploaded."""
    csv_chosen(datasource.EXAMPLE_CSV.name, datasource.EXAMPLE_CSV.read_bytes(), "example")


def csv_columns_ui() -> None:
    """The target and feature columns of the file, standardisation, and its first rows."""
    ss = st.session_state
    path = ss.csv_path
    if ss.get("csv_preview") is None or ss.csv_preview[0] != path:
        try:
            ss.csv_preview = (path, *datasource.csvdata.preview(path))
        except ConfigError:
            ss.csv_preview = (path, None, None)  # the run's validation names what is wrong, once
    _, names, rows = ss.csv_preview
    if names is None:
        return
    ss.setdefault("csv_target", names[-1])
    target = st.selectbox(t("data.target.label"), names, key="csv_target")
    options = [n for n in names if n != target]
    kept = [f for f in ss.get("csv_features") or [] if f in options]
    ss.csv_features = kept or datasource.default_features(names, target)
    st.multiselect(
        t("data.features.label", n=datasource.csvdata.MAX_FEATURES), options, key="csv_features",
        max_selections=datasource.csvdata.MAX_FEATURES, placeholder=t("page.choose"),
    )  # fmt: skip
    st.checkbox(t("data.standardize.label"), value=True, key="csv_standardize",
                help=t("data.standardize.help"))  # fmt: skip
    fit_batch_to_file()
    st.caption(t("data.preview", n=len(rows), file=os.path.basename(path)))
    st.dataframe(pd.DataFrame(datasource.preview_rows(names, rows)), hide_index=True, key="csv_preview_table")


def fit_batch_to_file() -> None:
    """A new file of fewer rows than the batch size: one batch, as the command line does."""
    ss = st.session_state
    if ss.get("csv_batch_fitted") == ss.csv_path:
        return
    ss.csv_batch_fitted = ss.csv_path
    try:
        rows = len(datasource.csvdata.load(ss.csv_path, ss.csv_target, tuple(ss.csv_features)).y)
    except ConfigError:
        return
    if ss.batch_size > rows:
        ss.batch_size = rows


def run_config(values: dict, gpus: dict) -> Checked:
    """The run's config from the controls and the data source, checked with its device plan; a ConfigError
    names the control or file. Checked once for the same controls: the script's every rerun and a Start's
    callback read the last check, which the pool takes as it is (fitcore.runs.pool.RunPool.submit)."""
    ss = st.session_state
    if ss.get("data_source") == "csv" and not values.get("data"):
        raise datasource.field_error(ConfigError("data", "", t("data.need_file")))
    key = repr((sorted(values.items()), sorted(gpus)))
    last = ss.get("checked_controls")
    if last is not None and last[0] == key:
        return last[1]
    try:
        checked = controls.checked_from_controls(values, get_pool().settings.limits, list(gpus.values()))
    except ConfigError as exc:
        raise datasource.field_error(exc) from None
    ss.checked_controls = (key, checked)
    return checked


def remember_run(run_id: str, **info) -> None:
    """What the page keeps of a run: its recording's path, replay label, data source, recorder."""
    ss = st.session_state
    kept = ss.setdefault("run_files", {})
    kept[run_id] = info
    for old in list(kept)[:-KEEP_RUN_FILES]:
        del kept[old]


def submit_run(checked: Checked) -> Snapshot:
    """Start the run through the pool, recorded to a file of this browser's when it is not too long."""
    ss = st.session_state
    listener, made = datasource.recorder_for(server_store(), ss.owner)
    pace = controls.parse_pace(ss.pace, checked.config.strategy)
    snap = get_pool().submit(ss.owner, checked, pace, listener=listener)
    remember_run(
        snap.run_id,
        path=made.get("path"),
        recorder=made.get("recorder"),
        label="",
        source=datasource.source_of(snap.config),
        too_long=not datasource.recordable(snap.config),
    )
    return snap  # fmt: skip


def replay_ui() -> None:
    """Replay a recording: an example of this project or an uploaded file, with the live run's controls."""
    ss = st.session_state
    st.subheader(t("data.replay.title"))
    examples = {p.name: p for p in datasource.example_recordings()}
    names = {**{name: name for name in examples}, REPLAY_UPLOAD: t("data.replay.upload_choice")}
    st.selectbox(t("data.replay.choose"), list(names), key="replay_choice", format_func=names.get)
    if ss.replay_choice == REPLAY_UPLOAD:
        mb = datasource.MAX_RECORDING_MB
        st.file_uploader(
            t("data.replay.upload"), type=["fitrec"], key="replay_upload", max_upload_size=mb,
            help=t("data.replay.upload_help", mb=mb),
        )  # fmt: skip
    snap = ss.snap
    # no file to replay (none chosen, or one the uploader refused with its own message): nothing to press, so
    # an oversize upload is told once, by the uploader
    no_file = ss.replay_choice == REPLAY_UPLOAD and ss.get("replay_upload") is None
    st.button(t("data.replay.button"), key="replay", on_click=start_replay,
              disabled=(snap is not None and snap.active) or no_file, help=t("data.replay.help"))  # fmt: skip


def replay_file() -> tuple[str, str]:
    """The chosen recording's path and name: an example, or the upload kept in this browser's store."""
    ss = st.session_state
    if ss.replay_choice != REPLAY_UPLOAD:
        path = datasource.EXAMPLES / ss.replay_choice
        return str(path), path.name
    upload = ss.get("replay_upload")
    if upload is None:
        raise ConfigError("recording", "", t("data.replay.no_file"))
    if ss.get("replay_file_id") != upload.file_id:
        ss.replay_path = str(server_store().save(ss.owner, "fitrec", upload.name, upload.getvalue()))
        ss.replay_file_id = upload.file_id
    return ss.replay_path, upload.name


def start_replay() -> None:
    ss = st.session_state
    ss.start_error, ss.url_errors, ss.notices, ss.run_gone = None, [], [], False
    try:
        path, name = replay_file()
        recording = datasource.read_recording(path, name)
        pace = controls.parse_pace(ss.pace, recording.config.strategy)
        snap = get_pool().submit_replay(ss.owner, recording, pace)
    except ConfigError as exc:
        ss.start_error = controls.error_text(datasource.field_error(exc))
        return
    archive_current()
    ss.run_id, ss.snap = snap.run_id, snap
    ss.run_number = get_pool().run_number(ss.owner, snap.run_id)
    source = datasource.source_of(snap.config, recording.header)
    remember_run(snap.run_id, path=path, recorder=None, label=recording.label, source=source, too_long=False)


def data_results_ui(snap: Snapshot | None) -> None:
    """A CSV run's parameters in the file's units, against least squares on the raw columns."""
    if snap is None or not snap.weights or not snap.config.data:
        return
    info = st.session_state.get("run_files", {}).get(snap.run_id, {})
    source = info.get("source")
    if not source:
        return
    st.markdown(f"**{t('data.results.title')}**")
    st.caption(escape_markdown(datasource.source_caption(source)))
    table = pd.DataFrame(datasource.file_units_rows(snap, source))
    for column, form in zip(table.columns[1:], ("{:.4f}", "{:.4f}", "{:+.4f}")):
        table[column] = table[column].map(lambda v, f=form: "" if v is None else f.format(v))
    st.table(table, hide_index=True)


def recording_downloads_ui(snap: Snapshot | None) -> None:
    """Record (the run's events, .fitrec) and Trace (Chrome trace JSON) of an ended run."""
    if snap is None or snap.active:
        return
    info = st.session_state.get("run_files", {}).get(snap.run_id)
    if info is None:
        return
    if info.get("too_long"):
        st.caption(t("data.download.too_long", n=datasource.MAX_RECORDED_STEPS))
        return
    path, recorder = info.get("path"), info.get("recorder")
    if not path or (recorder is not None and not recorder.complete) or not os.path.exists(path):
        return
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        t("data.download.record"), data=lambda: _file_bytes(path),
        file_name=datasource.download_name(snap, ".fitrec"), mime="application/x-ndjson",
        key="download_record", on_click="ignore", help=t("data.download.record_help"),
    )  # fmt: skip
    right.download_button(
        t("data.download.trace"), data=lambda: datasource.trace_json(path, info.get("label", "")),
        file_name=datasource.download_name(snap, "-trace.json"), mime="application/json",
        key="download_trace", on_click="ignore", help=t("data.download.trace_help"),
    )  # fmt: skip


def _file_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""
