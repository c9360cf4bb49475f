"""The page's link: its settings as URL query parameters and back, and the classroom's own parameters (what a
teacher's link hides or locks, and whether it presents or asks). Every value read from a link is checked as
the page's controls would check it; a bad one is named, and its default used."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from fitcore.core import i18n
from fitcore.core.config import (
    MAX_FEATURES,
    MAX_WORKERS,
    OPTIMIZERS,
    ConfigError,
    FitConfig,
    check_options,
    integer_range,
    validate,
)
from fitcore.core.devices import MAX_VIRTUAL, parse_devices
from fitcore.core.errors import Text
from fitcore.core.i18n import LANGUAGES, language, t
from fitcore.protocols import registry
from fitcore.protocols.mesh import DIMS, MAX_DIM, MeshError, parse_mesh
from fitcore.view.controls import (
    CONTROL_FIELDS,
    MAX_FEATURE_CONTROL,
    MAX_WIDGET_INT,
    OPTIONS,
    PACE_CHOICES,
    one_value,
)

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
    if name == "strategy" and value not in registry.STRATEGIES:
        raise ConfigError(name, raw, t("view.or").join(registry.NAMES))
    if name == "mesh" and value:
        try:
            return ",".join(f"{dim}={size}" for dim, size in parse_mesh(value))
        except MeshError:
            raise ConfigError(name, raw, t("config.mesh", dims=", ".join(DIMS), most=MAX_DIM)) from None
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
    ranked = next(s.name for s in registry.STRATEGIES.values() if s.processes)
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
    processes = registry.strategy(values.get("strategy", registry.DEFAULT)).processes
    if values.get("devices") == "cpu" and not processes:
        del values["devices"]
        with_cpu = t("view.or").join(s.name for s in registry.STRATEGIES.values() if s.processes)
        allowed = t("view.allowed.devices", most=MAX_VIRTUAL, strategies=with_cpu)
        raise ConfigError("devices", raw, allowed)


def _check_workers(values: dict[str, Any], raw: Any, gpus: Any) -> None:
    """Workers the page uses as given: where no control shows the count (a strategy without processes) one
    that no run takes is refused here, and processes on GPUs are one per GPU, not the link's count."""
    if "workers" not in values:
        return
    workers = values["workers"]
    if not registry.strategy(values.get("strategy", registry.DEFAULT)).processes:
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
        check_options(values.get("strategy", registry.DEFAULT), given)
    except ConfigError as exc:
        del values[exc.field]
        raise ConfigError(exc.field, raw.get(exc.field), exc.allowed) from None


def link_params(all_values: Mapping[str, list[str]]) -> dict[str, Any]:
    """The link's parameters from every value each one was given (`st.query_params.get_all`): one value as
    text, a repeated one as its list of values, which `one_value` refuses (the link is used as given)."""
    return {k: v[0] if len(v) == 1 else list(v) for k, v in all_values.items() if v}


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
            raw = raws[name] = one_value(name, params[name])
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
            raw = one_value("pace", params["pace"])
            text = str(raw).strip().lower()
            if text not in PACE_CHOICES:
                raise ConfigError("pace", raw, t("view.allowed.pace", choices=", ".join(PACE_CHOICES)))
            pace = text
    except ConfigError as exc:
        errors.append(exc)
    try:
        if "lang" in params:
            raw = one_value("lang", params["lang"])
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
            found[param] = read(param, one_value(param, params[param]))
        except ConfigError as exc:
            errors.append(exc)
    both = [n for n in found.get("lock", ()) if n in found.get("hide", ())]
    if both:  # hidden or locked: the link says which, once
        allowed = i18n.t("classroom.link.both", names=", ".join(both))
        errors.append(ConfigError("lock", one_value("lock", params["lock"]), allowed))
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
