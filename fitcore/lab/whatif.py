"""What-if scaling: one step of a run, projected to 2 ... 1,024 devices for DataParallel, DDP and ZeRO / FSDP.

Every number this module projects is labelled "projected, not measured". It starts from one measured figure,
the run's compute time per step on this machine (`measure`), and adds formulas, each from its source
(docs/scaling.md gives the derivations):

  memory per device (ZeRO paper, Rajbhandari et al. 2020, section 3.1): mixed-precision Adam holds 2 bytes
    of fp16 parameters + 2 of fp16 gradients + 12 of fp32 optimizer state (master weights, momentum,
    variance) = 16 bytes per parameter; `StateBytes` gives the other optimizers and precisions (plain SGD in
    fp32: 4 + 4 + 0 = 8). DataParallel's device 0 and every DDP rank hold all of it; ZeRO-1 partitions the
    optimizer state over K devices, ZeRO-2 the gradients too, ZeRO-3 (= FSDP's FULL_SHARD) everything.
  bytes each device sends per step: DDP's ring all-reduce 2(K-1)/K Ψ gradient elements (PyTorch's DDP
    paper, Li et al. VLDB 2020; the ring algorithm), the same for ZeRO-1 and -2 (reduce-scatter +
    all-gather), 3(K-1)/K Ψ for ZeRO-3 (an all-gather of the parameters in forward and again in backward, a
    reduce-scatter of the gradients); DataParallel moves everything through device 0: the parameters out to
    K-1 replicas, their gradients back, and the batch's rows (Hugging Face's Ultra-Scale Playbook compares
    them the same way).
  time on the wire, alpha-beta: steps·α + bytes / β, with 2(K-1) latency steps for a ring all-reduce.
  compute: the measured time per step, plus 6 Ψ FLOPs per row (forward 2 Ψ, backward 4 Ψ) at the device's
    rate, so that a 70-billion-parameter model costs what its arithmetic does.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Sequence

from fitcore.core.config import Checked, FitConfig
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.i18n import current, t
from fitcore.core.links import LINKS, Link
from fitcore.core.projection import MESH, MIXED_ADAM, ZERO, Projection, StateBytes

PROJECTED = "projected, not measured"  # the rows' label in the JSON; the table says it in its language
DEVICE_COUNTS = (2, 8, 64, 256, 1024)
FLOPS_PER_PARAM_ROW = 6  # forward 2Ψ + backward 4Ψ per row (the Playbook; Kaplan et al. 2020)
DEVICE_MEMORY = 80e9  # bytes: an 80 GB H100 or A100
# effective FLOP/s of one device: about 40 % of an H100 SXM's 989 TFLOP/s of dense bf16
DEVICE_FLOPS = 400e12
DEVICES_PER_MACHINE = 8  # nn.DataParallel is one process: it reaches only one machine's devices
MAX_PARAMS = 1e12
MAX_ROWS = 1e12  # rows per device: every projected figure stays finite (1e308 rows made Infinity)
MAX_LATENCY = 1e9  # microseconds (a quarter of an hour a message): beyond it a time is no longer a number
MAX_DEVICES = 65_536




def projections() -> dict[str, Projection]:
    """Every row kind, by name: each strategy's own, in the registry's order, then the ZeRO stages."""
    from fitcore.protocols import registry

    own = [p for s in registry.STRATEGIES.values() for p in s.projections()]
    return {p.name: p for p in (*own, *ZERO, *MESH)}


def __getattr__(name: str):
    # STRATEGIES and NAMES are read from the packages when first asked for (they import this module)
    if name == "STRATEGIES":
        return tuple(projections())
    if name == "NAMES":
        return {n: p.title for n, p in projections().items()}
    raise AttributeError(name)


def page_title(strategy: str) -> str:
    """A row kind's name on the page, in the page's language."""
    p = projection_of(strategy)
    return p.page_title() if p.page_title else p.title


def projection_of(strategy: str) -> Projection:
    every = projections()
    if strategy not in every:
        raise ValueError(f"unknown strategy {strategy!r}; one of {', '.join(every)}")
    return every[strategy]


@dataclass(frozen=True)
class Measured:
    """What the projection starts from: a run's measured step on this machine."""

    compute_seconds: float  # forward + loss + backward + optimizer of one step, the median over the run
    rows_per_device: float  # rows each device computed per step
    row_bytes: int  # one row's input, output and output gradient, (d + 2) x itemsize
    devices: int  # devices of the run
    params: int  # the run's model: d + 1
    where: str  # what ran: "virtual:2 (emulated on the CPU), 200 steps"


