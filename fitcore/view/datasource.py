"""The page's own data and recordings, as plain data: a CSV upload's config values and preview, the
parameters in the file's units, the recordings a page replays and makes, and their downloads.

app.py draws the widgets; what they decide is here, so that it is tested without Streamlit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from fitcore.core import csvdata, paths
from fitcore.core.config import FitConfig
from fitcore.core.errors import ConfigError
from fitcore.core.i18n import t
from fitcore.core.uploads import UploadStore
from fitcore.protocols import registry
from fitcore.runs import recording
from fitcore.runs.runner import Snapshot
from fitcore.runs.trace import trace_of
from fitcore.view.common import parameter_names

SOURCES = ("synthetic", "csv")  # the data-source choice: y = X·W + b, or an uploaded CSV file
EXAMPLES = paths.EXAMPLES  # houses.csv and the recordings
EXAMPLE_CSV = EXAMPLES / "houses.csv"
MAX_RECORDING_MB = 16  # the largest recording the page takes: 16 MB is some 10,000 steps at 8 devices
MAX_RECORDED_STEPS = 20_000  # runs up to this long are recorded by the page (at most about 30 MB)
DATA_FIELDS = ("data", "target", "features", "recording")  # the fields this module's refusals name


def field_error(exc: ConfigError) -> ConfigError:
    """exc with its field named as the page calls it ("CSV file", "Target column"), in the page's language;
    other fields as they are (the controls' labels name them)."""
    if exc.field not in DATA_FIELDS:
        return exc
    return ConfigError(t(f"data.field.{exc.field}"), exc.value, exc.allowed)


# ---------------------------------------------------------------------------------------------------------
# A CSV upload.


def default_features(names: tuple[str, ...], target: str) -> list[str]:
    """Every column but the target, the first 16 of them."""
    return [n for n in names if n != target][: csvdata.MAX_FEATURES]


def csv_values(path: str, target: str, features: list[str], standardize: bool) -> dict[str, Any]:
    """The config values of a CSV source (validate() fills in its rows, checksum and reference)."""
    return {
        "data": str(path),
        "target": target,
        "features": tuple(features),
        "standardize": bool(standardize),
    }


def preview_rows(names: tuple[str, ...], rows: list[list[str]]) -> list[dict[str, str]]:
    """csvdata.preview's rows as a table's rows, by column name (a short line leaves cells empty)."""
    return [{name: (row[i] if i < len(row) else "") for i, name in enumerate(names)} for row in rows]


def save_upload(store: UploadStore, owner: str, name: str, data: bytes) -> Path:
    """Keep an uploaded CSV file as the owner's latest, under its own name."""
    return store.save(owner, "csv", name, data)


# ---------------------------------------------------------------------------------------------------------
# The parameters in the file's units.


def source_of(cfg: FitConfig, header: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A CSV run's source (csvdata.source): a replay's from its recording's header, a live run's from its
    file. None for synthetic data, or a file that is no longer there."""
    if not cfg.data:
        return None
    if header is not None:
        data = header.get("data")
        return data if isinstance(data, dict) else None
    try:
        return csvdata.source(cfg)
    except ConfigError:
        return None


def file_units_rows(snap: Snapshot, source: dict[str, Any]) -> list[dict[str, Any]]:
    """Each parameter in the file's units: learned, least squares, and their difference.

    The least-squares answer of the standardised data, mapped back with the same scaling, is the
    least-squares answer on the raw columns (an affine change of the columns does not move the optimum).
    """
    if not snap.weights or snap.bias is None:
        return []
    learned = csvdata.data_result(source, snap.weights, snap.bias)
    names = list(source.get("features") or parameter_names(snap.config.n_features)[:-1]) + ["b"]
    values = learned["weights_original"] + [learned["bias_original"]]
    lstsq = None
    if snap.lstsq_weights is not None:
        ref = csvdata.data_result(source, snap.lstsq_weights, snap.lstsq_bias)
        lstsq = ref["weights_original"] + [ref["bias_original"]]
    return [
        {
            t("data.results.col.parameter"): name,
            t("data.results.col.learned"): values[i],
            t("data.results.col.lstsq"): lstsq[i] if lstsq else None,
            t("data.results.col.diff"): values[i] - lstsq[i] if lstsq else None,
        }
        for i, name in enumerate(names)
    ]


def source_caption(source: dict[str, Any]) -> str:
    """What the run was trained on, and how the table of file units relates to the one above it."""
    fields = dict(file=source["file"], target=source["target"], features=", ".join(source["features"]),
                  rows=source["rows"])  # fmt: skip
    key = "data.results.standardized" if source.get("standardized") else "data.results.raw"
    return t(key, **fields)


# ---------------------------------------------------------------------------------------------------------
# Recordings: the examples, an upload, the page's own, and the downloads.


def example_recordings() -> list[Path]:
    """examples/*.fitrec, by name."""
    return sorted(EXAMPLES.glob("*.fitrec")) if EXAMPLES.is_dir() else []


def read_recording(path: str | Path, name: str | None = None) -> recording.Recording:
    """Read a recording the page replays: at most MAX_RECORDING_MB, checked line by line.

    Raises ConfigError (RecordingError) naming the file, the line and the problem.
    """
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if size > MAX_RECORDING_MB * 1_000_000:
        raise ConfigError("recording", name or os.path.basename(str(path)),
                          t("data.replay.max", mb=MAX_RECORDING_MB, size=size))  # fmt: skip
    return recording.read(str(path))


def recordable(cfg: FitConfig) -> bool:
    """Does the page record this run? Runs of at most MAX_RECORDED_STEPS steps (some 30 MB at most)."""
    return cfg.total_steps <= MAX_RECORDED_STEPS


def recorder_for(store: UploadStore, owner: str) -> tuple[Callable[[FitConfig], Any], dict]:
    """A listener factory for RunPool.submit that records the run to a fresh file of the owner's, and the
    dict it fills in: {"path": ..., "recorder": ...} once the run's config was valid and recordable."""
    made: dict[str, Any] = {}

    def listener(cfg: FitConfig):
        if not recordable(cfg):
            return lambda event: None
        path = store.new_path(owner, "record", "run.fitrec")
        extra = {"data": csvdata.source(cfg)} if cfg.data else None
        made.update(path=path, recorder=recording.Recorder(str(path), extra=extra))
        return made["recorder"]

    return listener, made


def trace_json(path: str | Path, label: str = "") -> str:
    """The Chrome trace (fitcore.runs.trace) of a recording's steps, as JSON text."""
    rec = recording.read(str(path))
    name = t("data.trace.replay", label=label) if label else "fitcore run"
    return json.dumps(trace_of(rec.events, name, registry.flows), separators=(",", ":"))


def download_name(snap: Snapshot, suffix: str) -> str:
    return f"fitcore-{snap.run_id}{suffix}"
