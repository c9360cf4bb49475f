"""What a live page reads while a run trains: one JSON payload, sent whole at first and then as increments.

The page's live view (the step picture, the loss and the parameter charts) runs in the browser and asks for
`payload(snap, since)` every few hundred milliseconds, so the server never reruns a page's script to move a
chart. The payload holds plain JSON types only; NaN and infinities become null (JSON has neither).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from typing import Any, Sequence

from fitcore.core.config import Checked, FitConfig
from fitcore.core.devices import label_parts
from fitcore.core.events import MAX_IDS, Step
from fitcore.core.i18n import t
from fitcore.core.phases import step_bytes
from fitcore.protocols import registry
from fitcore.protocols.mesh import grid
from fitcore.runs.recording import GROUP
from fitcore.runs.runner import Snapshot
from fitcore.view.common import data_words, fitted_names
from fitcore.view.status import diverged_at, status_kind, status_line

MAX_POINTS = 4000  # points of each series in one answer; the history itself keeps fewer
ITEMSIZE = 4  # bytes of a float32: X, y and the parameters (fitcore.core.data)


def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _after(points: Sequence[tuple[int, Any]], since: int) -> Sequence[tuple[int, Any]]:
    """The points whose step is after `since`, the latest MAX_POINTS of them (a history is sorted by step)."""
    i = bisect_right(points, since, key=lambda p: p[0])
    return points[max(i, len(points) - MAX_POINTS) :]


def json_safe(value: Any) -> Any:
    """value with every NaN and infinity replaced by None, through lists, tuples and dicts."""
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value


def run_title(snap: Snapshot, number: int | None = None) -> str:
    """ "Run 2 · DataParallel · virtual:3": how the page names a run, in its legend and overlay too."""
    name = t("live.run.title", n=number) if number else ""  # a number for a student, never the run's id
    return _label(snap.config, name, snap.source_label)  # a replay says what it replays


def legend_title(snap: Snapshot, number: int | None = None) -> str:
    """ "Run 1 · DataParallel · cuda:0": the run in the loss chart's legend, short enough for its line; the
    replay's source and a CSV file's words are in the status line and the run's title (its hover text)."""
    return _label(snap.config, t("live.run.title", n=number) if number else "", with_data=False)


def _label(cfg: FitConfig, name: str = "", source: str = "", with_data: bool = True) -> str:
    """The run's name, strategy, devices, a CSV file's words, a replay's source: those that apply."""
    parts = (name, registry.of(cfg).label, cfg.devices, data_words(cfg) if with_data else "", source)
    return " · ".join(p for p in parts if p)


def run_part(snap: Snapshot, number: int | None = None) -> dict[str, Any]:
    """The run's status, for the line above the picture."""
    return {
        "id": snap.run_id,
        "label": run_title(snap, number),
        "legend": legend_title(snap, number),
        "strategy": snap.config.strategy,
        "status": str(snap.status),
        "active": snap.active,
        "status_line": status_line(snap),
        "kind": status_kind(snap),
        "step": snap.step,
        "diverged_at": diverged_at(snap),  # the charts' red line and the picture's note (view.status)
        "total_steps": snap.total_steps,
        "pace": snap.pace,
        "server_time": time.time(),
    }


def picture(snap: Snapshot) -> dict[str, Any] | None:
    """The latest step as the step picture draws it (None before the first step)."""
    if snap.latest is None:
        return None
    pic = _picture(snap.config, snap.latest, snap.devices, snap.emulated, snap.latest_time, snap.extra)
    # the process group's detail names each rank's host where torchrun launched them (fitcore.engine)
    group = snap.extra.get(GROUP)
    hosts = group.get("hosts") if isinstance(group, dict) else None
    return with_hosts(pic, hosts)


def with_hosts(pic: dict, hosts: Sequence[str] | None) -> dict:
    """The picture with each rank's host, where the ranks ran on more than one (a torchrun run across
    machines, live or replayed): the timeline groups its rows by host; the ring marks hops between them."""
    devices = pic["devices"]
    if not hosts or len(hosts) != len(devices) or len(set(hosts)) < 2:
        return {**pic, "hosts": None}
    for device, host in zip(devices, hosts):
        device["host"] = str(host)
    return {**pic, "hosts": list(dict.fromkeys(map(str, hosts)))}


def short_label(label: str) -> str:
    """ "virtual:0" for "virtual:0 (emulated on CPU)": the picture says once, beneath, that it is emulated."""
    return label_parts(label)[0]


def emulated_on(label: str) -> str:
    """ "the CPU" or "cuda:0": where an emulated device's replicas run, from its label (in the current
    language: the payload is made for one page)."""
    on = label_parts(label)[1]
    return t("live.picture.cpu") if on in (None, "CPU") else on


MESH_DRAWER = "mesh"  # frontend/draw_mesh.js: the ranks of a 2-D mesh as its grid
DRAWER_PATH = "/fitcore/static/drawers"  # + "/<drawer>.js": a strategy's drawer from outside frontend/


def drawer_url(strategy) -> dict:
    """{"drawer_url": where the page imports the strategy's drawer from} where it ships one of its own
    (its record's `drawer_file`), else nothing: frontend/ has the built-in drawers."""
    return {"drawer_url": f"{DRAWER_PATH}/{strategy.drawer}.js"} if strategy.drawer_file else {}