def _check(field: str, value, lo, hi, what: Text):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, value, what)
    if value < lo or (hi is not None and value > hi):
        raise ConfigError(field, value, what)
    return value


# ---------------------------------------------------------------------------------------------------------
# The formulas, one strategy at a time. params is Ψ, k the number of devices.


def memory_per_device(strategy: str, params: float, k: int, state: StateBytes = MIXED_ADAM) -> float:
    """Bytes of parameters, gradients and optimizer state on the fullest device (activations not counted)."""
    p, g, o = state.params * params, state.grads * params, state.optimizer * params
    return projection_of(strategy).memory(p, g, o, k)


def comm_bytes_per_device(
    strategy: str, params: float, k: int, batch_bytes: float = 0.0, state: StateBytes = MIXED_ADAM
) -> float:
    """Bytes the busiest device sends or receives per step.

    Args:
        batch_bytes: the global batch's rows, outputs and output gradients (DataParallel moves (K-1)/K of
            them through device 0; the others read their own rows).
        state: what one parameter or gradient costs on the wire (its precision).
    """
    return projection_of(strategy).wire(params * state.wire, k, batch_bytes)


def latency_steps(strategy: str, k: int) -> int:
    """Messages in a row per step: 2(K-1) for a ring all-reduce, 3(K-1) for ZeRO-3, 4(K-1) for
    DataParallel's scatter, replicate, gather and reduce from and to device 0, one device after another."""
    projection = projection_of(strategy)
    if projection.latency is not None:  # a 2-D mesh's: its tp ring, then its dp collectives
        return projection.latency(k)
    return projection.latency_per_device * (k - 1)


def comm_seconds(
    strategy: str, params: float, k: int, link: Link, batch_bytes: float = 0.0, state: StateBytes = MIXED_ADAM
) -> float:
    """The alpha-beta model: latency steps x α + bytes / β."""
    wire = comm_bytes_per_device(strategy, params, k, batch_bytes, state)
    return latency_steps(strategy, k) * link.latency + wire / link.bandwidth


def compute_seconds(measured: Measured, params: float, rows: float, flops: float) -> float:
    """One device's compute for `rows` rows: the measured step's, scaled from the rows it computed, plus
    6 Ψ FLOPs per row for the parameters the run did not have."""
    extra = max(0.0, params - measured.params)
    measured_part = measured.compute_seconds * rows / measured.rows_per_device
    return measured_part + FLOPS_PER_PARAM_ROW * extra * rows / flops


# ---------------------------------------------------------------------------------------------------------
# The table.


