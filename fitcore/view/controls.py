"""The page's controls as plain data: presets, the pace, the link, and config values <-> widget values.

A config value is typed like FitConfig's field (`devices="virtual:3@cuda:0"`); a widget value is what a
control of the page holds, by its session key (`device_mode="virtual"`, `virtual_devices=3`,
`emulate_on="cuda:0"`). `widget_values` and `control_values` turn one into the other, so app.py only copies
them to and from the session, and the round trip is tested without Streamlit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from fitcore.core.config import (
    MAX_FEATURES,
    Checked,
    ConfigError,
    FitConfig,
    Limits,
    check,
)
from fitcore.core.devices import GPU, parse_devices, run_gpus
from fitcore.core.i18n import t
from fitcore.protocols import registry
from fitcore.protocols.mesh import MeshError, parse_mesh, world_size

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
    "mesh",
)
# every strategy's options (FitConfig fields only it reads, FSDP's reshard_after_forward): a switch each,
# drawn under its strategy, in the link after the settings every run has
OPTIONS = registry.OPTIONS
CONTROL_FIELDS += OPTIONS

# The fields the page names by a label of their own (the catalog's `view.field.<name>`: "Batch size",
# "批大小"), for error messages that name both the control and the field.
LABELLED_FIELDS = (
    "weights", "bias", "noise", "data_size", "batch_size", "epochs", "lr", "optimizer", "shuffle", "seed",
    "devices", "strategy", "workers", "mesh", *OPTIONS, "pace", "lang", "preset", "script",
)  # fmt: skip

# A widget can hold more features than a run may use, so that asking for too many gets validate()'s message.
MAX_FEATURE_CONTROL = 2 * MAX_FEATURES
# Browsers hold integers exactly up to 2**53 - 1; a number widget refuses anything larger.
MAX_WIDGET_INT = 2**53 - 1

# A lesson pace: each phase of a step holds this many seconds in the picture, with its caption, then the next.
# The run is paced to match (one step per phases x seconds), so the training never runs ahead of the phases
# the class is shown: the run's Control is what waits, and the picture of step k is narrated before k + 1.
LESSON_CHOICES = ("lesson1", "lesson2", "lesson3", "lesson5")
DEFAULT_LESSON = "lesson2"
# Steps per second the pace control offers; "max" is as fast as possible.
PACE_CHOICES = LESSON_CHOICES + ("1", "2", "5", "10", "20", "50", "100", "200", "max")
DEFAULT_PACE = "20"  # the tutorial's 200 steps take ten seconds on screen


def field_label(name: str) -> str:
    """What the page calls a field, in the current language ("Batch size", "批大小")."""
    return t(f"view.field.{name}") if name in LABELLED_FIELDS else name


def error_text(exc: ConfigError) -> str:
    """A ConfigError as the page shows it, named once, by the control's label: "Batch size: got 300; ..."."""
    return exc.named(field_label(exc.field))


def defaults() -> dict[str, Any]:
    """The controls' values for a fresh page: FitConfig's defaults."""
    fresh = FitConfig()
    return {f.name: getattr(fresh, f.name) for f in fields(FitConfig)}


# ---------------------------------------------------------------------------------------------------------
# Presets.


@dataclass(frozen=True)
class Preset:
    """A configuration that shows one thing, and what to watch for."""

    name: str  # its id: the preset control's value and the catalog's `view.preset.<key>.*`
    config: FitConfig
    key: str

    @property
    def title(self) -> str:
        """The name as the page shows it, in the current language."""
        return t(f"view.preset.{self.key}.name")

    @property
    def lesson(self) -> str:
        """What to watch for: shown on the page while the controls match the preset."""
        return t(f"view.preset.{self.key}.lesson")


_TUTORIAL = FitConfig(
    weights=(5.2, 9.6), bias=3.4, data_size=200, batch_size=200, optimizer="adam", lr=0.5, epochs=200
)

