"""What the dashboard shows, computed without Streamlit: presets, URL <-> config, split, tables, CSV, JSON.

Everything here takes plain values or a Snapshot and returns plain values, so the page stays a thin layer of
widgets over it and each piece is tested on its own.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Sequence

from fitcore import ddp, strategies
from fitcore.config import MAX_FEATURES, OPTIMIZERS, STRATEGIES, ConfigError, FitConfig, Limits, validate
from fitcore.console import final_lines, group_line
from fitcore.devices import MAX_VIRTUAL, parse_devices
from fitcore.events import Replica, RunStarted, Status, Step
from fitcore.parallel import chunk_sizes
from fitcore.runner import Snapshot

# The settings the page has a control for, in the order the URL lists them.
CONTROL_FIELDS = (
    "weights",
    "bias",
    "noise",
    "data_size",
    "batch_size",
    "epochs",
    "lr",
    "optimizer",
    "shuffle",
    "seed",
    "devices",
    "strategy",
    "workers",
)

# What each field is called on the page, for error messages that name both the control and the field.
FIELD_LABELS = {
    "weights": "True weights",
    "bias": "True bias",
    "noise": "Noise",
    "data_size": "Data size",
    "batch_size": "Batch size",
    "epochs": "Epochs",
    "lr": "Learning rate",
    "optimizer": "Optimizer",
    "shuffle": "Shuffle",
    "seed": "Seed",
    "devices": "Devices",
    "strategy": "Strategy",
    "workers": "Workers",
    "pace": "Pace",
}

# A widget can hold more features than a run may use, so that asking for too many gets validate()'s message.
MAX_FEATURE_CONTROL = 2 * MAX_FEATURES
# Browsers hold integers exactly up to 2**53 - 1; a number widget refuses anything larger.
MAX_WIDGET_INT = 2**53 - 1

# Steps per second the pace control offers; "max" is as fast as possible.
PACE_CHOICES = ("1", "2", "5", "10", "20", "50", "100", "200", "max")
DEFAULT_PACE = "20"  # the tutorial's 200 steps take ten seconds on screen


def error_text(exc: ConfigError) -> str:
    """A ConfigError as the page shows it: the control's name, then the message (field, value, allowed)."""
    label = FIELD_LABELS.get(exc.field, exc.field)
    return f"{label}: {exc}" if label != exc.field else str(exc)


# ---------------------------------------------------------------------------------------------------------
# Presets.


@dataclass(frozen=True)
class Preset:
    """A configuration that shows one thing, and what to watch for."""

    name: str
    config: FitConfig
    lesson: str  # shown on the page while the controls match the preset


_TUTORIAL = FitConfig(
    weights=(5.2, 9.6), bias=3.4, data_size=200, batch_size=200, optimizer="adam", lr=0.5, epochs=200
)