def table(
    measured: Measured,
    params: float | None = None,
    devices: Sequence[int] = DEVICE_COUNTS,
    link: Link | str = "nvlink",
    device_memory: float = DEVICE_MEMORY,
    flops: float = DEVICE_FLOPS,
    rows_per_device: float | None = None,
    state: StateBytes = MIXED_ADAM,
) -> list[dict]:
    """One row per strategy and device count: memory, bytes, seconds and their shares, all projected.

    Args:
        measured: the run's step (measure()).
        params: the model's parameters Ψ (the run's own when None), 1 to 1e12.
        devices: device counts K to project to.
        link: a preset name of LINKS, or a Link.
        device_memory: bytes of one device's memory.
        flops: effective FLOP/s of one device.
        rows_per_device: rows each device computes per step (the run's when None): the global batch grows
            with K, as it does when one scales out with DDP.
        state: the optimizer's and the precision's bytes per parameter (state_bytes()).
    """
    if params is None:
        params = measured.params
    _check("params", params, 1, MAX_PARAMS, Text("cli.whatif.allowed.params"))
    link = _link(link)
    _check("device_memory", device_memory, 1, None, Text("cli.whatif.allowed.bytes"))
    _check("flops", flops, 1, None, Text("cli.whatif.allowed.flops"))
    rows = measured.rows_per_device if rows_per_device is None else rows_per_device
    _check("rows_per_device", rows, 1, None, Text("cli.whatif.allowed.rows"))
    out = []
    for k in devices:
        _check("devices", k, 1, MAX_DEVICES, Text("cli.whatif.allowed.devices", most=MAX_DEVICES))
        batch_bytes = k * rows * measured.row_bytes
        for s in projections():
            row = _row(s, int(k), params, link, device_memory, flops, rows, batch_bytes, measured, state)
            out.append(row)
    return out


def device0_excess(
    strategy: str, params: float, k: int, rows: float, state: StateBytes = MIXED_ADAM
) -> float | None:
    """Bytes the fullest device holds beyond each other one (DataParallel's device 0: the optimizer state and
    the K x rows outputs it gathers, one number a row at the state's precision); None where every device
    holds the same."""
    projection = projection_of(strategy)
    if projection.excess is None:
        return None
    p, g, o = state.params * params, state.grads * params, state.optimizer * params
    return projection.excess(p, g, o, k, k * rows * state.wire)


# a row's notes, by tag, in the order the table lists them; the page shows the tags and explains each below
NOTE_TAGS = ("one_machine", "memory", "comm", "device0", "bubble")


def _row(s, k, params, link, device_memory, flops, rows, batch_bytes, measured, state) -> dict:
    memory = memory_per_device(s, params, k, state)
    row = {
        "strategy": s,
        "name": projection_of(s).title,
        "devices": k,
        "params": params,
        "global_batch_rows": k * rows,  # every row at this device count describes the same global batch
        "memory_per_device_bytes": memory,
        "device0_excess_bytes": None,
        "fits": memory <= device_memory,
        "label": PROJECTED,
        "note": "",
        "tags": [],
    }
    if projection_of(s).one_machine and k > DEVICES_PER_MACHINE:
        row["fits"] = False
        _note(row, "one_machine", t("cli.whatif.note.one_machine", n=DEVICES_PER_MACHINE))
        none = ("comm_bytes_per_device", "comm_seconds", "compute_seconds", "bubble_share", "idle_seconds",
                "step_seconds", "comm_share", "activations_held_bytes")  # fmt: skip
        return {**row, **dict.fromkeys(none)}
    projection = projection_of(s)
    if projection.activations:  # the batch's outputs, one number a row, not its rows
        batch_bytes = batch_bytes / measured.row_bytes * state.wire
    wire = comm_bytes_per_device(s, params, k, batch_bytes, state)
    comm = comm_seconds(s, params, k, link, batch_bytes, state)
    extremes = link.extremes()
    if extremes:  # the same row on the fastest and the slowest of the link's measured repeats
        row["comm_seconds_spread"] = [comm_seconds(s, params, k, x, batch_bytes, state) for x in extremes]
    # every row of the table is the same global batch, K x rows: a device computes its share of its rows
    seen = k * rows * projection.batch_share(k)
    # and keeps some of their activations for its backward, one number a row (the model's output, as the
    # wire and device 0's excess count them): not in memory_per_device_bytes, which is the ZeRO paper's
    held = projection.held_share(k) if projection.held_share else projection.batch_share(k)
    row["activations_held_bytes"] = k * rows * held * state.wire
    compute = compute_seconds(measured, params, seen, flops) * projection.compute_share(k)
    if not row["fits"]:
        need, have = f"{memory / 1e9:.3g}", f"{device_memory / 1e9:.3g}"
        _note(row, "memory", t("cli.whatif.note.memory", need=need, have=have))
    elif comm > compute:
        _note(row, "comm", t("cli.whatif.note.comm"))
    excess = device0_excess(s, params, k, rows, state)
    if excess is not None:
        row["device0_excess_bytes"] = excess
        _note(row, "device0", t("cli.whatif.note.device0", bytes=memory_text(excess)))
    # a pipeline's bubble: the device waits that share of the step, so its compute is the rest of it
    bubble = projection.bubble(k)
    idle = compute * bubble / (1 - bubble)
    if bubble > 0:
        _note(row, "bubble", t("cli.whatif.note.bubble", share=share_text(bubble)))
    step = comm + compute + idle  # no overlap: DDP overlaps its buckets with backward, so less
    return {
        **row,
        "comm_bytes_per_device": wire,
        "comm_seconds": comm,
        "compute_seconds": compute,
        "bubble_share": bubble,
        "idle_seconds": idle,
        "step_seconds": step,
        "comm_share": comm / step,
    }


