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

from fitcore import i18n, strategies
from fitcore.config import (
    MAX_FEATURES,
    MAX_WORKERS,
    OPTIMIZERS,
    Checked,
    ConfigError,
    FitConfig,
    Limits,
    check,
    check_options,
    integer_range,
    validate,
)
from fitcore.devices import GPU, MAX_VIRTUAL, parse_devices, run_gpus
from fitcore.errors import Text
from fitcore.i18n import LANGUAGES, language, t

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
# every strategy's options (FitConfig fields only it reads, FSDP's reshard_after_forward): a switch each,
# drawn under its strategy, in the link after the settings every run has
OPTIONS = strategies.OPTIONS
CONTROL_FIELDS += OPTIONS

# The fields the page names by a label of their own (the catalog's `view.field.<name>`: "Batch size",
# "批大小"), for error messages that name both the control and the field.
LABELLED_FIELDS = (
    "weights", "bias", "noise", "data_size", "batch_size", "epochs", "lr", "optimizer", "shuffle", "seed",
    "devices", "strategy", "workers", *OPTIONS, "pace", "lang", "preset", "script",
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
    return {f.name: f.default for f in fields(FitConfig)}


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
PRESETS += tuple(Preset(*p) for s in strategies.STRATEGIES.values() for p in s.presets(_TUTORIAL))


def preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise KeyError(name)


# A lesson script: presets played in order, the teacher's Next moving on (`?script=lesson`, or preset keys
# in the order wanted: `?script=tutorial,ddp`).
# The lesson: DataParallel's even, uneven and idle-device splits, then each strategy with ranks' presets
# (DDP's ranks, then its padded shards).
_RANKED = tuple(p[2] for s in strategies.STRATEGIES.values() if s.processes for p in s.presets(_TUTORIAL))
SCRIPTS = {"lesson": ("tutorial", "uneven", "few_rows", *_RANKED)}


def script_from_query(params: Mapping[str, Any]) -> tuple[tuple[Preset, ...], list[ConfigError]]:
    """The presets a link's `script=` plays, in order (none without one), and the error for a bad one."""
    if "script" not in params:
        return (), []
    try:
        raw = _one("script", params["script"])
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
        raw = _one("preset", params["preset"])
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
    entry = strategies.strategy(strategy)
    unused = set(OPTIONS) - set(entry.options)
    if not entry.processes:
        unused.add("workers")
    return tuple(f for f in CONTROL_FIELDS if f not in unused)


def option_values(strategy: Any, widgets: Mapping[str, Any]) -> dict[str, Any]:
    """Every strategy's options: the widget's value under the strategy that reads it, else the default (a
    switch left off under FSDP does not follow the page to another strategy, which would refuse it)."""
    own = strategies.strategy(strategy).options
    default = {f: getattr(FitConfig, f) for f in OPTIONS}
    return {f: bool(widgets.get(f, default[f])) if f in own else default[f] for f in OPTIONS}


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
    return len(strategies.strategy(strategy).phases())


def lesson_seconds(choice: str) -> int | None:
    """A lesson choice's seconds a phase ("lesson2" -> 2); None for a pace in steps per second."""
    return int(choice[len("lesson") :]) if choice in LESSON_CHOICES else None


def parse_pace(choice: str, strategy: str = strategies.DEFAULT) -> float | None:
    """A pace choice as Run takes it: steps per second, or None for as fast as possible. A lesson pace is
    one step per (the strategy's phases x the seconds a phase holds), the rate at which the picture (whose
    phases share a step's time equally, frontend/stepper.js) holds each phase that long."""
    seconds = lesson_seconds(choice)
    if seconds is not None:
        return 1.0 / (phase_count(strategy) * seconds)
    return None if choice == "max" else float(choice)


def pace_choice(pace: float | None) -> str:
    """The choice that parse_pace reads as `pace` (a reloaded page shows its run's pace); the default
    where no choice matches."""
    for lesson in LESSON_CHOICES:
        if pace is not None and any(
            math.isclose(pace, parse_pace(lesson, name)) for name in strategies.NAMES
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
    if strategies.strategy(widgets["strategy"]).processes:
        return "cpu"  # with processes, `cpu` means `workers` processes on the CPU
    on = widgets["emulate_on"]
    return f"virtual:{widgets['virtual_devices']}" + (f"@{on}" if on != "cpu" else "")


def workers_value(widgets: Mapping[str, Any]) -> int:
    """The processes: the workers control on the CPU; one per selected GPU with CUDA (as validate demands)."""
    if strategies.strategy(widgets["strategy"]).processes and widgets["device_mode"] == "cuda":
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
    elif strategies.strategy(values["strategy"]).processes:  # one rank per recorded GPU: as many CPU ranks
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
        "workers": workers_value(widgets),
        **option_values(widgets["strategy"], widgets),
    }


# ---------------------------------------------------------------------------------------------------------
# The link: the controls as URL query parameters.


def _number_text(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def to_query(
    values: Mapping[str, Any], pace: str, *, lang: str | None = None, classroom: Classroom | None = None
) -> dict[str, str]:
    """The controls as URL query parameters: every controlled field and the pace, as text, the page's language
    where it is given, and the teacher's classroom parameters where any is set."""
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
    if lang is not None:
        out["lang"] = lang
    if classroom is not None:
        out.update(classroom_query(classroom))
    return out


def _check_url_value(name: str, raw: Any, value: Any, gpus: Any) -> Any:
    """Refuse what no control can hold (what a control can hold is left to validate()); return the value."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(name, raw, t("view.allowed.finite"))
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WIDGET_INT:
        raise ConfigError(name, raw, _int_bounds(name, value))
    if name == "weights":
        if not 1 <= len(value) <= MAX_FEATURE_CONTROL:
            raise ConfigError(name, raw, t("view.allowed.numbers", most=MAX_FEATURES))
        if not all(math.isfinite(w) for w in value):
            raise ConfigError(name, raw, t("view.allowed.finite_numbers"))
    if name == "optimizer" and value not in OPTIMIZERS:
        raise ConfigError(name, raw, t("view.or").join(OPTIMIZERS))
    if name == "strategy" and value not in strategies.STRATEGIES:
        raise ConfigError(name, raw, t("view.or").join(strategies.NAMES))
    if name == "devices":
        plan = parse_devices(value, gpus)
        if list(plan.device_ids) != sorted(plan.device_ids) and plan.kind == "cuda":
            # the GPU control lists them in order: cuda:1,0 (DataParallel's outputs on GPU 1) would become 0,1
            in_order = "cuda:" + ",".join(map(str, sorted(plan.device_ids)))
            raise ConfigError(name, raw, t("view.allowed.gpu_order", spec=in_order))
        return plan.spec
    return value


def _int_bounds(name: str, value: int) -> str:
    """What a count allows, for a value no widget can hold: the field's own bounds (validate()'s, with the
    link's other values left at their defaults), else what a browser holds exactly."""
    # workers count only for a strategy with processes: check them under the first such strategy
    ranked = next(s.name for s in strategies.STRATEGIES.values() if s.processes)
    ranks = {"strategy": ranked, "devices": "cpu"} if name == "workers" else {}
    try:
        validate(replace(FitConfig(), **ranks, **{name: MAX_WIDGET_INT if value > 0 else -MAX_WIDGET_INT}))
    except ConfigError as exc:
        if exc.field == name:
            return exc.allowed
    return t("view.allowed.integer", low=-MAX_WIDGET_INT, high=MAX_WIDGET_INT)


def _check_cpu_devices(values: dict[str, Any], raw: Any, gpus: Any) -> None:
    """`cpu` is the devices of a strategy with processes; for the others the page offers virtual:K or cuda.
    (A strategy with processes reads virtual:K as `cpu`, its workers on the CPU, as fitcore does.)"""
    processes = strategies.strategy(values.get("strategy", FitConfig.strategy)).processes
    if values.get("devices") == "cpu" and not processes:
        del values["devices"]
        with_cpu = t("view.or").join(s.name for s in strategies.STRATEGIES.values() if s.processes)
        allowed = t("view.allowed.devices", most=MAX_VIRTUAL, strategies=with_cpu)
        raise ConfigError("devices", raw, allowed)


def _check_workers(values: dict[str, Any], raw: Any, gpus: Any) -> None:
    """Workers the page uses as given: where no control shows the count (a strategy without processes) one
    that no run takes is refused here, and processes on GPUs are one per GPU, not the link's count."""
    if "workers" not in values:
        return
    workers = values["workers"]
    if not strategies.strategy(values.get("strategy", FitConfig.strategy)).processes:
        if not 1 <= workers <= MAX_WORKERS:
            del values["workers"]
            raise ConfigError("workers", raw, integer_range(1, MAX_WORKERS, "config.why.workers"))
        return
    plan = parse_devices(values.get("devices", FitConfig.devices), gpus)
    if plan.kind == "cuda" and workers != len(plan.device_ids):
        del values["workers"]
        raise ConfigError("workers", raw, Text("config.workers_gpus", n=len(plan.device_ids), spec=plan.spec))


def _check_options(values: dict[str, Any], raw: Any, gpus: Any) -> None:
    """A strategy's option (FSDP's reshard_after_forward) set away from its default under another strategy
    is refused as validate() refuses it (check_options): the page would otherwise drop it without a word."""
    given = {f: values[f] for f in OPTIONS if f in values}
    try:
        check_options(values.get("strategy", FitConfig.strategy), given)
    except ConfigError as exc:
        del values[exc.field]
        raise ConfigError(exc.field, raw.get(exc.field), exc.allowed) from None


def link_params(all_values: Mapping[str, list[str]]) -> dict[str, Any]:
    """The link's parameters from every value each one was given (`st.query_params.get_all`): one value as
    text, a repeated one as its list of values, which `_one` refuses (the link is used as given)."""
    return {k: v[0] if len(v) == 1 else list(v) for k, v in all_values.items() if v}


def _one(name: str, raw: Any) -> Any:
    """The value of a parameter given once (or repeated with one value); ConfigError for a link that gives
    two values for one setting (`lang=zh&lang=en`), instead of silently taking either."""
    if not isinstance(raw, (list, tuple)):
        return raw
    if len(set(map(str, raw))) > 1:
        raise ConfigError(name, "&".join(f"{name}={v}" for v in raw), t("view.allowed.once", n=len(raw)))
    return raw[0] if raw else ""


def from_query(
    params: Mapping[str, Any], gpus: Any = None
) -> tuple[dict[str, Any], str | None, list[ConfigError]]:
    """Read the controls from URL query parameters.

    Returns (values, pace, errors): the typed values of the fields that parsed (and `lang`, the page's
    language, where the link names one), the pace choice or None, and one ConfigError per bad parameter.
    Parameters the page does not know (Streamlit's own, say) are ignored.
    """
    values: dict[str, Any] = {}
    errors: list[ConfigError] = []
    raws: dict[str, Any] = {}
    for name in CONTROL_FIELDS:
        if name not in params:
            continue
        try:
            raw = raws[name] = _one(name, params[name])
            value = getattr(FitConfig.from_mapping({name: raw}), name)
            value = _check_url_value(name, raw, value, gpus)
        except ConfigError as exc:
            errors.append(exc)
            continue
        values[name] = value
    checks = ((_check_cpu_devices, "devices"), (_check_workers, "workers"), (_check_options, None))
    for refuse, name in checks:
        try:
            refuse(values, raws.get(name) if name else raws, gpus)
        except ConfigError as exc:
            errors.append(exc)
    pace = None
    try:
        if "pace" in params:
            raw = _one("pace", params["pace"])
            text = str(raw).strip().lower()
            if text not in PACE_CHOICES:
                raise ConfigError("pace", raw, t("view.allowed.pace", choices=", ".join(PACE_CHOICES)))
            pace = text
    except ConfigError as exc:
        errors.append(exc)
    try:
        if "lang" in params:
            raw = _one("lang", params["lang"])
            if language(raw) is None:
                raise ConfigError("lang", raw, t("view.or").join(LANGUAGES))
            values["lang"] = language(raw)
    except ConfigError as exc:
        errors.append(exc)
    return values, pace, errors


# ---------------------------------------------------------------------------------------------------------
# The teacher's link: controls hidden or locked, the presenter's bigger picture, a question before a step.

# What ?hide= and ?lock= name: the controlled fields, the pace and the preset menu (which would change them).
CLASSROOM_NAMES = CONTROL_FIELDS + ("pace", "preset")
CLASSROOM_PARAMS = ("hide", "lock", "presenter", "ask")  # the link's parameters of the classroom
_ON, _OFF = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


@dataclass(frozen=True)
class Classroom:
    """What a teacher's link fixes for a class: controls not drawn, controls drawn disabled, two modes."""

    hide: tuple[str, ...] = ()  # not drawn: the run uses the link's value (or the default) for them
    lock: tuple[str, ...] = ()  # drawn disabled, holding the link's value
    presenter: bool = False  # bigger text in the step picture, for a projector
    ask: bool = False  # a paused step asks a question before its picture shows

    def hidden(self, name: str) -> bool:
        return name in self.hide

    def locked(self, name: str) -> bool:
        """Drawn disabled; a hidden control is fixed too, so it counts as locked wherever it is asked."""
        return name in self.lock or name in self.hide

    @property
    def pinned(self) -> tuple[str, ...]:
        """The names whose value the link fixes, hidden or locked, in CLASSROOM_NAMES' order."""
        return tuple(n for n in CLASSROOM_NAMES if self.locked(n))


def control_of(widget_key: str | None) -> str | None:
    """The control name (as ?hide= and ?lock= spell it) that a widget of the page belongs to, if any."""
    if widget_key is None:
        return None
    if widget_key == "n_features" or widget_key.startswith("weight_"):
        return "weights"
    if widget_key in ("device_mode", "gpus", "virtual_devices", "emulate_on"):
        return "devices"
    return widget_key if widget_key in CLASSROOM_NAMES else None


def _names(param: str, raw: Any) -> tuple[str, ...]:
    """The control names of a comma-separated list, in CLASSROOM_NAMES' order; ConfigError for any other."""
    given = [n.strip().lower() for n in str(raw).split(",") if n.strip()]
    if any(n not in CLASSROOM_NAMES for n in given):
        raise ConfigError(param, raw, i18n.t("classroom.link.names", names=", ".join(CLASSROOM_NAMES)))
    return tuple(n for n in CLASSROOM_NAMES if n in given)


def _switch(param: str, raw: Any) -> bool:
    """A mode switched on or off, as given: an empty value is refused, not read as off."""
    text = str(raw).strip().lower()
    if text not in _ON + _OFF:
        raise ConfigError(param, raw, i18n.t("classroom.link.switch"))
    return text in _ON


def classroom_from_query(params: Mapping[str, Any]) -> tuple[Classroom, list[ConfigError]]:
    """Read ?hide=, ?lock=, ?presenter= and ?ask=; a bad one is left out and reported, as from_query does."""
    found: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for param in CLASSROOM_PARAMS:
        if param not in params:
            continue
        try:
            read = _names if param in ("hide", "lock") else _switch
            found[param] = read(param, _one(param, params[param]))
        except ConfigError as exc:
            errors.append(exc)
    both = [n for n in found.get("lock", ()) if n in found.get("hide", ())]
    if both:  # hidden or locked: the link says which, once
        allowed = i18n.t("classroom.link.both", names=", ".join(both))
        errors.append(ConfigError("lock", _one("lock", params["lock"]), allowed))
        found["lock"] = tuple(n for n in found["lock"] if n not in both)
    return Classroom(**found), errors


def classroom_query(classroom: Classroom) -> dict[str, str]:
    """The link's classroom parameters: only those set, so a plain page's link stays as it was."""
    out = {}
    if classroom.hide:
        out["hide"] = ",".join(classroom.hide)
    if classroom.lock:
        out["lock"] = ",".join(n for n in classroom.lock if n not in classroom.hide)
    if classroom.presenter:
        out["presenter"] = "1"
    if classroom.ask:
        out["ask"] = "1"
    return {k: v for k, v in out.items() if v}