PRESETS = (
    Preset(
        "The tutorial",
        replace(_TUTORIAL, devices="virtual:2"),
        "The tutorial's setup: every batch of 200 rows is cut into two chunks of 100, one per device, and "
        "the learned W and b approach 5.2, 9.6 and 3.4.",
    ),
    Preset(
        "Uneven split",
        replace(_TUTORIAL, devices="virtual:3"),
        "200 rows do not divide by 3. DataParallel uses tensor.chunk(3): chunks of ceil(200 / 3) = 67 rows "
        "and a smaller last one, so the replicas get 67, 67 and 66 rows.",
    ),
    Preset(
        "Fewer rows than devices",
        replace(_TUTORIAL, data_size=40, batch_size=5, epochs=25, devices="virtual:8"),
        "A batch of 5 rows on 8 devices: tensor.chunk(8) gives five chunks of 1 row, so only 5 replicas "
        "run and 3 devices sit idle on every step.",
    ),
    Preset(
        "Too high a learning rate",
        replace(_TUTORIAL, optimizer="sgd", lr=1.5, devices="virtual:2"),
        "Plain SGD with lr 1.5 on this data overshoots: each step multiplies the error by about "
        "|1 - 2 x 1.5| = 2, so the loss grows until it overflows and the run ends as diverged. Any lr "
        "above about 1 does this here; lr 0.5 converges.",
    ),
    Preset(
        "Noisy data",
        replace(_TUTORIAL, noise=3.0, data_size=40, batch_size=40, devices="virtual:2"),
        "With noise, no model can recover the true W and b from 40 rows: training converges to the "
        "least-squares answer for this data (the dotted lines), not to the true values (the dashed lines).",
    ),
    Preset(
        "DistributedDataParallel",
        replace(_TUTORIAL, strategy="ddp", workers=2, devices="cpu"),
        "The tutorial's data on 2 processes (ranks) on the CPU, backend gloo. A DistributedSampler gives "
        "each rank its own 100 of the 200 rows; each rank computes the loss of its rows only, and DDP "
        "averages the gradients during backward, so both ranks end with the same W and b.",
    ),
    Preset(
        "Uneven shards",
        replace(_TUTORIAL, data_size=10, batch_size=10, strategy="ddp", workers=3, devices="cpu"),
        "10 rows do not divide by 3 ranks. DistributedSampler gives every rank ceil(10 / 3) = 4 rows, 12 "
        "in all, by repeating the first 2 rows of the epoch's order: those 2 rows are trained on twice per "
        "epoch.",
    ),
)


def preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise KeyError(name)


def used_fields(strategy: Any) -> tuple[str, ...]:
    """The controlled fields a run of this strategy uses: `workers` only matters with one process each."""
    if strategies.strategy(strategy).processes:
        return CONTROL_FIELDS
    return tuple(f for f in CONTROL_FIELDS if f != "workers")


def matching_preset(values: Mapping[str, Any]) -> Preset | None:
    """The preset whose settings the controls hold, if any (an unused workers count does not count)."""
    for p in PRESETS:
        if all(values.get(f) == getattr(p.config, f) for f in used_fields(p.config.strategy)):
            return p
    return None


# ---------------------------------------------------------------------------------------------------------
# Controls and the URL.


def parse_pace(choice: str) -> float | None:
    """A pace choice as Run takes it: steps per second, or None for as fast as possible."""
    return None if choice == "max" else float(choice)


def pace_choice(pace: float | None) -> str:
    """The choice that parse_pace reads as `pace` (a reloaded page shows its run's pace); the default
    where no choice matches."""
    choice = "max" if pace is None else f"{pace:g}"
    return choice if choice in PACE_CHOICES else DEFAULT_PACE


def pace_label(choice: str) -> str:
    if choice == "max":
        return "as fast as possible"
    return "1 step/s" if choice == "1" else f"{choice} steps/s"


def config_values(cfg: FitConfig) -> dict[str, Any]:
    """The controlled fields of cfg, typed (weights as a tuple)."""
    return {f: getattr(cfg, f) for f in CONTROL_FIELDS}


def config_from_controls(values: Mapping[str, Any], limits: Limits = Limits(), gpus: Any = None) -> FitConfig:
    """Build and validate the run's config from the controls' values; raise ConfigError naming the field."""
    return validate(FitConfig.from_mapping(values), limits, gpus=gpus)


def _number_text(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def to_query(values: Mapping[str, Any], pace: str) -> dict[str, str]:
    """The controls as URL query parameters: every controlled field and the pace, as text."""
    out = {}
    for name in CONTROL_FIELDS:
        value = values[name]
        if name == "weights":
            out[name] = ",".join(_number_text(w) for w in value)
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, float):
            out[name] = _number_text(value)
        else:
            out[name] = str(value)
    out["pace"] = pace
    return out