def _note(row: dict, tag: str, text: str) -> None:
    """Add a note to a row: its tag (NOTE_TAGS) and its sentence, after the notes it has."""
    row["tags"].append(tag)
    row["note"] = t("cli.whatif.note.join").join(filter(None, (row["note"], text)))


def _link(link: Link | str) -> Link:
    if isinstance(link, Link):
        _check("bandwidth", link.bandwidth, 1, None, Text("cli.whatif.allowed.bytes_per_second"))
        _check("latency", link.latency, 0, None, Text("cli.whatif.allowed.seconds"))
        return link
    if link not in LINKS:
        raise ConfigError("link", link, Listed(LINKS))
    return LINKS[link]


# ---------------------------------------------------------------------------------------------------------
# The measured starting point.


def measure(checked: Checked, steps: int | None = None) -> Measured:
    """Run a checked DataParallel config once, on its device plan, and take the median compute time of its
    steps.

    Args:
        steps: run only as many epochs as this many steps need (at least one); None: all of its epochs.
    """
    from dataclasses import replace

    from fitcore.core.events import Step
    from fitcore.protocols import registry

    cfg, plan = checked.config, checked.plan
    if steps is not None:
        cfg = replace(cfg, epochs=max(1, min(cfg.epochs, math.ceil(steps / cfg.batches_per_epoch))))
    seen: list[Step] = []
    keep = lambda e: seen.append(e) if isinstance(e, Step) else None  # noqa: E731
    ended = registry.of(cfg).train(cfg, keep, plan=plan)
    if ended.status != "finished":
        raise ConfigError("lr", cfg.lr, Text("cli.whatif.allowed.finished", message=ended.message))
    times = [_compute(s) for s in seen]
    k = len(plan.labels)
    return Measured(
        compute_seconds=statistics.median(times),
        rows_per_device=cfg.batch_size / k,
        row_bytes=(cfg.n_features + 2) * 4,
        devices=k,
        params=cfg.n_features + 1,
        where=t(
            "cli.whatif.where",
            spec=plan.spec,
            steps=len(seen),
            kind=t("cli.whatif.emulated") if plan.emulated else plan.kind,
        ),  # fmt: skip
    )


def measured_strategy() -> str:
    """The strategy whose step the projection starts from: the default one, one process (its compute
    time is one device's, whatever its devices)."""
    from fitcore.protocols import registry

    return registry.DEFAULT


def _compute(step) -> float:
    """A step's compute: the slowest replica's forward, the loss, backward and the optimizer step."""
    if step.phases is None:  # one device: no phases; the step as a whole
        return step.elapsed / max(step.step, 1)
    by: dict[str, float] = {}
    for p in step.phases.phases():
        if p.name == "parallel_apply":
            by[p.name] = max(by.get(p.name, 0.0), p.duration)
        elif p.name in ("loss", "backward", "optimizer"):
            by[p.name] = by.get(p.name, 0.0) + p.duration
    return sum(by.values())