PRESETS = (
    Preset(
        "The tutorial",
        replace(_TUTORIAL, devices="virtual:2"),
        "tutorial",
    ),
    Preset(
        "Uneven split",
        replace(_TUTORIAL, devices="virtual:3"),
        "uneven",
    ),
    Preset(
        "Fewer rows than devices",
        replace(_TUTORIAL, data_size=40, batch_size=5, epochs=25, devices="virtual:8"),
        "few_rows",
    ),
    Preset(
        "Too high a learning rate",
        replace(_TUTORIAL, optimizer="sgd", lr=1.5, devices="virtual:2"),
        "high_lr",
    ),
    Preset(
        "Noisy data",
        replace(_TUTORIAL, noise=3.0, data_size=40, batch_size=40, devices="virtual:2"),
        "noisy",
    ),
)
# each strategy's own presets (its `presets` hook), after the tutorial's
PRESETS += tuple(Preset(*p) for s in registry.STRATEGIES.values() for p in s.presets(_TUTORIAL))


def preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise KeyError(name)


# A lesson script: presets played in order, the teacher's Next moving on (`?script=lesson`, or preset keys
# in the order wanted: `?script=tutorial,ddp`).
# The lesson: DataParallel's even, uneven and idle-device splits, then each strategy with ranks' presets
# (DDP's ranks, then its padded shards).
_RANKED = tuple(p[2] for s in registry.STRATEGIES.values() if s.processes for p in s.presets(_TUTORIAL))
SCRIPTS = {"lesson": ("tutorial", "uneven", "few_rows", *_RANKED)}


def script_from_query(params: Mapping[str, Any]) -> tuple[tuple[Preset, ...], list[ConfigError]]:
    """The presets a link's `script=` plays, in order (none without one), and the error for a bad one."""
    if "script" not in params:
        return (), []
    try:
        raw = one_value("script", params["script"])
    except ConfigError as exc:
        return (), [exc]
    text = str(raw).strip().lower()
    keys = SCRIPTS.get(text) or tuple(k.strip() for k in text.split(",") if k.strip())
    by_key = {p.key: p for p in PRESETS}
    if not keys or any(k not in by_key for k in keys) or len(keys) > 2 * len(PRESETS):
        allowed = t("view.allowed.script", scripts=", ".join(SCRIPTS), presets=", ".join(by_key))
        return (), [ConfigError("script", raw, allowed)]
    return tuple(by_key[k] for k in keys), []


def preset_from_query(params: Mapping[str, Any]) -> tuple[Preset | None, list[ConfigError]]:
    """The preset a link's `preset=` names by its key (`?preset=ddp`), or None, and the error for a bad one.
    The link's own values, where it gives any, apply over the preset's."""
    if "preset" not in params:
        return None, []
    try:
        raw = one_value("preset", params["preset"])
    except ConfigError as exc:
        return None, [exc]
    by_key = {p.key: p for p in PRESETS}
    found = by_key.get(str(raw).strip().lower())
    if found is None:
        return None, [ConfigError("preset", raw, t("view.allowed.preset", presets=", ".join(by_key)))]
    return found, []


def used_fields(strategy: Any) -> tuple[str, ...]:
    """The controlled fields a run of this strategy uses: `workers` only matters with one process each, and
    a strategy's options (its `options`) only under it."""
    entry = registry.strategy(strategy)
    unused = set(OPTIONS) - set(entry.options)
    if not entry.processes:
        unused |= {"workers", "mesh"}
    return tuple(f for f in CONTROL_FIELDS if f not in unused)


def option_values(strategy: Any, widgets: Mapping[str, Any]) -> dict[str, Any]:
    """Every strategy's options: the widget's value under the strategy that reads it, else the default (a
    switch left off under FSDP does not follow the page to another strategy, which would refuse it)."""
    own = registry.strategy(strategy).options
    default = {f: getattr(FitConfig, f) for f in OPTIONS}
    return {f: _option(widgets.get(f, default[f]), default[f]) if f in own else default[f] for f in OPTIONS}


def _option(value: Any, default: Any) -> Any:
    """An option's widget value typed as its field: a switch's bool, a number box's int or float, a choice's
    text (validate() checks it)."""
    if isinstance(default, bool):
        return bool(value)
    return value


def matching_preset(values: Mapping[str, Any]) -> Preset | None:
    """The preset whose settings the controls hold, if any (an unused workers count does not count); none
    while the data is a CSV file, which no preset uses."""
    if values.get("data"):
        return None
    for p in PRESETS:
        if all(values.get(f) == getattr(p.config, f) for f in used_fields(p.config.strategy)):
            return p
    return None