def _check_url_value(name: str, raw: Any, value: Any, gpus: Any) -> Any:
    """Refuse what no control can hold (what a control can hold is left to validate()); return the value."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(name, raw, "a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WIDGET_INT:
        raise ConfigError(name, raw, f"an integer from {-MAX_WIDGET_INT} to {MAX_WIDGET_INT}")
    if name == "weights":
        if not 1 <= len(value) <= MAX_FEATURE_CONTROL:
            raise ConfigError(name, raw, f"1 to {MAX_FEATURES} numbers")
        if not all(math.isfinite(w) for w in value):
            raise ConfigError(name, raw, "finite numbers")
    if name == "optimizer" and value not in OPTIMIZERS:
        raise ConfigError(name, raw, " or ".join(OPTIMIZERS))
    if name == "strategy" and value not in STRATEGIES:
        raise ConfigError(name, raw, " or ".join(STRATEGIES))
    if name == "devices":
        return parse_devices(value, gpus).spec
    return value


def _check_cpu_devices(values: dict[str, Any], raw: Any) -> None:
    """`cpu` is the devices of ddp on the CPU; for DataParallel the page offers virtual:K or cuda GPUs."""
    processes = strategies.strategy(values.get("strategy", FitConfig.strategy)).processes
    if values.get("devices") == "cpu" and not processes:
        del values["devices"]
        raise ConfigError(
            "devices", raw, f"virtual:K (K from 1 to {MAX_VIRTUAL}) or cuda:i,j,..., or cpu with strategy ddp"
        )


def from_query(
    params: Mapping[str, Any], gpus: Any = None
) -> tuple[dict[str, Any], str | None, list[ConfigError]]:
    """Read the controls from URL query parameters.

    Returns (values, pace, errors): the typed values of the fields that parsed, the pace choice or None, and
    one ConfigError per bad parameter. Parameters the page does not know (Streamlit's own, say) are ignored.
    """
    values: dict[str, Any] = {}
    errors: list[ConfigError] = []
    raws: dict[str, Any] = {}
    for name in CONTROL_FIELDS:
        if name not in params:
            continue
        raw = params[name]
        raw = raw[-1] if isinstance(raw, (list, tuple)) and raw and name != "weights" else raw
        raws[name] = raw
        try:
            value = getattr(FitConfig.from_mapping({name: raw}), name)
            value = _check_url_value(name, raw, value, gpus)
        except ConfigError as exc:
            errors.append(exc)
            continue
        values[name] = value
    try:
        _check_cpu_devices(values, raws.get("devices"))
    except ConfigError as exc:
        errors.append(exc)
    pace = None
    if "pace" in params:
        raw = params["pace"]
        raw = raw[-1] if isinstance(raw, (list, tuple)) and raw else raw
        text = str(raw).strip().lower()
        if text in PACE_CHOICES:
            pace = text
        else:
            errors.append(
                ConfigError("pace", raw, "one of " + ", ".join(PACE_CHOICES) + " (steps per second)")
            )
    return values, pace, errors


def config_differences(values: Mapping[str, Any], running: FitConfig) -> list[str]:
    """The controls that differ from a run's frozen config, as 'label: run value -> control value'."""
    out = []
    either = (values.get("strategy"), running.strategy)
    workers = next((s for s in either if strategies.strategy(s).processes), running.strategy)
    for name in used_fields(workers):
        ours, theirs = values.get(name), getattr(running, name)
        if name == "weights" and ours is not None:
            ours = tuple(float(w) for w in ours)
        if ours != theirs:
            out.append(f"{FIELD_LABELS[name]}: {_show(theirs)} in the run, {_show(ours)} in the controls")
    return out


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ---------------------------------------------------------------------------------------------------------
# The status line.


def status_line(snap: Snapshot | None, cfg: FitConfig | None = None) -> str:
    """The status line: status, epoch, `step <n> / <total>`, speed, and the message where it helps.

    Always contains `step <n> / <total>` once there is a run or a valid config (tests and benchmarks parse
    it). Before any run (snap None) it is the Ready line, with cfg's steps when the controls are valid.
    """
    if snap is None:
        total = f" · step 0 / {cfg.total_steps}" if cfg is not None else ""
        return f"Ready{total} · press **Start training**"
    status = snap.status
    parts = [status.capitalize()]
    if status == Status.QUEUED and snap.queue_position is not None:
        parts.append(f"position {snap.queue_position} in the queue")
    if snap.epoch:
        parts.append(f"epoch {snap.epoch} / {snap.config.epochs}")
    parts.append(f"step {snap.step} / {snap.total_steps}")
    if status in (Status.RUNNING, Status.FINISHED) and snap.steps_per_second > 0:
        parts.append(f"{snap.steps_per_second:.0f} steps/s")
    if status not in (Status.RUNNING, Status.PAUSED):
        parts.append(snap.message)
    return " · ".join(p for p in parts if p)


_STATUS_KINDS = {
    Status.FINISHED: "success",
    Status.STOPPED: "warning",
    Status.DIVERGED: "warning",
    Status.FAILED: "error",
}


def status_kind(snap: Snapshot) -> str:
    """How the page colours the status: info, success, warning or error."""
    return _STATUS_KINDS.get(snap.status, "info")


def escape_markdown(text: str) -> str:
    """Text shown through a Markdown element exactly as written (no emphasis, links or code from it)."""
    special = "\\`*_[]<>#|~$"
    return "".join("\\" + c if c in special else c for c in text)


# ---------------------------------------------------------------------------------------------------------
# The split of a batch.


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def split_table(step: Step) -> list[dict[str, Any]]:
    """One row per replica that ran (device, rows, index range, input and output shape), then `Outside`."""
    rows = [
        {
            "Device": r.device,
            "Rows": r.rows,
            "Batch rows": f"{r.start}–{r.stop - 1}",
            "Input shape": shape_text(r.input_shape),
            "Output shape": shape_text(r.output_shape),
        }
        for r in step.replicas
    ]
    rows.append(
        {
            "Device": "Outside (gathered)",
            "Rows": step.input_shape[0],
            "Batch rows": f"0–{step.input_shape[0] - 1}",
            "Input shape": shape_text(step.input_shape),
            "Output shape": shape_text(step.output_shape),
        }
    )
    return rows


def split_blocks(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, int]]:
    """(device, start, stop) of each replica's rows of the batch, for the picture, from split_table's rows
    (or planned_split's): every row but the last, `Outside`, in order."""
    blocks, start = [], 0
    for row in rows[:-1]:
        blocks.append((row["Device"], start, start + row["Rows"]))
        start += row["Rows"]
    return blocks