def to_dict(
    measured: Measured,
    rows: list[dict],
    link: Link,
    device_memory: float,
    flops: float,
    state: StateBytes = MIXED_ADAM,
) -> dict:
    """The JSON of `python -m fitcore whatif --json`: the measured start apart from the projected rows."""
    return {
        "measured": {**asdict(measured), "label": "measured on this machine"},
        "assumptions": {
            "link": asdict(link),
            "device_memory_bytes": device_memory,
            "device_flops": flops,
            "optimizer": state.optimizer_name,
            "precision": state.precision,
            "bytes_per_param": {"params": state.params, "grads": state.grads, "optimizer": state.optimizer},
            "wire_bytes_per_element": state.wire,
        },
        "label": PROJECTED,
        "rows": rows,
    }


# ---------------------------------------------------------------------------------------------------------
# `python -m fitcore whatif`


def human(n: float | None, unit: str) -> str:
    """A figure in its unit with a prefix and 3 significant digits ("2.37 GB"); "-" for none."""
    if n is None:
        return "-"
    for scale, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def seconds_text(seconds: float | None) -> str:
    """A time in µs, ms, s, min, h or days, 3 significant digits ("2.37 ms", "39.5 min"); "-" for none."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            return t(f"cli.whatif.unit.{unit}", n=f"{seconds / size:.3g}")
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"


def memory_text(n: float) -> str:
    """A device's bytes; less than one byte a device (ZeRO-3's 3 parameters on 1,024 ranks) is no figure
    to print but a fact to say: the model has fewer numbers than there are ranks."""
    return t("cli.whatif.sub_byte") if 0 < n < 1 else human(n, "B")


# a count of parameters as a model's size is said: 7e9 is "7B" in English, "70 亿" in Chinese (units of 10^4)
PARAM_UNITS = {
    "en": ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")),
    "zh": ((1e12, " 万亿"), (1e8, " 亿"), (1e4, " 万")),
}


def params_text(n: float) -> str:
    """A model's size in parameters, 3 significant digits: "7B", "13B", "100M", "3" ("70 亿" in Chinese)."""
    for scale, unit in PARAM_UNITS.get(current(), PARAM_UNITS["en"]):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def share_text(share: float | None) -> str:
    """The communication's share of a step, in percent ("72 %"); "-" for none."""
    return "-" if share is None else f"{share * 100:.3g} %"


def state_text(state: StateBytes) -> str:
    """The bytes per parameter the rows assume, said with the optimizer and precision they come from."""
    return t(
        "cli.whatif.state",
        optimizer=t(f"cli.whatif.optimizer.{state.optimizer_name}"),
        precision=t(f"cli.whatif.precision.{state.precision}"),
        params=state.params,
        grads=state.grads,
        state=state.optimizer,
        total=state.total,
        wire=state.wire,
    )


def calibrations(cfg: FitConfig) -> list[dict]:
    """Every strategy's calibration point at cfg.workers ranks: the bytes its real collectives sent per rank
    and step, against the projected row's formula at the same K (a strategy's `calibrate` hook)."""
    from fitcore.protocols import registry

    k = max(2, cfg.workers)
    return [s.calibrate(cfg, k) for s in registry.STRATEGIES.values() if s.calibrate is not None]


def spread_text(link: dict, key: str = "cli.whatif.spread") -> str:
    """What a measured link's repeats spanned, and what that does to the rows' communication (`key`: the
    sentence, the command line's or the page's)."""
    (b_lo, b_hi), (l_lo, l_hi) = link["bandwidth_range"], link["latency_range"]
    latency = f"{seconds_text(l_lo)} – {seconds_text(l_hi)}"
    bandwidth = f"{human(b_lo, 'B/s')} – {human(b_hi, 'B/s')}"
    return t(key, repeats=link["repeats"], latency=latency, bandwidth=bandwidth)