# ---------------------------------------------------------------------------------------------------------
# The pace.


def phase_count(strategy: str) -> int:
    """The phases the picture walks through in one step of `strategy` (DataParallel's 8, DDP's 6, FSDP's 7:
    its two all-gathers are one phase of the picture)."""
    return len(registry.strategy(strategy).phases())


def lesson_seconds(choice: str) -> int | None:
    """A lesson choice's seconds a phase ("lesson2" -> 2); None for a pace in steps per second."""
    return int(choice[len("lesson") :]) if choice in LESSON_CHOICES else None


def parse_pace(choice: str, strategy: str | None = None) -> float | None:
    """A pace choice as Run takes it: steps per second, or None for as fast as possible. A lesson pace is
    one step per (the strategy's phases x the seconds a phase holds), the rate at which the picture (whose
    phases share a step's time equally, frontend/stepper.js) holds each phase that long."""
    seconds = lesson_seconds(choice)
    if seconds is not None:
        return 1.0 / (phase_count(strategy or registry.DEFAULT) * seconds)
    return None if choice == "max" else float(choice)


def pace_choice(pace: float | None) -> str:
    """The choice that parse_pace reads as `pace` (a reloaded page shows its run's pace); the default
    where no choice matches."""
    for lesson in LESSON_CHOICES:
        if pace is not None and any(
            math.isclose(pace, parse_pace(lesson, name)) for name in registry.NAMES
        ):
            return lesson
    choice = "max" if pace is None else f"{pace:g}"
    return choice if choice in PACE_CHOICES else DEFAULT_PACE


def pace_label(choice: str) -> str:
    if choice == "max":
        return t("view.pace.max")
    seconds = lesson_seconds(choice)
    if seconds is not None:
        return t("view.pace.lesson", s=seconds)
    return rate_text(float(choice))


def rate_text(per_second: float) -> str:
    """ "1 step/s", "20 steps/s", "每秒 20 步": a speed rounded to a whole number; under one step a second
    (a lesson pace), the seconds a step takes: "1 step every 14 s", not "0 steps/s"."""
    if 0 < per_second < 0.95:
        return t("view.pace.every", s=f"{1 / per_second:.0f}")
    n = f"{per_second:.0f}"
    return t("view.pace.rate.one" if n == "1" else "view.pace.rate.other", n=n)


# ---------------------------------------------------------------------------------------------------------
# Config values <-> widget values.


def config_values(cfg: FitConfig) -> dict[str, Any]:
    """The controlled fields of cfg, typed (weights as a tuple)."""
    return {f: getattr(cfg, f) for f in CONTROL_FIELDS}


def config_from_controls(values: Mapping[str, Any], limits: Limits = Limits(), gpus: Any = None) -> FitConfig:
    """Build and validate the run's config from the controls' values; raise ConfigError naming the field."""
    return checked_from_controls(values, limits, gpus).config


def checked_from_controls(values: Mapping[str, Any], limits: Limits = Limits(), gpus: Any = None) -> Checked:
    """config_from_controls, with the device plan its check made (what the pool's run starts from)."""
    return check(FitConfig.from_mapping(values), limits, gpus=gpus)


def device_widgets(spec: str, gpus: list[GPU] | None = None) -> dict[str, Any]:
    """The device widgets that hold a (valid) device spec, read with parse_devices.

    `cpu` is a strategy with processes on the CPU, their number the workers control: it leaves the count of
    virtual devices as it was. `cuda` selects every GPU.
    """
    plan = parse_devices(spec, gpus)
    if plan.kind == "virtual":  # virtual:K, or virtual:K@cuda:i with the replicas on that GPU
        return {
            "device_mode": "virtual",
            "virtual_devices": len(plan.labels),
            "emulate_on": plan.host.lower(),
        }
    if plan.kind == "cpu":
        return {"device_mode": "virtual"}
    return {"device_mode": "cuda", "gpus": list(plan.device_ids)}