def idle_devices(snap: Snapshot) -> list[str]:
    """Devices of the run that got no rows in the latest batch (a batch smaller than the device count)."""
    if snap.latest is None:
        return []
    used = {r.device for r in snap.latest.replicas}
    return [d for d in snap.devices if d not in used]


def planned_dataparallel_step(cfg: FitConfig, gpus: Any = None) -> tuple[Step, tuple[str, ...]]:
    """(the first step as DataParallel will split it, the devices) before any run: no loss, no times."""
    labels = parse_devices(cfg.devices, gpus).labels
    batch = min(cfg.batch_size, cfg.data_size)
    replicas, start = [], 0
    for label, n in zip(labels, chunk_sizes(batch, len(labels))):
        replicas.append(Replica(label, start, start + n, (n, cfg.n_features), (n, 1)))
        start += n
    step = Step(1, 1, 1, math.nan, (batch, cfg.n_features), (batch, 1), tuple(replicas), (), 0.0, 0.0)
    return step, labels


def planned_split(cfg: FitConfig, gpus: Any = None) -> list[dict[str, Any]]:
    """The first batch's split before any run: DataParallel's chunking of batch_size over the devices."""
    return split_table(planned_dataparallel_step(cfg, gpus)[0])


def console_text(snap: Snapshot, max_lines: int = 16) -> str:
    """The tutorial's printed lines for the latest steps that fit in max_lines, after the run's header.

    A ddp run prints as the CLI does: the process group, each rank's `In Model:` line and the all-reduce
    line per step, and once it has ended every rank's final parameters.
    """
    lines = [snap.header] if snap.header else []
    lines_of, tail = strategies.of(snap).step_lines, []
    if is_ddp(snap):
        if "ddp" in snap.extra:
            lines.append(group_line(snap.extra["ddp"]))
        if "final" in snap.extra and not snap.active:
            tail = final_lines(snap.extra["final"])
    steps = list(snap.recent)
    per_step = len(steps[-1].replicas) + 1 if steps else 1
    keep = max(1, (max_lines - len(lines) - len(tail)) // per_step)
    for step in steps[-keep:]:
        lines.extend(lines_of(step))
    return "\n".join(lines + tail)


# ---------------------------------------------------------------------------------------------------------
# DistributedDataParallel: each rank's shard of the dataset, its shapes, its final parameters.

PREVIEW_INDICES = 12  # dataset indices listed per rank in the shard table; the counts stay exact


def is_ddp(source: Snapshot | FitConfig) -> bool:
    """Does the run (or the config) train with one process per rank, each on its own shard?"""
    return strategies.of(source).processes


# the run's own Detail('shards') is built by the same function, so the plan is what the run reports
_planned_shards = functools.lru_cache(maxsize=8)(ddp.first_epoch_value)


def planned_shards(cfg: FitConfig, gpus: Any = None) -> dict:
    """Detail('shards').value that a ddp run of cfg will report for its first epoch, before it starts."""
    return _planned_shards(cfg, ddp.rank_labels(cfg, parse_devices(cfg.devices, gpus)))


def shard_table(source: Any, which: str = "latest") -> list[dict]:
    """Rank -> rows, for the split panel: one dict per rank with its count, first/last and padded indices.

    Args:
        source: a Snapshot, a Snapshot.extra dict, or Detail('shards').value.
        which: "first" or "latest" epoch.
    """
    value = _shards_of(source)
    if not value:
        return []
    epoch = value[which]
    return [
        {
            "rank": r["rank"],
            "device": r["device"],
            "epoch": epoch["epoch"],
            "rows": r["count"],
            "first": r["first"],
            "last": r["last"],
            "padded": list(r["padded"]),
            "indices": list(r["indices"]),
            "truncated": r["truncated"],
        }
        for r in epoch["ranks"]
    ]


def row_owners(source: Any, which: str = "latest") -> list[tuple[int, ...]] | None:
    """For each dataset row, the ranks that got it that epoch (two for a padded row); None if truncated."""
    value = _shards_of(source)
    if not value:
        return None
    epoch = value[which]
    if any(r["truncated"] for r in epoch["ranks"]):
        return None
    owners: list[tuple[int, ...]] = [()] * value["data_size"]
    for r in epoch["ranks"]:
        for index in r["indices"]:
            owners[index] = owners[index] + (r["rank"],)
    return owners


def _shards_of(source: Any) -> dict | None:
    extra = getattr(source, "extra", source)
    if isinstance(extra, Mapping) and "ranks" not in extra and "shards" in extra:
        return extra["shards"]
    return extra if isinstance(extra, Mapping) and "first" in extra else None


def shards_title(value: dict, which: str = "latest") -> str:
    """What the shard picture shows: the epoch, the sampler's rule and its padding."""
    epoch = value[which]
    n, k, per = value["data_size"], value["world_size"], value["rows_per_rank"]
    text = (
        f"Epoch {epoch['epoch']}: DistributedSampler (set_epoch({epoch['set_epoch']}), "
        f"shuffle={value['shuffle']}) deals {n} dataset rows to {k} rank{'s' if k != 1 else ''}, "
        f"ceil({n} / {k}) = {per} each"
    )
    if value["padding"]:
        pad = value["padding"]
        rows = ", ".join(map(str, epoch["repeated"]))
        text += f"; {pad} row{'s' if pad != 1 else ''} ({rows}) repeated to pad the last shards"
    return text


def _preview(indices: Sequence[int], total: int) -> str:
    text = ", ".join(map(str, indices[:PREVIEW_INDICES]))
    return text + (f", … ({total - PREVIEW_INDICES} more)" if total > PREVIEW_INDICES else "")


def shard_rows(value: dict, which: str = "latest") -> list[dict[str, Any]]:
    """One row per rank: how many dataset rows it got this epoch, which ones (in its order), the padding."""
    return [
        {
            "Rank": r["rank"],
            "Device": r["device"],
            "Dataset rows": r["rows"],
            "Rows, in the rank's order": _preview(r["indices"], r["rows"]),
            "Padded (repeated)": ", ".join(map(str, r["padded"])) or "none",
        }
        for r in shard_table(value, which)
    ]


def _local_loss(replica: Any) -> float | None:
    """A rank's own loss in the step, where the strategy reports one (a `loss` on its Replica)."""
    loss = getattr(replica, "loss", None)
    return None if loss is None else float(loss)


def rank_table(step: Step) -> list[dict[str, Any]]:
    """Each rank's input and output shape in the step; the last row adds them up (nothing is gathered).

    With each rank's own loss reported, a "Local loss" column holds it, and the last row their mean: the
    loss that is charted.
    """
    losses = [_local_loss(r) for r in step.replicas]
    with_loss = any(loss is not None for loss in losses)
    rows = []
    for rank, (r, loss) in enumerate(zip(step.replicas, losses)):
        row = {
            "Rank": rank,
            "Device": r.device,
            "Rows": r.rows,
            "Input shape": shape_text(r.input_shape),
            "Output shape": shape_text(r.output_shape),
        }
        if with_loss:
            row["Local loss"] = "" if loss is None else f"{loss:.6g}"
        rows.append(row)
    total = {
        "Rank": "all",
        "Device": "All ranks together (never gathered)",
        "Rows": step.input_shape[0],
        "Input shape": shape_text(step.input_shape),
        "Output shape": shape_text(step.output_shape),
    }
    if with_loss:
        total["Local loss"] = f"mean {step.loss:.6g}"
    return rows + [total]


def planned_ddp_step(cfg: FitConfig, gpus: Any = None) -> tuple[Step, tuple[str, ...]]:
    """(a ddp run's first step before any run: ceil(batch / K) rows of each shard per rank, the ranks)."""
    value = planned_shards(cfg, gpus)
    rows = ddp.Layout.of(cfg).local_rows(1)
    replicas = [
        Replica(r["device"], i * rows, (i + 1) * rows, (rows, cfg.n_features), (rows, 1))
        for i, r in enumerate(value["first"]["ranks"])
    ]
    k = len(replicas)
    step = Step(1, 1, 1, math.nan, (k * rows, cfg.n_features), (k * rows, 1), tuple(replicas), (), 0.0, 0.0)
    return step, tuple(r.device for r in replicas)


def planned_rank_table(cfg: FitConfig, gpus: Any = None) -> list[dict[str, Any]]:
    """rank_table of a ddp run's first step, before any run: ceil(batch / K) rows of each shard per rank."""
    return rank_table(planned_ddp_step(cfg, gpus)[0])


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
    if value["identical"]:
        return f"All {k} ranks ended with identical parameters (largest difference 0): DDP kept them in step."
    return f"The ranks' parameters differ: largest difference {value['max_abs_diff']:.3g}."


# ---------------------------------------------------------------------------------------------------------
# Results.


def parameter_names(n_features: int) -> list[str]:
    return [f"w{i}" for i in range(1, n_features + 1)] + ["b"]


def results_table(snap: Snapshot) -> list[dict[str, Any]]:
    """Learned, true and least-squares value of each parameter, and the learned one's error against both."""
    if not snap.weights or snap.bias is None:
        return []
    cfg = snap.config
    learned = list(snap.weights) + [snap.bias]
    true = list(cfg.weights) + [cfg.bias]
    lstsq = list(snap.lstsq_weights) + [snap.lstsq_bias] if snap.lstsq_weights is not None else None
    rows = []
    for i, name in enumerate(parameter_names(cfg.n_features)):
        row = {"Parameter": name, "Learned": learned[i], "True": true[i]}
        row["Least squares"] = lstsq[i] if lstsq else None
        row["Learned − true"] = learned[i] - true[i]
        row["Learned − least squares"] = learned[i] - lstsq[i] if lstsq else None
        rows.append(row)
    return rows


def _finite_or_none(value: Any) -> Any:
    """JSON has no inf or NaN: a diverged run's values become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    return value


def step_dict(step: Step | None) -> dict[str, Any] | None:
    """A step's split as plain data: its batch's shapes and each replica's rows and shapes."""
    if step is None:
        return None
    return {
        "step": step.step,
        "input_shape": list(step.input_shape),
        "output_shape": list(step.output_shape),
        "replicas": [
            {
                "device": r.device,
                "rows": [r.start, r.stop],
                "input_shape": list(r.input_shape),
                "output_shape": list(r.output_shape),
            }
            for r in step.replicas
        ],
    }


def result_dict(
    cfg: FitConfig,
    status: str,
    message: str,
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
        "message": message,
        "devices": list(started.devices) if started else [],
        "emulated": started.emulated if started else None,
        "data_parallel": started.data_parallel if started else None,
        "steps": steps,
        "total_steps": cfg.total_steps,
        "final_loss": final_loss,
        "weights": list(weights),
        "bias": bias,
        "true_weights": list(cfg.weights),
        "true_bias": cfg.bias,
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


def result_json(snap: Snapshot) -> str:
    """snapshot_result as strict JSON: a diverged run's inf and NaN become null."""
    return json.dumps(_finite_or_none(snapshot_result(snap)), indent=2, allow_nan=False)


def history_rows(snap: Snapshot) -> list[dict[str, Any]]:
    """The kept history, one row per step that has a loss or parameters (the two series thin separately)."""
    names = parameter_names(snap.config.n_features)
    by_step: dict[int, dict[str, Any]] = {}
    for step, loss in snap.loss_history:
        by_step.setdefault(step, {"step": step})["loss"] = loss
    for step, values in snap.param_history:
        by_step.setdefault(step, {"step": step}).update(zip(names, values))
    return [by_step[s] for s in sorted(by_step)]


def history_csv(snap: Snapshot) -> str:
    """history_rows as CSV: step, loss, w1..wd, b; a cell is empty where that series skipped the step."""
    out = io.StringIO()
    writer = csv.DictWriter(
        out, ["step", "loss"] + parameter_names(snap.config.n_features), lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(history_rows(snap))
    return out.getvalue()


# ---------------------------------------------------------------------------------------------------------
# Charts' data.


def smooth(values: Sequence[float], weight: float, log: bool = True) -> list[float]:
    """Exponential moving average with start-up bias correction (TensorBoard's smoothing).

    Args:
        values: the series.
        weight: 0 leaves it as is; towards 1 smooths more.
        log: average log10 of the values (right for a loss drawn on a log axis); values <= 0 or not finite
            are passed through unsmoothed.
    """
    if weight <= 0:
        return list(values)
    out, acc, n = [], 0.0, 0
    for v in values:
        if log and not (v > 0 and math.isfinite(v)):
            out.append(v)
            continue
        x = math.log10(v) if log else v
        n += 1
        acc = weight * acc + (1 - weight) * x
        mean = acc / (1 - weight**n)
        out.append(10**mean if log else mean)
    return out


def log_ticks(values: Sequence[float], most: int = 6) -> list[float]:
    """Powers of ten for a log axis over the positive values: every decade, or every k-th for wide ranges."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return [1.0]
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    stride = max(1, math.ceil((hi - lo + 1) / most))
    return [10.0**k for k in range(lo, hi + 1, stride)]


def run_label(snap: Snapshot) -> str:
    """A short name for a run in the chart's legend."""
    cfg = snap.config
    return (
        f"{snap.run_id}: {cfg.devices}, {cfg.optimizer} lr {cfg.lr:g}, batch {cfg.batch_size} ({snap.status})"
    )


def defaults() -> dict[str, Any]:
    """The controls' values for a fresh page: FitConfig's defaults."""
    return {f.name: f.default for f in fields(FitConfig)}
