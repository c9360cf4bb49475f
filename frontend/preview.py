"""Dev tool: serve the live component through a plain page with a fake run, without Streamlit.

    python frontend/preview.py [--port 8631] [--lang zh]
    open http://127.0.0.1:8631/?scenario=dp3&width=960      (&lang=zh or en overrides --lang)

The page (preview.html) calls component.js's default export with the same contract as st.components.v2
(`data`, `parentElement` = a shadow root, `setTriggerValue`); it serves frontend/'s modules and plotly.js at
/fitcore/static/ as fitcore/api.py does, and answers `/fitcore/live?run=&since=` from
a fake run that advances with the wall clock, in the payload format of the live schema. A status trigger
"reruns" by fetching the mount data again, as the Streamlit script would.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import random
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # fitcore's catalog, run as `python frontend/preview.py`
from fitcore.core import i18n  # noqa: E402
from fitcore.core.config import FitConfig, check  # noqa: E402
from fitcore.core.events import Step  # noqa: E402
from fitcore.core.memory import memory_part  # noqa: E402
from fitcore.core.phases import StepPhases  # noqa: E402
from fitcore.core.shards import Layout, epoch_shards  # noqa: E402
from fitcore.kit import live  # noqa: E402
from fitcore.protocols import registry  # noqa: E402

STATIC = "/fitcore/static/"
MODULE = re.compile(r"[a-z_]+\.(js|css)")  # the files fitcore/api.py serves from frontend/
ITEMSIZE = 4  # float32
IDS_SHOWN = 6
SHARDING = "reshard_after_forward"  # the config field of the strategy that shards the model (its option)


@dataclass(frozen=True)
class Scenario:
    """One fake run: its strategy, devices, data and where it starts."""

    ranks: bool = False  # one process per rank (the strategy with ranks), or one process splitting batches
    devices: int = 2  # K selected devices / ranks
    rows: int = 200  # dataset rows (one batch per epoch: batch size = rows)
    weights: tuple[float, ...] = (5.2, 9.6)
    bias: float = 3.4
    pace: float | None = 20.0  # steps/s, None = as fast as possible
    total: int = 200
    start: int = 120  # the step the run has reached when the page mounts
    status: str = "running"  # the status at mount
    diverge_at: int | None = None  # the step whose loss overflows
    queued_s: float = 0.0  # seconds queued before it runs
    overlay: bool = False  # show an earlier run's loss behind it
    zero: int | None = None  # 3 or 2: the strategy that shards the model, at that ZeRO stage (ranks too)
    columns: bool = False  # the strategy whose ranks take columns of X (tensor parallelism; ranks too)

    @property
    def strategy(self) -> str:
        """The registered strategy it fakes: the one that shards the model where `zero` is set, else the first
        with one process per rank, or the first without."""
        if self.zero is not None:
            return next(s.name for s in registry.STRATEGIES.values() if SHARDING in s.options)
        if self.columns:
            cuts = (s for s in registry.STRATEGIES.values() if s.split.columns and not s.split.rows)
            return next(s.name for s in cuts)
        return next(s.name for s in registry.STRATEGIES.values() if s.processes == self.ranks)

    @property
    def label(self) -> str:
        return registry.strategy(self.strategy).label


SCENARIOS = {
    "dp2": Scenario(),
    "dp2slow": Scenario(pace=1.0, start=12),
    "dp3": Scenario(devices=3),
    "dp8x5": Scenario(devices=8, rows=5, pace=2.0, start=40),
    "dp200on6": Scenario(devices=6),
    "paused": Scenario(devices=3, status="paused", start=80),
    "ddp3": Scenario(ranks=True, devices=3),
    # held still at a step, for ◀ ▶ to walk its phases (tests/test_browser_picture.py measures each one)
    "dp2held": Scenario(status="paused", start=80),
    "dp3held": Scenario(devices=3, status="paused", start=80),
    "dp8held": Scenario(devices=8, status="paused", start=80),
    "ddp3held": Scenario(ranks=True, devices=3, status="paused", start=80),
    "ddp8": Scenario(ranks=True, devices=8, rows=200),
    # the model sharded over the ranks: 3 weights, so that the ranks hold different rows of W (and b on one)
    "fsdp2": Scenario(ranks=True, weights=(5.2, 9.6, -1.0), zero=3),
    "fsdp3": Scenario(ranks=True, devices=3, weights=(5.2, 9.6, -1.0), zero=3),
    "fsdp2held": Scenario(ranks=True, weights=(5.2, 9.6, -1.0), zero=3, status="paused", start=80),
    "fsdp3held": Scenario(ranks=True, devices=3, weights=(5.2, 9.6, -1.0), zero=3, status="paused", start=80),
    "fsdp2zero2held": Scenario(ranks=True, weights=(5.2, 9.6, -1.0), zero=2, status="paused", start=80),
    # eight ranks on three weights: five hold nothing, their chips in the narrowest boxes
    "fsdp8held": Scenario(ranks=True, devices=8, weights=(5.2, 9.6, -1.0), zero=3, status="paused", start=80),
    # X split by columns: 4 features on 2 ranks
    "tp2held": Scenario(ranks=True, columns=True, weights=(5.2, 9.6, -1.0, 2.5), status="paused", start=80),
    # 8 features on 8 ranks: a column each, the strips narrower than their words
    "tp8held": Scenario(ranks=True, columns=True, devices=8, status="paused", start=80,
                        weights=(5.2, 9.6, -1.0, 2.5, 1.0, 2.0, 3.0, 4.0)),
    "diverged": Scenario(devices=2, start=60, diverge_at=37, status="diverged"),
    "finish": Scenario(devices=2, total=40, start=30, pace=10.0, overlay=True),
    "queued": Scenario(devices=3, start=0, queued_s=2.0),
    "overlay": Scenario(devices=3, start=150, overlay=True),
    "one": Scenario(devices=1),
    "fast": Scenario(devices=4, pace=None, total=5000, start=100),
}


def chunk_sizes(n: int, k: int) -> list[int]:
    """tensor.chunk(k)'s rows: chunks of ceil(n / k) and a smaller last one (fitcore.core.parallel's rule)."""
    size = math.ceil(n / k)
    full, rest = divmod(n, size)
    return [size] * full + ([rest] if rest else [])


@dataclass
class FakeRun:
    """A run whose step follows the wall clock from `t0`, with a made-up but smooth learning curve."""

    id: str
    scenario: Scenario
    t0: float = field(default_factory=time.time)
    status: str = "running"
    frozen_step: int = 0

    def step(self, now: float) -> int:
        sc = self.scenario
        if self.status != "running":
            return self.frozen_step
        running_for = now - self.t0 - sc.queued_s
        if running_for < 0:
            return sc.start
        rate = sc.pace if sc.pace else 400.0
        return min(sc.total, sc.start + int(running_for * rate))

    def status_at(self, now: float) -> str:
        sc = self.scenario
        if self.status != "running":
            return self.status
        if now - self.t0 < sc.queued_s:
            return "queued"
        return "finished" if self.step(now) >= sc.total else "running"

    def step_time(self, step: int) -> float:
        rate = self.scenario.pace or 400.0
        return self.t0 + self.scenario.queued_s + (step - self.scenario.start) / rate

    def truth(self) -> list[float]:
        return list(self.scenario.weights) + [self.scenario.bias]

    def params(self, step: int) -> list[float]:
        sc = self.scenario
        if sc.diverge_at is not None:
            # an oscillation that grows by 1.9x a step: what too large a learning rate does
            return [t - t * (-1.9) ** step / 3.0 for t in self.truth()]
        decay = math.exp(-step / 22.0)
        return [t - t * decay * math.cos(step / 7.0 + i) for i, t in enumerate(self.truth())]

    def loss(self, step: int) -> float | None:
        err = sum((p - t) ** 2 for p, t in zip(self.params(step), self.truth()))
        value = 2.0 * err + 1e-9
        if self.scenario.diverge_at is not None and step >= self.scenario.diverge_at:
            return None  # inf / NaN travel as null
        return value


def status_line(run: FakeRun, status: str, step: int) -> tuple[str, str]:
    sc = run.scenario
    pace = f"{sc.pace:g} steps/s" if sc.pace else "as fast as possible"
    where = f"step {step} / {sc.total}"
    return {
        "running": (f"Running · epoch {step}, {where} · {pace}", "info"),
        "paused": (f"Paused at {where} · press Resume to go on", "warning"),
        "queued": ("Queued · waiting for a free training slot", "info"),
        "finished": (f"Finished · {where} · {pace}", "success"),
        "diverged": (
            f"Diverged at step {sc.diverge_at}: the loss overflowed; lower the learning rate",
            "error",
        ),
    }.get(status, (status, "info"))


def picture(run: FakeRun, step: int) -> dict | None:
    """The latest step's picture in the live schema's format."""
    if step < 1:
        return None
    sc = run.scenario
    if sc.zero is not None:
        return sharded_picture(run, step)
    if sc.columns:
        return columns_picture(run, step)
    rng = random.Random(step)
    order = list(range(sc.rows))
    rng.shuffle(order)
    sizes = chunk_sizes(sc.rows, sc.devices)
    d = len(sc.weights)
    devices, start = [], 0
    for i in range(sc.devices):
        label = f"virtual:{i}"
        if i < len(sizes):
            rows = sizes[i]
            ids = order[start : start + rows][:IDS_SHOWN]
            loss = run.loss(step) * (1 + 0.1 * math.sin(i + step)) if sc.ranks else None
            devices.append({
                "label": label, "busy": True, "start": start, "stop": start + rows, "rows": rows,
                "input_shape": [rows, d], "output_shape": [rows, 1], "ids": ids,
                "loss": loss if loss is None or math.isfinite(loss) else None,
            })  # fmt: skip
            start += rows
        else:
            devices.append({
                "label": label, "busy": False, "start": None, "stop": None, "rows": 0,
                "input_shape": None, "output_shape": None, "ids": [], "loss": None,
            })  # fmt: skip
    if sc.ranks:  # the rows DistributedSampler repeats to pad the shards (one batch an epoch)
        layout = Layout(sc.rows, sc.devices, sc.rows)
        for rank, x in enumerate(devices):
            x["padded"] = layout.padded_rows(rank, 1)
    phases = ddp_phases(devices, d) if sc.ranks else dp_phases(devices, d)
    # what each device holds, the strategy's formula as its run measures it (the chips' bytes)
    cfg = FitConfig(weights=sc.weights, bias=sc.bias, strategy=sc.strategy)
    memory = importlib.import_module(f"fitcore.strategies.{sc.strategy}.memory")
    memory_part(devices, [memory.planned_memory(cfg, r, sc.devices) for r in range(sc.devices)])
    busy = [x for x in devices if x["busy"]]
    k = len(busy)
    # per non-first busy device: scatter rows*d, replicate d+1, gather rows, backward rows, reduce d+1
    dp_bytes = sum((x["rows"] * d + (d + 1) + 2 * x["rows"] + (d + 1)) * ITEMSIZE for x in busy[1:])
    ddp_bytes = int(k * 2 * (k - 1) / k * (d + 1) * ITEMSIZE) if k else 0
    loss = run.loss(step)
    return {
        "strategy": sc.strategy, "drawer": sc.strategy, "step": step, "epoch": step, "batch": 1,
        "loss": loss if loss is not None else None, "time": run.step_time(step),
        "batch_rows": sc.rows, "input_shape": [sc.rows, d], "output_shape": [sc.rows, 1],
        "first_device": "virtual:0", "emulated": True, "devices": devices, "phases": phases,
        "bytes": {_strategy(False): dp_bytes, _strategy(True): ddp_bytes},
    }  # fmt: skip


def sharded_picture(run: FakeRun, step: int) -> dict:
    """The sharding strategy's picture as fitcore.kit.live makes it from a Step: its ranks' rows
    (DistributedSampler's shards), its collectives' specs and bytes (its layout's), each rank's shard and
    planned bytes (its view's picture part). Only the times and the losses are made up."""
    sc = run.scenario
    cfg = FitConfig(weights=sc.weights, bias=sc.bias, data_size=sc.rows, batch_size=sc.rows, epochs=sc.total,
                    strategy=sc.strategy, devices="cpu", workers=sc.devices,
                    reshard_after_forward=sc.zero == 3)  # fmt: skip
    strategy = registry.of(cfg)
    layout = importlib.import_module(f"fitcore.strategies.{sc.strategy}.layout")  # bytes, specs, memory
    first, labels = strategy.planned_step(cfg, check(cfg, gpus=[]).plan)
    # one batch an epoch: the step's rows are its epoch's shards
    shards = epoch_shards(sc.rows, len(labels), cfg.shuffle, cfg.seed, step)
    replicas = tuple(
        r._replace(ids=tuple(shards[i][: live.MAX_IDS]), loss=_rank_loss(run, step, i))
        for i, r in enumerate(first.replicas)
    )
    params = run.params(step)
    loss = run.loss(step)
    d, k = cfg.n_features, len(labels)
    shard = layout.shard_numel(d, k) * ITEMSIZE
    gathers = 2 if sc.zero == 3 else 1  # ZeRO-3 gathers again for backward
    sent = (layout.all_gather_bytes(k, shard),) * gathers + (layout.reduce_scatter_bytes(k, shard),)
    reports = [Sent(sent)] * k
    specs = layout.ranks_fsdp_specs(sc.zero == 3, labels, d, ITEMSIZE, reports)
    times = [t for r in range(k) for t in sharded_times(r, sc.zero)]
    phases = StepPhases(tuple(specs), tuple(times))
    event = Step(step, step, 1, math.nan if loss is None else loss, first.input_shape, first.output_shape,
                 replicas, tuple(params[:d]), params[d], 0.0, phases)  # fmt: skip
    extra = {sc.strategy: {"per_rank_memory": [layout.planned_memory(cfg, r, k) for r in range(k)]}}
    return live._picture(cfg, event, labels, False, run.step_time(step), extra)


def columns_picture(run: FakeRun, step: int) -> dict:
    """The columns strategy's picture as fitcore.kit.live makes it from a Step: every rank the whole batch and
    its own columns (its view's planned step), its all-reduce's bytes (its layout's formula on the batch),
    each rank's planned memory. Only the times and the loss are made up."""
    sc = run.scenario
    cfg = FitConfig(weights=sc.weights, bias=sc.bias, data_size=sc.rows, batch_size=sc.rows, epochs=sc.total,
                    strategy=sc.strategy, devices="cpu", workers=sc.devices)  # fmt: skip
    strategy = registry.of(cfg)
    layout = importlib.import_module(f"fitcore.strategies.{sc.strategy}.layout")  # bytes, specs, memory
    first, labels = strategy.planned_step(cfg, check(cfg, gpus=[]).plan)
    order = list(range(sc.rows))
    random.Random(step).shuffle(order)
    replicas = tuple(
        r._replace(ids=tuple(order[: live.MAX_IDS]), loss=run.loss(step)) for r in first.replicas
    )
    params, loss = run.params(step), run.loss(step)
    d, k = cfg.n_features, len(labels)
    reports = [Shapes((sc.rows, 1), (layout.allreduce_bytes(k, sc.rows, ITEMSIZE),))] * k
    specs = layout.ranks_tp_specs(labels, d, ITEMSIZE, reports)
    times = [t * 1e-6 for _ in range(k) for t in COLUMNS_SLOTS_US]
    phases = StepPhases(tuple(specs), tuple(times))
    event = Step(step, step, 1, math.nan if loss is None else loss, first.input_shape, first.output_shape,
                 replicas, tuple(params[:d]), params[d], 0.0, phases)  # fmt: skip
    extra = {sc.strategy: {"per_rank_memory": [layout.planned_memory(cfg, r, k) for r in range(k)]}}
    return live._picture(cfg, event, labels, False, run.step_time(step), extra)


class Shapes(NamedTuple):
    """What the columns strategy's specs read of a rank's report: its input shape, its bytes sent."""

    input_shape: tuple[int, int]
    sent: tuple[int, ...]


# One columns rank's slot times (µs): START, LOSS_END, BACKWARD_END, OPTIMIZER_END, LOADED, PARTIAL_END,
# ALLREDUCE_END (its layout's slots)
COLUMNS_SLOTS_US = (0, 64, 98, 112, 8, 24, 52)


class Sent(NamedTuple):
    """What the specs read of a rank's StepReport: the bytes it sent in each collective of the step."""

    sent: tuple[int, ...]


# One rank's slot times (µs from its start), in its layout's slot order: START, LOSS_END, BACKWARD_END,
# OPTIMIZER_END, LOADED, FORWARD_END, then the forward's all-gather, backward's (ZeRO-3), the reduce-scatter,
# and a 2-D mesh's two (the tp all-reduce's), zero-length on a 1-D run
SHARDED_SLOTS_US = {
    3: (0, 58, 120, 136, 8, 46, 10, 24, 66, 80, 92, 110, 46, 46),
    2: (0, 58, 104, 120, 8, 46, 10, 24, 58, 58, 76, 94, 46, 46),  # no second all-gather: its slots unread
}


def sharded_times(rank: int, zero: int) -> list[float]:
    """Rank `rank`'s slot times in seconds: each rank a microsecond behind the one before, as ranks are."""
    return [(us + rank) * 1e-6 for us in SHARDED_SLOTS_US[zero]]


def _rank_loss(run: FakeRun, step: int, rank: int) -> float | None:
    loss = run.loss(step)
    return None if loss is None else loss * (1 + 0.1 * math.sin(rank + step))


def _strategy(ranks: bool) -> str:
    return Scenario(ranks=ranks).strategy


def dp_phases(devices: list[dict], d: int) -> list[dict]:
    """DataParallel's phases with made-up but plausible times and the schema's byte formulas."""
    busy = [x for x in devices if x["busy"]]
    first = busy[0]["label"]
    phases, t = [], 0.0

    def add(name, device, duration, nbytes, start=None):
        phases.append(
            {
                "name": name,
                "device": device,
                "start": t if start is None else start,
                "duration": duration,
                "bytes": nbytes,
            }
        )

    for i, x in enumerate(busy):
        dur = 6e-6 + x["rows"] * 4e-8
        add("scatter", x["label"], dur, 0 if i == 0 else x["rows"] * d * ITEMSIZE)
        t += dur
    for i, x in enumerate(busy):
        add("replicate", x["label"], 9e-6, 0 if i == 0 else (d + 1) * ITEMSIZE)
        t += 9e-6
    for x in busy:  # the replicas run at once, one thread each
        add("parallel_apply", x["label"], 30e-6 + x["rows"] * 1e-7, None, start=t)
    t += max(30e-6 + x["rows"] * 1e-7 for x in busy)
    for i, x in enumerate(busy):
        add("gather", x["label"], 5e-6, 0 if i == 0 else x["rows"] * ITEMSIZE)
        t += 5e-6
    add("loss", first, 12e-6, 0)
    t += 12e-6
    add("backward", first, 70e-6, sum(x["rows"] * ITEMSIZE for x in busy[1:]))
    t += 70e-6
    for i, x in enumerate(busy):
        add("reduce", x["label"], 6e-6, 0 if i == 0 else (d + 1) * ITEMSIZE)
        t += 6e-6
    add("optimizer", first, 18e-6, 0)
    return phases


def ddp_phases(devices: list[dict], d: int) -> list[dict]:
    """DDP's phases: every rank does each one at about the same time; only the all-reduce moves bytes."""
    busy = [x for x in devices if x["busy"]]
    k = len(busy)
    ring = int(2 * (k - 1) / k * (d + 1) * ITEMSIZE)
    phases, t = [], 0.0
    for name, dur, nbytes in (
        ("load", 8e-6, 0),
        ("forward", 30e-6, 0),
        ("loss", 10e-6, 0),
        ("backward", 50e-6, 0),
        ("allreduce", 25e-6, ring),
        ("optimizer", 15e-6, 0),
    ):
        for r, x in enumerate(busy):
            phases.append(
                {"name": name, "device": x["label"], "start": t + r * 1e-6, "duration": dur, "bytes": nbytes}
            )
        t += dur + k * 1e-6
    return phases


class Runs:
    """The fake runs this preview server knows, by id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, FakeRun] = {}
        self.counter = itertools.count(1)
        self.outage_until = 0.0

    def create(self, name: str) -> FakeRun:
        sc = SCENARIOS[name]
        run = FakeRun(id=f"run-{next(self.counter)}", scenario=sc)
        if sc.status != "running":
            run.status = sc.status
            run.frozen_step = sc.start
        with self.lock:
            self.runs[run.id] = run
        return run

    def get(self, run_id: str) -> FakeRun | None:
        with self.lock:
            return self.runs.get(run_id)


def payload(run: FakeRun, since: int) -> dict:
    now = time.time()
    step = run.step(now)
    status = run.status_at(now)
    line, kind = status_line(run, status, step)
    sc = run.scenario
    d = len(sc.weights)
    points = range(since + 1, step + 1)
    return {
        "run": {"id": run.id, "label": f"{run.id.replace('run-', 'Run ')} · "
                f"{sc.label} · {'cpu' if sc.zero else f'virtual:{sc.devices}'}",
                "strategy": sc.strategy, "status": status,
                "active": status in ("queued", "running", "paused"), "status_line": line, "kind": kind,
                "step": step, "total_steps": sc.total, "pace": sc.pace, "server_time": now},
        "names": [f"w{i + 1}" for i in range(d)] + ["b"],
        "true": run.truth(),
        "lstsq": [v + 0.02 for v in run.truth()],
        "loss": [[s, run.loss(s)] for s in points],
        "params": [[s, [v if math.isfinite(v) and abs(v) < 1e300 else None for v in run.params(s)]]
                   for s in points],
        "picture": picture(run, step),
    }  # fmt: skip


def overlay_series(total: int) -> list[dict]:
    """An earlier run's loss, slower and with a higher floor, to draw behind this one."""
    return [
        {
            "label": "Run 1 · DataParallel · virtual:2",
            "loss": [[s, 40 * math.exp(-s / 30) + 1e-3] for s in range(1, total + 1)],
        },
        {"label": "Run 0 · DDP", "loss": [[s, 1e3 * math.exp(-s / 9) + 1e-12] for s in range(1, total + 1)]},
    ]


RUNS = Runs()
LANG = {"default": "en"}  # --lang; a page's ?lang= overrides it


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet: the page polls several times a second
        pass

    def send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, value) -> None:
        self.send(code, json.dumps(value, allow_nan=False).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        name = url.path.removeprefix(STATIC)
        if url.path == "/":
            self.send(200, (HERE / "preview.html").read_bytes(), "text/html; charset=utf-8")
        elif url.path.startswith(STATIC) and (MODULE.fullmatch(name) and (HERE / name).is_file()):
            types = {".js": "text/javascript", ".css": "text/css"}
            self.send(200, (HERE / name).read_bytes(), types[Path(name).suffix] + "; charset=utf-8")
        elif url.path == STATIC + "plotly.min.js":
            plotly = Path(importlib.util.find_spec("plotly").origin).parent / "package_data" / "plotly.min.js"
            self.send(200, plotly.read_bytes(), "text/javascript; charset=utf-8")
        elif url.path == "/preview/mount":
            self.mount(query)
        elif url.path == "/preview/outage":
            RUNS.outage_until = time.time() + float(query.get("seconds", "5"))
            self.send_json(200, {"outage_until": RUNS.outage_until})
        elif url.path == "/preview/forget":  # the run is gone: the endpoint answers 404 from now on
            with RUNS.lock:
                RUNS.runs.pop(query.get("run", ""), None)
            self.send_json(200, {"forgot": query.get("run")})
        elif url.path == "/fitcore/live":
            self.live(query)
        else:
            self.send_json(404, {"error": "not found"})

    def mount(self, query: dict) -> None:
        run = RUNS.get(query.get("run", "")) or RUNS.create(query.get("scenario", "dp2"))
        lang = i18n.language(query.get("lang")) or LANG["default"]
        data = {
            "payload": payload(run, 0), "endpoint": "/fitcore/live", "poll_ms": 400, "paused_poll_ms": 1000,
            "assets": STATIC.rstrip("/"), "plotly": STATIC + "plotly.min.js",
            "overlay": overlay_series(run.scenario.total) if run.scenario.overlay else [],
            "lang": lang, "texts": i18n.browser_texts(lang=lang),
            "presenter": query.get("presenter") == "1",
        }  # fmt: skip
        self.send_json(200, data)

    def live(self, query: dict) -> None:
        if time.time() < RUNS.outage_until:
            self.send_json(503, {"error": "outage (preview)"})
            return
        run = RUNS.get(query.get("run", ""))
        if run is None:
            self.send_json(404, {"error": "no such run"})
            return
        try:
            since = int(query.get("since", "0"))
        except ValueError:
            self.send_json(400, {"error": f"since must be an integer, got {query.get('since')!r}"})
            return
        self.send_json(200, payload(run, max(0, since)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8631)
    parser.add_argument("--lang", choices=sorted(i18n.LANGUAGES), default="en", help="the view's language")
    args = parser.parse_args()
    LANG["default"] = args.lang
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"preview on http://127.0.0.1:{args.port}/?scenario=dp3&width=960 ({', '.join(SCENARIOS)})")
    server.serve_forever()


if __name__ == "__main__":
    main()
