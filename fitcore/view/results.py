"""What a run learned, as data: the parameters' table, every rank's own parameters, the history as CSV and
the result as JSON (the page's downloads and `python -m fitcore --json`)."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from fitcore.core.config import FitConfig
from fitcore.core.errors import Text
from fitcore.core.events import RunStarted, Status, Step
from fitcore.core.i18n import t
from fitcore.core.schema import dumps
from fitcore.protocols import registry
from fitcore.runs.runner import Snapshot
from fitcore.view.common import fitted_names, parameter_names

# The tables' column names as data (the JSON download keeps them): the page shows them through column_label.
COLUMNS = {
    "Parameter": "view.col.parameter",
    "Learned": "view.col.learned",
    "True": "view.col.true",
    "Least squares": "view.col.lstsq",
    "Learned − true": "view.col.learned_true",
    "Learned − least squares": "view.col.learned_lstsq",
    "Rank": "view.col.rank",
    "Device": "view.col.device",
}


def column_label(name: str) -> str:
    """A column of these tables as the page heads it, in the current language (a parameter's name as is)."""
    return t(COLUMNS[name]) if name in COLUMNS else name


def results_table(snap: Snapshot) -> list[dict[str, Any]]:
    """Learned, true and least-squares value of each parameter, and the learned one's error against both; a
    file has no true values, so a CSV run's rows have no true columns at all."""
    if not snap.weights or snap.bias is None:
        return []
    cfg = snap.config
    learned = list(snap.weights) + [snap.bias]
    true = true_parameters(cfg)
    lstsq = list(snap.lstsq_weights) + [snap.lstsq_bias] if snap.lstsq_weights is not None else None
    rows = []
    for i, name in enumerate(fitted_names(cfg)):
        row = {"Parameter": name, "Learned": learned[i]}
        if true:
            row["True"] = true[i]
        row["Least squares"] = lstsq[i] if lstsq else None
        if true:
            row["Learned − true"] = learned[i] - true[i]
        row["Learned − least squares"] = learned[i] - lstsq[i] if lstsq else None
        rows.append(row)
    return rows


# Closer than this to the least-squares answer, relative to its size (at least 1), a run has settled there:
# Adam at the tutorial's lr ends within 1e-5; minibatch noise or too high a rate leaves 1e-2 and more.
SETTLED = 1e-3


def least_squares_gap(snap: Snapshot) -> str | None:
    """For a finished run that ended away from the least-squares answer: how far, and what would bring it
    closer (a smaller learning rate; a larger batch, where it is smaller than the data). None otherwise."""
    if snap.status != Status.FINISHED or not snap.weights or snap.lstsq_weights is None:
        return None
    learned = list(snap.weights) + [snap.bias]
    ref = list(snap.lstsq_weights) + [snap.lstsq_bias]
    gap = max(abs(a - b) for a, b in zip(learned, ref))
    size = max([1.0] + [abs(r) for r in ref])
    if not math.isfinite(gap) or gap <= SETTLED * size:
        return None
    cfg = snap.config
    hints = [t("view.fit.hint.lr", lr=f"{cfg.lr:g}", smaller=f"{cfg.lr / 10:g}")]
    if cfg.batch_size < cfg.data_size:
        hints.append(t("view.fit.hint.batch", batch=cfg.batch_size, rows=cfg.data_size))
    return t("view.fit.far", gap=f"{gap:.3g}", share=f"{gap / size:.1%}", hints=t("view.fit.or").join(hints))


def true_parameters(cfg: FitConfig) -> list[float] | None:
    """The true W and b the data was made with; None for a CSV file, which has none (its config's weights
    are the least-squares answer, the run's reference, not a truth)."""
    return None if cfg.data else list(cfg.weights) + [cfg.bias]


def final_rows(snap: Snapshot) -> list[dict[str, Any]]:
    """Every rank's parameters after its last step (Detail('final')), as numbers: one row per rank."""
    value = snap.extra.get("final")
    if not value:
        return []
    names = parameter_names(snap.config.n_features)
    return [
        {"Rank": r["rank"], "Device": r["device"], **dict(zip(names, list(r["weights"]) + [r["bias"]]))}
        for r in value["ranks"]
    ]


def final_agreement(snap: Snapshot) -> str | None:
    """One sentence: do all ranks hold the same parameters? None before the ranks have reported them."""
    value = snap.extra.get("final")
    if not value:
        return None
    k = len(value["ranks"])
    if value["identical"] and k == 1:
        return t("view.final.one")
    if value["identical"]:
        return t("view.final.identical", k=k)
    return t("view.final.differ", diff=f"{value['max_abs_diff']:.3g}")


def row_range(start: int, stop: int) -> dict[str, int]:
    """Batch rows [start, stop) as people count them, like the page's "Batch rows 0–66": the first and the
    last position in the batch (not dataset row ids, which `ids` are), and how many."""
    return {"first_position": start, "last_position": stop - 1, "rows": stop - start}


def parallelism(cfg: FitConfig, started: RunStarted | None) -> str | None:
    """How the run was parallel, in words, as its strategy's view module says; None before the run has
    placed its replicas."""
    if started is None:
        return None
    return registry.of(cfg).view_module.parallelism(cfg, started)


def step_dict(step: Step | None) -> dict[str, Any] | None:
    """A step's split as plain data: its batch's shapes, each replica's rows (row_range) and shapes."""
    if step is None:
        return None
    moved = step_bytes(step)
    return {
        "step": step.step,
        "input_shape": list(step.input_shape),
        "output_shape": list(step.output_shape),
        "replicas": [
            {
                "device": r.device,
                "batch_rows": row_range(r.start, r.stop),  # positions in the batch, not dataset ids
                "input_shape": list(r.input_shape),
                "output_shape": list(r.output_shape),
                **({} if r.columns is None else {"columns": list(r.columns)}),  # TP: its features [lo, hi)
            }
            for r in step.replicas
        ],
        "step_bytes": moved,  # each phase's bytes, summed over the devices
        "step_bytes_per_device": step_bytes_per_device(step),  # each device's own, exact
        "step_bytes_total": sum(moved.values()),  # every phase of every device
    }


def step_bytes(step: Step) -> dict[str, int]:
    """Each phase's bytes in the step, every device's together, in the step's order (the picture's list of
    bytes); {} where the step has no phases (one device)."""
    out: dict[str, int] = {}
    for phase in step.phases.phases() if step.phases else ():
        out[phase.name] = out.get(phase.name, 0) + phase.bytes
    return out


def step_bytes_per_device(step: Step) -> list[dict[str, Any]]:
    """Each device's bytes in the step, phase by phase and in all, in the devices' order; [] where the step
    has no phases. Their sum, phase by phase, is step_bytes."""
    devices: dict[str, dict[str, int]] = {}
    for phase in step.phases.phases() if step.phases else ():
        own = devices.setdefault(phase.device, {})
        own[phase.name] = own.get(phase.name, 0) + phase.bytes
    return [{"device": d, "bytes": b, "total": sum(b.values())} for d, b in devices.items()]


def result_dict(
    cfg: FitConfig,
    status: str,
    message: Text | str,
    started: RunStarted | None,
    first: Step | None,
    latest: Step | None,
    outcome: tuple[int, float | None, tuple[float, ...], float | None],
    elapsed: float,
    steps_per_second: float,
) -> dict[str, Any]:
    """The run's outcome, for `--json` and the page's JSON download: config, status, learned / true /
    least-squares parameters, the split of the first and of the latest step, and the speed.

    Args:
        started: the run's RunStarted (devices, emulation, the least-squares answer); None if it never came.
        outcome: (steps, final loss, learned weights, learned bias).
    """
    steps, final_loss, weights, bias = outcome
    return {
        "config": cfg.to_dict(),
        "status": status,
        "message": str(message),  # in the language of the page or the command line that writes it
        "strategy": cfg.strategy,
        "parallelism": parallelism(cfg, started),
        "devices": list(started.devices) if started else [],
        "emulated": started.emulated if started else None,
        "steps": steps,
        "total_steps": cfg.total_steps,
        "final_loss": final_loss,
        "weights": list(weights),
        "bias": bias,
        "true_weights": None if cfg.data else list(cfg.weights),  # a file has no true parameters
        "true_bias": None if cfg.data else cfg.bias,
        "lstsq_weights": list(started.lstsq_weights) if started else None,
        "lstsq_bias": started.lstsq_bias if started else None,
        "first_step": step_dict(first),
        "latest_step": step_dict(latest),
        "elapsed": elapsed,
        "steps_per_second": steps_per_second,
    }


def snapshot_result(snap: Snapshot) -> dict[str, Any]:
    """result_dict of a run the page shows, with its id and the parameters' table."""
    outcome = (snap.step, snap.final_loss, snap.weights, snap.bias)
    result = result_dict(
        snap.config, snap.status, snap.message, snap.started, snap.first, snap.latest, outcome,
        snap.elapsed, snap.steps_per_second,
    )  # fmt: skip
    return {"run_id": snap.run_id, **result, "parameters": results_table(snap)}


def result_json(snap: Snapshot, data_as: str | None = None) -> str:
    """snapshot_result as strict JSON: a diverged run's inf and NaN become null. `data_as`: the CSV file as
    its reader knows it (the page's upload by its own name, not the server's path to it)."""
    result = snapshot_result(snap)
    if data_as is not None and result.get("config", {}).get("data"):
        result["config"]["data"] = data_as
    return dumps(result, indent=2)


def history_names(cfg: FitConfig) -> list[str]:
    """The parameters' columns of the history: a CSV run's feature columns and b (as the page names them),
    w1 ... wd and b for the synthetic data, or where a file's column would clash with step, loss or b."""
    names = fitted_names(cfg)
    if len(set(names) | {"step", "loss"}) != len(names) + 2:
        return parameter_names(cfg.n_features)
    return names


def history_rows(snap: Snapshot) -> list[dict[str, Any]]:
    """The kept history, one row per step that has a loss or parameters (the two series thin separately)."""
    names = history_names(snap.config)
    by_step: dict[int, dict[str, Any]] = {}
    for step, loss in snap.loss_history:
        by_step.setdefault(step, {"step": step})["loss"] = loss
    for step, values in snap.param_history:
        by_step.setdefault(step, {"step": step}).update(zip(names, values))
    return [by_step[s] for s in sorted(by_step)]


def history_csv(snap: Snapshot) -> str:
    """history_rows as CSV: step, loss, then the parameters by name (history_names); a cell is empty where
    that series skipped the step."""
    out = io.StringIO()
    writer = csv.DictWriter(out, ["step", "loss"] + history_names(snap.config), lineterminator="\n")
    writer.writeheader()
    writer.writerows(history_rows(snap))
    return out.getvalue()