def devices_spec(widgets: Mapping[str, Any]) -> str:
    """The device spec the device widgets hold, for the strategy widget's strategy (not yet validated)."""
    if widgets["device_mode"] == "cuda":
        return "cuda:" + ",".join(str(i) for i in sorted(widgets["gpus"]))
    if registry.strategy(widgets["strategy"]).processes:
        return "cpu"  # with processes, `cpu` means `workers` processes on the CPU
    on = widgets["emulate_on"]
    return f"virtual:{widgets['virtual_devices']}" + (f"@{on}" if on != "cpu" else "")


def mesh_workers(widgets: Mapping[str, Any]) -> int | None:
    """The world size a mesh typed into the page says (its sizes' product), which the workers control then
    does not: None where no mesh is given, or where it is written wrong (validate names it)."""
    try:
        dims = parse_mesh(str(widgets.get("mesh", "")).strip()) if widgets.get("mesh") else ()
    except MeshError:
        return None
    return world_size(dims) if dims else None


def workers_value(widgets: Mapping[str, Any]) -> int:
    """The processes: the workers control on the CPU; one per selected GPU with CUDA (as validate demands)."""
    if registry.strategy(widgets["strategy"]).processes and widgets["device_mode"] == "cuda":
        return len(widgets["gpus"])
    return int(widgets["workers"])


def values_here(values: Mapping[str, Any], gpus: list[GPU]) -> dict[str, Any]:
    """A run's values that this machine's controls can hold. A replay recorded on GPUs this machine lacks
    keeps its devices out of the controls (the page still shows the run on the recording's devices): the
    controls stay this machine's, with the recording's count of emulated replicas or CPU ranks."""
    try:
        parse_devices(values["devices"], gpus)
        return dict(values)
    except ConfigError:
        pass
    here = {k: v for k, v in values.items() if k != "devices"}
    plan = parse_devices(values["devices"], run_gpus(values["devices"], gpus))
    if plan.kind == "virtual":  # virtual:K@cuda:i: the same K replicas, emulated on this CPU
        here["devices"] = f"virtual:{len(plan.labels)}"
    elif registry.strategy(values["strategy"]).processes:  # one rank per recorded GPU: as many CPU ranks
        here["devices"] = "cpu"
    return here


def widget_values(values: Mapping[str, Any], gpus: list[GPU] | None = None) -> dict[str, Any]:
    """The widget values, by session key, that hold typed config values (a preset's, a link's, a run's).

    Args:
        values: some or all of the controlled fields, valid (as from_query or a FitConfig gives them).
        gpus: the machine's GPUs, for a cuda device spec; discovered when None.
    """
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name == "weights":
            out["n_features"] = len(value)
            out.update({f"weight_{i}": float(w) for i, w in enumerate(value)})
        elif name == "devices":
            out.update(device_widgets(value, gpus))
        elif name in ("bias", "noise", "lr"):
            out[name] = float(value)
        else:
            out[name] = value
    return out


def control_values(widgets: Mapping[str, Any]) -> dict[str, Any]:
    """The controls' current values, typed like FitConfig's fields (not yet validated), from the widgets'."""
    return {
        "weights": tuple(float(widgets.get(f"weight_{i}", 1.0)) for i in range(widgets["n_features"])),
        "bias": float(widgets["bias"]),
        "noise": float(widgets["noise"]),
        "data_size": int(widgets["data_size"]),
        "batch_size": int(widgets["batch_size"]),
        "epochs": int(widgets["epochs"]),
        "lr": float(widgets["lr"]),
        "optimizer": widgets["optimizer"],
        "shuffle": bool(widgets["shuffle"]),
        "seed": int(widgets["seed"]),
        "devices": devices_spec(widgets),
        "strategy": widgets["strategy"],
        "workers": mesh_workers(widgets) or workers_value(widgets),
        "mesh": str(widgets.get("mesh", "")).strip(),
        **option_values(widgets["strategy"], widgets),
    }


def one_value(name: str, raw: Any) -> Any:
    """The value of a parameter given once (or repeated with one value); ConfigError for a link that gives
    two values for one setting (`lang=zh&lang=en`), instead of silently taking either."""
    if not isinstance(raw, (list, tuple)):
        return raw
    if len(set(map(str, raw))) > 1:
        raise ConfigError(name, "&".join(f"{name}={v}" for v in raw), t("view.allowed.once", n=len(raw)))
    return raw[0] if raw else ""
