"""`python -m fitcore whatif`: the projection's flags, its table for a terminal, its JSON
(fitcore.lab.whatif)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from fitcore.core.cliparse import Parser, command, error_line
from fitcore.core.config import parse_number
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.i18n import t
from fitcore.core.links import LINKS, link_name
from fitcore.core.projection import state_bytes
from fitcore.core.schema import dumps
from fitcore.core.text import pad
from fitcore.kit.flags import add_training_flags, checked_from_args, flag_error
from fitcore.lab.whatif import (
    DEVICE_COUNTS,
    DEVICE_FLOPS,
    MAX_DEVICES,
    MAX_LATENCY,
    MAX_PARAMS,
    MAX_ROWS,
    Measured,
    calibrations,
    human,
    measure,
    measured_strategy,
    memory_text,
    projection_of,
    seconds_text,
    spread_text,
    state_text,
    table,
    to_dict,
)


def table_lines(result: dict) -> list[str]:
    """The projection for a terminal: the measured start first, then the projected rows."""
    m, a = result["measured"], result["assumptions"]
    columns = ("strategy", "memory", "sent", "comm", "compute", "step", "note")
    head = [t(f"cli.whatif.col.{c}") for c in columns]
    lines = [
        t("cli.whatif.measured", seconds=seconds_text(m["compute_seconds"]), where=m["where"],
          params=m["params"], rows=f"{m['rows_per_device']:g}"),
        t("cli.whatif.link", name=a["link"]["name"], bandwidth=human(a["link"]["bandwidth"], "B/s"),
          latency=seconds_text(a["link"]["latency"]), memory=human(a["device_memory_bytes"], "B")),
        *([spread_text(a["link"])] if a["link"].get("latency_range") else []),
        state_text(state_bytes(a["optimizer"], a["precision"])),
        t("cli.whatif.what_moves"),
        t("cli.whatif.every", projected=t("cli.whatif.projected")),
        "",
        pad(head[0], 24) + pad("K", 6, True) + "".join(pad(h, 11, True) for h in head[1:6]) + "  " + head[6],
    ]  # fmt: skip
    for r in result["rows"]:
        lines.append(
            f"{r['name']:<24}{r['devices']:>6}{memory_text(r['memory_per_device_bytes']):>11}"
            f"{human(r['comm_bytes_per_device'], 'B'):>11}{seconds_text(r['comm_seconds']):>11}"
            f"{seconds_text(r['compute_seconds']):>11}{seconds_text(r['step_seconds']):>11}  {r['note']}"
        )
    for c in result.get("calibration", []):
        lines += ["", t("cli.whatif.calibration.head", name=projection_of(c["strategy"]).title), c["note"]]
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m fitcore whatif", description=t("cli.whatif.description"))
    add_training_flags(p)
    w = p.add_argument_group(t("cli.whatif.projection"))
    w.add_argument("--params", help=t("cli.whatif.help.params"))
    w.add_argument("--precision", default="mixed", help=t("cli.whatif.help.precision"))
    w.add_argument("--link", default="nvlink", help=t("cli.whatif.help.link", links=", ".join(LINKS)))
    w.add_argument("--bandwidth", help=t("cli.whatif.help.bandwidth"))
    w.add_argument("--latency", help=t("cli.whatif.help.latency"))
    w.add_argument("--memory-gb", default="80", help=t("cli.whatif.help.memory_gb"))
    w.add_argument("--tflops", default=str(DEVICE_FLOPS / 1e12), help=t("cli.whatif.help.tflops"))
    w.add_argument("--rows-per-device", help=t("cli.whatif.help.rows_per_device"))
    w.add_argument("--counts", default=",".join(map(str, DEVICE_COUNTS)), help=t("cli.whatif.help.counts"))
    w.add_argument("--calibrate", action="store_true", help=t("cli.whatif.help.calibrate"))
    p.add_argument("--json", action="store_true", help=t("cli.help.json"))
    return p


def _number(flag: str, raw: str, allowed: Text, kind: type = float) -> float:
    """A flag's number, read by the config's one number parser (ASCII digits only), or refused."""
    try:
        value = parse_number(flag, str(raw), kind)
    except ConfigError:
        raise ConfigError(flag, raw, allowed) from None
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int beyond float's range: 310 digits of --counts
        finite = False
    if not finite:
        raise ConfigError(flag, raw, allowed)
    return value


def _counts(raw: str) -> tuple[int, ...]:
    allowed = Text("cli.whatif.allowed.counts", most=MAX_DEVICES)
    parts = [c for c in str(raw).split(",") if c.strip()]
    try:
        counts = tuple(int(_number("--counts", c, allowed, int)) for c in parts)
    except ConfigError:
        counts = ()
    if not counts or not all(1 <= c <= MAX_DEVICES for c in counts):
        raise ConfigError("--counts", raw, allowed)
    return counts


def _scaled(flag: str, raw: str, unit: str, scale: float) -> float:
    """A flag's value in its unit (GB, say) times `scale`: at least one byte, FLOP or byte a second, or
    ConfigError naming the flag and the value as given (1e-300 GB is 1e-291 bytes, which no table takes)."""
    allowed = Text("cli.whatif.allowed.positive", unit=unit, least=f"{1 / scale:g}")
    value = _number(flag, raw, allowed) * scale
    if not 1 <= value < math.inf:
        raise ConfigError(flag, raw, allowed)
    return value


def projection(args: argparse.Namespace, measured: Measured, optimizer: str = "adam") -> dict:
    """The JSON object of the command line's flags, from a measured step of a run with `optimizer`."""
    if args.link not in LINKS:
        raise ConfigError("--link", args.link, Listed(LINKS))
    base = LINKS[args.link]
    bandwidth = base.bandwidth
    if args.bandwidth is not None:
        bandwidth = _scaled("--bandwidth", args.bandwidth, "GB/s", 1e9)
    latency = base.latency
    if args.latency is not None:
        latency = _number("--latency", args.latency, Text("cli.whatif.allowed.microseconds")) * 1e-6
        if not 0 <= latency <= MAX_LATENCY * 1e-6:
            raise ConfigError("--latency", args.latency, Text("cli.whatif.allowed.microseconds"))
    link = dataclasses.replace(base, name=link_name(args.link), bandwidth=bandwidth, latency=latency)
    if args.bandwidth is not None or args.latency is not None:  # a figure given is the figure: no spread
        link = dataclasses.replace(link, bandwidth_range=None, latency_range=None, repeats=1)
    memory = _scaled("--memory-gb", args.memory_gb, "GB", 1e9)
    flops = _scaled("--tflops", args.tflops, "TFLOP/s", 1e12)
    params = None
    if args.params is not None:
        params = _number("--params", args.params, Text("cli.whatif.allowed.params"))
        if not 1 <= params <= MAX_PARAMS:
            raise ConfigError("--params", args.params, Text("cli.whatif.allowed.params"))
    per_device = None
    if args.rows_per_device is not None:
        per_device = _number("--rows-per-device", args.rows_per_device, Text("cli.whatif.allowed.rows"))
        if not 1 <= per_device <= MAX_ROWS:
            raise ConfigError("--rows-per-device", args.rows_per_device, Text("cli.whatif.allowed.rows"))
    state = state_bytes(optimizer, args.precision)
    rows = table(measured, params, _counts(args.counts), link, memory, flops, per_device, state)
    return to_dict(measured, rows, link, memory, flops, state)


@command
def main(argv: list[str]) -> int:
    """`python -m fitcore whatif [training flags] [projection flags] [--json]`; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        checked = checked_from_args(args)
        cfg = checked.config
        if cfg.strategy != measured_strategy():
            raise ConfigError("strategy", cfg.strategy, Text("cli.whatif.allowed.strategy"))
        _counts(args.counts)  # bad flags fail before the run
        state_bytes(cfg.optimizer, args.precision)
        measured = measure(checked)
        result = projection(args, measured, cfg.optimizer)
        if args.calibrate:  # each strategy that runs a projected row for real: its measured bytes beside it
            result["calibration"] = calibrations(cfg)
    except ConfigError as exc:
        print(error_line("fitcore whatif", flag_error(exc)), file=sys.stderr)
        return 2
    print(dumps(result) if args.json else "\n".join(table_lines(result)), flush=True)
    return 0
