"""One rank of a run that torchrun launched (`torchrun ... -m fitcore --strategy ...`), on 1+ machines.

torchrun sets each rank's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the rank joins the process group
from them and runs its strategy's loop, the one the spawned ranks run (its Engine's `train`); rank 0 emits
the events.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Callable, Mapping, NamedTuple

import torch
import torch.distributed as dist

from fitcore.core.config import MAX_WORKERS, FitConfig, check_mesh, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.devices import DevicePlan, parse_devices
from fitcore.core.errors import ConfigError, Text
from fitcore.core.events import Detail, Event, RunEnded, Status, run_started
from fitcore.core.i18n import count, t
from fitcore.core.shards import first_epoch_value
from fitcore.core.train import Control, describe_failure, finished_message
from fitcore.engine.contract import Engine, engine_of
from fitcore.engine.loop import Place, run_rank
from fitcore.engine.rank import (
    COLLECTIVE_TIMEOUT,
    IDS_COLS,
    TIMES_FROM,
    RankParams,
    RankState,
    final_value,
    group_backend,
    group_value,
    rank_label,
    rank_step,
    ranks_phases,
    table_ids,
)
from fitcore.protocols.mesh import DP, mesh_of
from fitcore.runs.console import final_lines, group_line, shard_lines
from fitcore.runs.recording import GROUP


class RankInfo(NamedTuple):
    """Who one rank is, as the ranks share it once at the start."""

    label: str
    device: str
    host: str
    pid: int


@dataclass(frozen=True)
class TorchrunEnv:
    """What torchrun tells each rank through its environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def torchrun_env(environ: Mapping[str, str] | None = None) -> TorchrunEnv | None:
    """The torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), or None outside torchrun."""
    env = os.environ if environ is None else environ
    if not all(env.get(name) for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return None
    try:
        world = int(env["WORLD_SIZE"])
        return TorchrunEnv(
            int(env["RANK"]),
            world,
            int(env.get("LOCAL_RANK", env["RANK"])),
            int(env.get("LOCAL_WORLD_SIZE", world)),
            env["MASTER_ADDR"],
            int(env["MASTER_PORT"]),
        )
    except ValueError:
        given = {name: env.get(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
        raise ConfigError("torchrun environment", given, Text("config.torchrun_env")) from None


def config_for_torchrun(cfg: FitConfig, env: TorchrunEnv, workers_given: bool = False) -> FitConfig:
    """Validate cfg for one rank of a torchrun launch; return it with workers = the world size.

    The devices are checked per machine (one GPU per local rank for cuda); the world size, which torchrun
    sets, must be at most the data size.
    """
    if workers_given and cfg.workers != env.world_size:
        raise ConfigError(
            "workers", cfg.workers, Text("config.torchrun_workers", n=env.world_size)
        )
    if cfg.mesh:  # the mesh spans every machine: its product is torchrun's world size
        check_mesh(replace(cfg, workers=env.world_size))
    local = validate(replace(cfg, workers=min(env.local_world_size, MAX_WORKERS), mesh=""))
    cfg = replace(local, workers=cfg.workers, mesh=cfg.mesh)  # a CSV source comes back resolved
    rows = dict(cfg.mesh_dims).get(DP, env.world_size) if cfg.mesh else env.world_size  # ranks cutting rows
    if rows > cfg.data_size:
        raise ConfigError("workers", env.world_size, Text("config.torchrun_ranks", rows=cfg.data_size))
    return replace(cfg, workers=env.world_size)


class _OneBehind:
    """The lead rank's Steps, each held until every rank's times of it arrive with the next step's table.

    The ranks share their data once a step, before backward, when the step's own times are not yet known;
    holding a step back costs nothing, where another collective after each step would cost its round trip.
    """

    def __init__(self, emit: Callable[[Event], None], engine: Engine):
        self._emit, self._engine = emit, engine
        self._held: tuple | None = None  # rank_step's arguments, all but the phases
        self._specs: dict = {}  # the ranks' shapes -> every rank's phase specs (the Engine's), once each
        self.sizes: tuple = ()  # (labels, d, itemsize), set by the lead
        self.emitted = 0  # the steps emitted: what a run that fails mid-step reports it took
        self.coords: list | None = None  # each rank's coordinates on the run's mesh, once known
        self.mesh = None  # the run's mesh, once every rank's device is known

    def hold(self, *args) -> None:
        self._held = args

    def _specs_of(self, shapes) -> tuple:
        """The step's specs from the ranks' shapes, as the shared table gives them (the lead hears no
        other rank's report: a strategy whose bytes depend on more plans them, FSDP's by its formulas)."""
        key = tuple(shapes)
        if key not in self._specs:
            reports = [Shapes(tuple(i), tuple(o)) for i, o in shapes]
            self._specs[key] = self._engine.specs(*self.sizes, reports, self.mesh)
        return self._specs[key]

    def release(self, times) -> None:
        """Emit the held step with every rank's times of it ((K, slots)); None: without phases."""
        if self._held is not None:
            shapes = self._held[4]
            phases = ranks_phases(self._specs_of(shapes), times.tolist()) if times is not None else None
            self._emit(rank_step(*self._held, phases, self._engine.split, self.coords))
            self._held = None
            self.emitted += 1


class Shapes(NamedTuple):
    """A rank's shapes in a step, standing for its report where the lead rank has only the shared table."""

    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    sent: tuple[int, ...] = ()


def collective_timeout() -> timedelta:
    """How long a collective may wait for a rank: COLLECTIVE_TIMEOUT, or FITCORE_COLLECTIVE_TIMEOUT seconds
    (a test's host that dies sets a short one; a bad value keeps the default)."""
    try:
        seconds = float(os.environ.get("FITCORE_COLLECTIVE_TIMEOUT", ""))
    except ValueError:
        return COLLECTIVE_TIMEOUT
    return timedelta(seconds=seconds) if 0 < seconds <= 3600 else COLLECTIVE_TIMEOUT


def exit_rank(code: int) -> None:
    """End a torchrun rank the way torch.multiprocessing ends its workers: flush, then os._exit.

    .. warning::
        Letting the interpreter tear itself down after gloo was used sometimes aborts the process
        ("terminate called without an active exception", SIGABRT, about one run in ten here), and torchrun
        then reports the whole run as failed. Everything this process owes is printed by now.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def train_torchrun(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
    env: TorchrunEnv | None = None,
    engine: Engine | None = None,
) -> RunEnded:
    """Be one rank of a run torchrun launched: init_process_group from the environment and train.

    Rank 0 emits the events (with every rank's shapes, losses, row ids and phase times, which the ranks
    share each step; a Step is emitted when the next step brings every rank's times of it); the other
    ranks emit nothing. Every rank returns its RunEnded. cfg.workers must be the world size
    (config_for_torchrun). `engine` is the strategy's (its record's `ranks(cfg)` by default), as the spawned
    ranks run it; its `joined` gives the lead rank each step's parameters (every rank calls it: it may be a
    collective). It is one rank of a torchrun launch of every ranked strategy.
    """
    engine = engine or engine_of(cfg)
    control = control or Control()
    env = env or torchrun_env()
    if env is None:
        raise RuntimeError("train_torchrun needs torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
    plan = plan or parse_devices(cfg.devices)
    lead = env.rank == 0
    emit = on_event if lead else (lambda event: None)
    t0 = clock()  # reset once the model and optimizer exist: time the training, as train() does
    k, layout = env.world_size, engine.layout(replace(cfg, workers=env.world_size))
    backend = group_backend(plan)
    device = f"cuda:{plan.device_ids[env.local_rank]}" if backend == "nccl" else "cpu"
    state, raw = RankState(status=Status.FAILED), None
    weights, bias = (), float("nan")
    behind = _OneBehind(emit, engine)
    try:
        if backend == "nccl":
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group(
            backend, init_method="env://", rank=env.rank, world_size=k, timeout=collective_timeout()
        )
        # 1. who is where: every rank's label, device, host and pid, once
        me = RankInfo(rank_label(env.rank, device, backend), device, socket.gethostname(), os.getpid())
        everyone: list[RankInfo] = [None] * k
        dist.all_gather_object(everyone, me)
        labels = tuple(e.label for e in everyone)
        mesh = mesh_of(replace(cfg, workers=k).mesh_dims, backend, [e.device for e in everyone])
        behind.coords, behind.mesh = [mesh.coords(r) for r in range(k)], mesh
        if lead:
            X, y = make_data(cfg)
            lstsq = least_squares(X, y)
            behind.sizes = (labels, cfg.n_features, X.element_size())
            del X, y
            ranks = count("cli.count.rank", k)
            header = t(f"cli.{engine.words}.header.torchrun", ranks=ranks, backend=backend)
            emit(run_started(cfg, labels, header, layout.steps_per_epoch, lstsq))
            group = group_value(
                layout, backend, (env.master_addr, env.master_port), "launched by torchrun",
                [e.device for e in everyone], labels,
                {"hosts": [e.host for e in everyone], "pids": [e.pid for e in everyone]},
            )  # fmt: skip
            emit(Detail(GROUP, group, group_line(group)))
            if engine.split.rows:  # each rank its own rows: who got which
                shards = first_epoch_value(cfg, labels)
                emit(Detail("shards", shards, "\n".join(shard_lines(shards, "first"))))

        def ready():
            nonlocal t0
            t0 = clock()

        def report(step, epoch, batch, table, value, model, times, sent=()):
            w, b = engine.joined(model)  # on every rank: the ranks may hold parts of the parameters
            if not lead:
                return
            behind.release(table[:, TIMES_FROM:])  # the step before this one, with every rank's times
            shapes = [((n, d), (n_out, d_out)) for n, d, n_out, d_out in table[:, 1:5].long().tolist()]
            ids = [table_ids(row) for row in table[:, IDS_COLS].tolist()]
            behind.hold(
                step, epoch, batch, labels, shapes, table[:, 0].tolist(), w, b, clock() - t0, ids
            )  # fmt: skip

        place = Place(env.rank, k, torch.device(device), labels[env.rank], mesh)
        state, raw = run_rank(
            engine.part, engine.slots, cfg, place, lambda step: True, lambda: not control.wait(), report,
            ready, pass_times=True,
        )  # fmt: skip
        behind.release(state.last_times)
        # 2. every rank's parameters (to show that they are identical, or which part each holds)
        (weights, bias), _ = engine.final(raw)  # the whole parameters as this rank has them
        finals: list[RankParams] = [None] * k
        dist.all_gather_object(finals, RankParams(labels[env.rank], weights, bias))
        if lead:
            value = final_value(finals)
            emit(Detail("final", value, "\n".join(final_lines(value))))
        if state.status == Status.STOPPED:
            state.message = control.stop_reason or Text("run.message.stopped_by_rank")
        elif state.status == Status.FINISHED:
            where = Text("cli.run.where.torchrun", ranks=Text.count("cli.count.rank", k))
            state.message = finished_message(state.steps, clock() - t0, control.paused_seconds, where)
    except Exception as exc:  # noqa: BLE001 - a failed rank ends with its message; torchrun sees the exit status
        behind.release(None)  # the last step taken, whose times no rank will share now
        state.status, state.message = Status.FAILED, describe_failure(exc)
        state.steps = behind.emitted  # run_rank's own count went with its exception
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    ended = RunEnded(state.status, state.message, state.steps, weights, bias, state.loss, clock() - t0)
    emit(ended)
    return ended