# the phases a 2-D step may have, DDP's or FSDP's over dp, each with its tp all-reduce (the drawer draws each)
MESH_PHASES = ("load", "all_gather", "forward", "tp_allreduce", "loss", "backward", "allreduce",
               "reduce_scatter", "optimizer")  # fmt: skip


def mesh_part(cfg: FitConfig) -> dict:
    """A 2-D run's mesh for its picture: the dimensions, outermost first, each rank's coordinates on them,
    and the features (X's columns), which the `tp` dimension cuts."""
    return {
        "mesh": {"dims": [list(d) for d in cfg.mesh_dims], "coords": grid(cfg.mesh_dims)},
        "features": cfg.n_features,
    }


def _picture(
    cfg: FitConfig,
    step: Step,
    labels: Sequence[str],
    emulated: bool,
    when: float | None,
    extra: dict | None = None,
) -> dict:
    """Every selected device, busy or idle, with its rows, shapes and first dataset ids; the step's phases."""
    by_device = {r.device: r for r in step.replicas}
    devices = []
    for label in labels:
        r = by_device.get(label)
        if r is None:
            devices.append({"label": short_label(label), "busy": False, "rows": 0})
            continue
        devices.append({
            "label": short_label(label), "busy": True, "start": r.start, "stop": r.stop, "rows": r.rows,
            "input_shape": list(r.input_shape), "output_shape": list(r.output_shape),
            "ids": list(r.ids[:MAX_IDS]), "loss": _number(r.loss),
            **({} if r.columns is None else {"columns": list(r.columns)}),  # its features [lo, hi) of X
        })  # fmt: skip
    # the strategy's own part: DDP's padding rows, FSDP's shards and each rank's memory; a pipeline's
    # blocks' ticks and microbatches, added to each phase's entry (its `phase_fields`, in the phases' order)
    entry = registry.of(cfg)
    own = entry.picture(cfg, step, devices, extra or {})
    fields = own.pop("phase_fields", None) or ()
    # a 2-D mesh is drawn as its grid, whatever runs its `dp` dimension (frontend/draw_mesh.js); a strategy's
    # drawer from outside frontend/ comes with where the page serves it
    mesh = mesh_part(cfg) if len(cfg.mesh_dims) > 1 else {}
    drawer = {"drawer": MESH_DRAWER} if mesh else {"drawer": entry.drawer, **drawer_url(entry)}
    return own | mesh | drawer | {
        "strategy": cfg.strategy,
        "step": step.step,
        "epoch": step.epoch,
        "batch": step.batch,
        "loss": _number(step.loss),
        "time": when,
        "batch_rows": step.input_shape[0],
        "input_shape": list(step.input_shape),
        "output_shape": list(step.output_shape),
        "first_device": short_label(labels[0]) if labels else "",
        "emulated": emulated,
        "emulated_on": emulated_on(labels[0]) if emulated and labels else None,
        "devices": devices,
        "phases": [
            {
                "name": p.name,
                "device": short_label(p.device),
                "start": p.start,
                "duration": p.duration,
                "bytes": p.bytes,
                **(fields[i] if i < len(fields) else {}),
            }
            for i, p in enumerate(step.phases.phases() if step.phases else ())
        ],
        # the step's batch, every device's rows together (a strategy that splits columns: the batch itself)
        "bytes": step_bytes(step.input_shape[0], len(labels), cfg.n_features, ITEMSIZE, cfg),
        "strategy_labels": {s.name: s.short for s in registry.STRATEGIES.values()},
    }


def payload(snap: Snapshot, since: int = 0, number: int | None = None) -> dict[str, Any]:
    """Everything the live view needs after step `since`: since=0 gives the whole of it."""
    cfg = snap.config
    loss = [[s, _number(v)] for s, v in _after(snap.loss_history, since)]
    params = [[s, [_number(v) for v in values]] for s, values in _after(snap.param_history, since)]
    lstsq = None
    if snap.lstsq_weights is not None:
        lstsq = [_number(v) for v in snap.lstsq_weights] + [_number(snap.lstsq_bias)]
    return {
        "run": run_part(snap, number),
        **_parameters(cfg),
        "lstsq": lstsq,
        "loss": loss,
        "params": params,
        "picture": picture(snap),
    }


def _parameters(cfg: FitConfig) -> dict[str, list]:
    """The parameters' names (w1 ... wd, b) and their true values: the parameter chart's lines."""
    # a CSV file has no true parameters: its config's weights are the least-squares answer, drawn as such
    true = None if cfg.data else list(cfg.weights) + [cfg.bias]
    return {"names": fitted_names(cfg), "true": true}  # a file's columns by name: area, rooms, age, b


def planned_payload(checked: Checked) -> dict[str, Any]:
    """Before a run: the first step of the checked config as it will be split over its device plan, with no
    times yet (nothing has run)."""
    cfg = checked.config
    step, labels = registry.of(cfg).planned_step(cfg, checked.plan)
    return {
        "run": {
            "id": None,
            "label": _label(cfg),
            "strategy": cfg.strategy,
            "status": "ready",
            "active": False,
            "kind": "info",
            "status_line": status_line(None, cfg),
            "step": 0,
            "diverged_at": None,
            "total_steps": cfg.total_steps,
            "pace": None,
            "server_time": time.time(),
        },
        **_parameters(cfg),
        "lstsq": None,
        "loss": [],
        "params": [],
        "picture": _picture(cfg, step, labels, emulated=labels[0].startswith("virtual"), when=None)
        | {"planned": True},
    }
