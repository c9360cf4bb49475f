"""The spawned ranks of every ranked strategy: the parent's TCP store on loopback, K processes, the gate.

`launch(cfg, ..., engine)` serves the store, starts K ranks with torch.multiprocessing (spawn, forked from
fitcore.engine.warmstart's server), allows each step as Control permits (pause, pace, time limit), and turns
the ranks' reports, typed messages on one queue, into events. What the ranks run and how their reports read is
the strategy's `Engine` (DDP's, FSDP's and TP's are in their packages); nothing here knows one of them.
"""

from __future__ import annotations

import os
import queue as queue_module
import signal
import threading
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fitcore.core.config import FitConfig
from fitcore.core.data import least_squares, make_data
from fitcore.core.devices import DevicePlan, parse_devices
from fitcore.core.errors import Text
from fitcore.core.events import Detail, Event, RunEnded, Status, run_started
from fitcore.core.i18n import count, current, set_language, t
from fitcore.core.shards import epoch_shards, epoch_value, row_shards, shards_value
from fitcore.core.train import Control, describe_failure, finished_message
from fitcore.engine import warmstart
from fitcore.engine.contract import Engine, Failed, Final, Ready, StepReport, engine_of
from fitcore.engine.loop import Place, run_rank
from fitcore.engine.rank import (
    COLLECTIVE_TIMEOUT,
    IDS_COLS,
    RankParams,
    final_value,
    group_value,
    rank_label,
    rank_step,
    ranks_phases,
    run_mesh,
    table_ids,
)
from fitcore.engine.spawn import HOST, join_group, loopback_store
from fitcore.protocols.mesh import Mesh
from fitcore.runs.console import final_lines, group_line, shard_lines
from fitcore.runs.recording import GROUP

START_TIMEOUT = 180.0  # seconds for every rank to import torch and join the process group
JOIN_TIMEOUT = 10.0  # seconds ranks get to end by themselves before they are terminated
SHARDS_EVERY = 1.0  # seconds between updates of the latest epoch's shards
AHEAD = 1  # steps allowed before the previous one is reported: 1 is lockstep, so pause acts after one step


# ---------------------------------------------------------------------------------------------------------
# The rank's side.


class _Gate:
    """The steps the parent allows: one permit per rank and step, and a stop flag.

    A rank takes a step when it gets a permit, even if stop came after; it ends when it finds stop set and
    no permit. The parent sets stop only after its last permits, so every rank takes the same steps.
    Semaphores, not a multiprocessing Condition: notifying a Condition waits for every sleeper to wake,
    and a killed rank never does.
    """

    def __init__(self, ctx, world_size: int):
        self._permits = [ctx.Semaphore(0) for _ in range(world_size)]
        self._stopped = ctx.Value("b", 0, lock=False)

    def allow(self) -> None:
        """Allow every rank one more step."""
        for permit in self._permits:
            permit.release()

    def stop(self) -> None:
        self._stopped.value = 1

    def wait_for(self, rank: int, parent_pid: int) -> bool:
        """Block until this rank may take its next step (True) or must end (False)."""
        permit = self._permits[rank]
        while not permit.acquire(timeout=0.25):
            if self._stopped.value:
                return permit.acquire(block=False)  # a step allowed before the stop is still taken
            if os.getppid() != parent_pid:  # the parent is gone: end rather than linger
                return False
        return True


def _worker(rank, cfg, mesh, port, out, gate, parent_pid, lang, engine) -> None:
    """One spawned rank: join the process group through the parent's store, train, report, leave."""
    set_language(lang)  # the words a rank makes (its Details' lines) in the parent's language
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops every rank
    try:
        from torch.multiprocessing import _prctl_pr_set_pdeathsig

        _prctl_pr_set_pdeathsig(signal.SIGTERM)  # end with the parent, even if it is killed
    except (ImportError, AttributeError):
        pass
    warmstart.leave_server()  # the parent is the forkserver, which ends with this run's caller
    world_size, backend = mesh.world_size, mesh.backend
    try:
        device = torch.device(mesh.devices[rank])
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        label = rank_label(rank, mesh.devices[rank], backend)
        join_group(backend, rank, world_size, port, START_TIMEOUT, COLLECTIVE_TIMEOUT)  # on loopback

        def report(step, epoch, batch, table, value, raw, times, sent=()):
            rows, cols, out_rows, out_cols = table[rank, 1:5].long().tolist()
            weights, bias = engine.step_params(rank, raw)
            shapes = (rows, cols), (out_rows, out_cols)
            ids = table_ids(table[rank, IDS_COLS].tolist())
            extra = engine.step_extra(rank, raw, step)
            shared = (value, weights, bias, ids, times, sent, extra)
            out.put(StepReport(rank, step, epoch, batch, *shapes, *shared))

        state, raw = run_rank(
            engine.part,
            engine.slots,
            cfg,
            Place(rank, world_size, device, label, mesh),
            lambda step: gate.wait_for(rank, parent_pid),
            lambda: False,
            report,
            lambda: out.put(Ready(rank, label, os.getpid())),
        )
        params, extra = engine.final(raw)
        out.put(Final(rank, state.status, state.message, state.steps, RankParams(label, *params), extra))
    except Exception as exc:
        out.put(Failed(rank, describe_failure(exc)))
        raise  # start_processes records the traceback and the exit status
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------------
# The parent's side.


class _RankFailed(Exception):
    """A rank raised or died; the message (a Text, args[0]) says which and why."""

    @property
    def message(self) -> Text:
        return self.args[0]


class _Launch:
    """The parent's side of a spawned run: the store, the ranks, the gate and the events."""

    def __init__(self, cfg, on_event, control, clock, t0, engine: Engine):
        self.cfg, self.on_event, self.control, self.clock, self.t0 = cfg, on_event, control, clock, t0
        self.engine = engine
        self.itemsize = 0
        self.layout = engine.layout(cfg)
        self.k = cfg.workers
        self.shard_of = row_shards(cfg.mesh_dims, self.k)  # each rank's shard of the rows (its dp coordinate)
        self.store = self.procs = self.queue = self.gate = self.granter = None
        self.mesh: Mesh | None = None  # the run's mesh, made once the devices are placed
        self.port: int | None = None
        self.steps, self.loss = 0, None
        self.weights, self.bias = (), float("nan")
        self.labels: tuple[str, ...] = ()
        self._specs: dict = {}  # what the ranks sent -> every rank's phase specs, built once each
        self.pids: list[int] = []
        self._progress = threading.Condition()
        self._completed = 0  # steps every rank has reported
        self._closing = False
        self._errors: dict[int, Text] = {}  # rank -> its own failure message
        self._shards_first: dict | None = None
        self._shards_epoch, self._shards_at = 0, 0.0

    # -- the run ------------------------------------------------------------------------------------
    def run(self, plan: DevicePlan) -> tuple[Status, Text]:
        cfg, k = self.cfg, self.k
        # 1. the reference and the placement, in the parent
        self.mesh = mesh = run_mesh(cfg, plan)  # made once per run, passed down to every rank
        backend, devices = mesh.backend, mesh.devices
        X, y = make_data(cfg)  # (N, d), (N, 1)
        lstsq_w, lstsq_b = least_squares(X, y)
        itemsize = X.element_size()
        del X, y

        # 2. the store on a loopback port, then K ranks, forked from a server that has imported torch
        self.store, self.port = loopback_store(START_TIMEOUT)
        ctx = warmstart.context()
        self.queue, self.gate = ctx.Queue(), _Gate(ctx, k)
        args = (
            cfg, mesh, self.port, self.queue, self.gate, warmstart.server_pid(), current(), self.engine,
        )  # fmt: skip
        self.procs = mp.start_processes(
            _worker, args, nprocs=k, join=False, daemon=True, start_method=ctx.get_start_method()
        )
        self.pids = self.procs.pids()
        started = self.clock()

        # 3. every rank in the process group
        labels = [None] * k
        while None in labels:
            if self.control.stopped:
                return Status.STOPPED, Text("run.message.while_starting", reason=self.control.stop_reason)
            if self.clock() - started > START_TIMEOUT:
                raise _RankFailed(Text("run.message.not_joined", seconds=f"{START_TIMEOUT:g}"))
            msg = self._receive()
            if isinstance(msg, Ready):
                labels[msg.rank] = msg.label
        self.labels = tuple(labels)
        self.itemsize = itemsize
        startup = self.clock() - started
        self.t0 = self.clock()  # like train(), time the training, not the seconds the ranks took to start
        key = f"cli.{self.engine.words}.header.{'cpu' if backend == 'gloo' else 'gpu'}"
        header = t(key, processes=count("count.process", k), backend=backend)
        self.on_event(run_started(cfg, self.labels, header, self.layout.steps_per_epoch, (lstsq_w, lstsq_b)))
        self._emit_group(backend, devices, startup)
        self._update_shards(1)

        # 4. steps: the granter thread allows them as Control permits; this thread turns reports into events
        self.granter = threading.Thread(target=self._grant, name="fitcore-gate", daemon=True)
        self.granter.start()
        return self._collect()

    def _emit_group(self, backend: str, devices, startup: float) -> None:
        value = group_value(
            self.layout, backend, (HOST, self.port), "spawned with torch.multiprocessing", devices,
            self.labels, {"pids": list(self.pids)}, startup_seconds=startup,
        )  # fmt: skip
        self.on_event(Detail(GROUP, value, group_line(value)))

    def _update_shards(self, epoch: int, force: bool = False) -> None:
        """Detail('shards'): the first epoch once, the latest at most every SHARDS_EVERY seconds."""
        now = self.clock()
        if not self.engine.split.rows:  # every rank takes the whole batch: there are no row shards
            return
        if epoch == self._shards_epoch or (
            not force and self._shards_first and now - self._shards_at < SHARDS_EVERY
        ):
            return
        cfg = self.cfg
        # DistributedSampler over the rows' dimension (dp): the ranks of one tp group take the same shard
        shards = epoch_shards(cfg.data_size, self.layout.world_size, cfg.shuffle, cfg.seed, epoch)
        latest = epoch_value(self.layout, self.labels, epoch, shards, self.shard_of)
        text = ""
        if self._shards_first is None:
            self._shards_first = latest
        value = shards_value(cfg, self.layout, self.labels, self._shards_first, latest)
        if epoch == 1:
            text = "\n".join(shard_lines(value, "first"))
        self._shards_epoch, self._shards_at = epoch, now
        self.on_event(Detail("shards", value, text))

    def _grant(self) -> None:
        """Allow step s once step s - 1 is reported and Control lets it run (pause, pace, time limit)."""
        total = self.cfg.epochs * self.layout.steps_per_epoch
        for step in range(1, total + 1):
            with self._progress:
                while self._completed < step - AHEAD and not self._closing:
                    self._progress.wait(0.1)
            if self._closing:
                return
            if not self.control.wait():
                self.gate.stop()
                return
            if self._closing:
                return
            self.gate.allow()

    def _collect(self) -> tuple[Status, Text]:
        """Turn the ranks' reports into Step events until every rank has sent its final parameters."""
        pending: dict[int, dict[int, StepReport]] = {}  # step -> rank -> its report
        finals: dict[int, Final] = {}
        while len(finals) < self.k:
            msg = self._receive()
            if msg is None:
                if self._exited():
                    missing = sorted(set(range(self.k)) - set(finals))
                    raise _RankFailed(f"ranks {missing} exited without reporting their parameters")
                continue
            if isinstance(msg, StepReport):
                pending.setdefault(msg.step, {})[msg.rank] = msg
                while len(pending.get(self.steps + 1, ())) == self.k:
                    self._emit_step(pending.pop(self.steps + 1))
            elif isinstance(msg, Final):
                finals[msg.rank] = msg
        # every rank has ended its loop: let them leave the process group and exit
        self._join(JOIN_TIMEOUT)
        if self.steps:
            self._update_shards(self._shards_epoch_of(self.steps), force=True)
        ordered = [finals[r] for r in range(self.k)]
        for detail in self.engine.details(self.cfg, self.labels, ordered):
            self.on_event(detail)
        value = final_value([m.params for m in ordered])
        self.on_event(Detail("final", value, "\n".join(final_lines(value))))
        self.weights, self.bias = tuple(ordered[0].params.weights), ordered[0].params.bias
        statuses = {m.status for m in ordered}
        if Status.DIVERGED in statuses:
            return Status.DIVERGED, next(m.message for m in ordered if m.status == Status.DIVERGED)
        if Status.STOPPED in statuses or self.steps < self.cfg.epochs * self.layout.steps_per_epoch:
            return Status.STOPPED, self.control.stop_reason or Text("run.message.stopped_plain")
        where = Text(f"cli.run.where.{self.engine.words}", processes=Text.count("count.process", self.k))
        return Status.FINISHED, finished_message(
            self.steps, self.clock() - self.t0, self.control.paused_seconds, where
        )

    def _shards_epoch_of(self, step: int) -> int:
        return (step - 1) // self.layout.steps_per_epoch + 1

    def _emit_step(self, reports: dict[int, StepReport]) -> None:
        msgs = [reports[r] for r in range(self.k)]
        first = msgs[0]
        if first.epoch != self._shards_epoch:
            self._update_shards(first.epoch)
        key = tuple((m.sent, m.input_shape) for m in msgs)  # the bytes measured, or the shapes they follow
        specs = self._specs.get(key)
        if specs is None:
            d = self.cfg.n_features
            specs = self._specs[key] = self.engine.specs(self.labels, d, self.itemsize, msgs, self.mesh)
        weights, bias = self.engine.weights(msgs)
        event = rank_step(
            first.step, first.epoch, first.batch, self.labels,
            [(m.input_shape, m.output_shape) for m in msgs], [m.loss for m in msgs],
            weights, bias, self.clock() - self.t0, [m.ids for m in msgs],
            ranks_phases(specs, [m.times for m in msgs]), self.engine.split,
            [self.mesh.coords(r) for r in range(self.k)],
        )  # fmt: skip
        self.steps, self.loss = event.step, event.loss
        self.weights, self.bias = event.weights, event.bias
        self.on_event(event)
        for detail in self.engine.step_details(self.cfg, self.labels, msgs):
            self.on_event(detail)
        with self._progress:
            self._completed = event.step
            self._progress.notify_all()

    # -- the ranks as processes ---------------------------------------------------------------------
    def _receive(self, timeout: float = 0.05):
        """The next report, or None; raises _RankFailed as soon as a rank reports an error or dies."""
        try:
            msg = self.queue.get(timeout=timeout)
        except queue_module.Empty:
            self._exited()
            return None
        if isinstance(msg, Failed):
            self._errors[msg.rank] = msg.message
            raise _RankFailed(self._root_cause(msg.rank))
        return msg

    def _exited(self) -> bool:
        """True once every rank has exited; raises _RankFailed if one exited badly."""
        try:
            return self.procs.join(timeout=0, grace_period=2)  # ends the other ranks after a failure
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            self._read_errors()
            raise _RankFailed(self._describe(exc.error_index)) from None

    def _root_cause(self, rank: int) -> Text:
        """A rank whose peer died fails too, with a connection error: name the peer that died first."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            dead = [
                i for i, p in enumerate(self.procs.processes) if i != rank and p.exitcode not in (None, 0)
            ]
            if dead:
                self._read_errors()
                return Text("run.message.then", first=self._describe(dead[0]), then=self._describe(rank))
            time.sleep(0.05)
        return self._describe(rank)

    def _read_errors(self) -> None:
        try:
            while True:
                msg = self.queue.get_nowait()
                if isinstance(msg, Failed):
                    self._errors[msg.rank] = msg.message
        except (queue_module.Empty, OSError, ValueError):
            pass

    def _describe(self, rank: int) -> Text:
        """The rank's own error message if it sent one, else how its process ended."""
        if rank in self._errors:
            return Text("run.message.rank_failed", rank=rank, error=self._errors[rank])
        process = self.procs.processes[rank]
        code = process.exitcode
        if code is not None and code < 0:
            try:
                why = Text("run.message.signal", name=signal.Signals(-code).name)
            except ValueError:
                why = Text("run.message.signal", name=str(-code))
        else:
            why = Text("run.message.exit_code", code=str(code))
        return Text("run.message.rank_ended", rank=rank, pid=process.pid, why=why)

    def _join(self, timeout: float) -> None:
        """Wait for the ranks to exit, reading the queue so none blocks on a full pipe; end stragglers."""
        if self.procs is None:
            return
        deadline = time.monotonic() + timeout
        processes = self.procs.processes
        while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
            self._drain()
            for p in processes:
                p.join(0.05)
        for p in processes:
            if p.is_alive():
                p.terminate()
        for p in processes:
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join()

    def _drain(self) -> None:
        try:
            while True:
                self.queue.get_nowait()
        except (queue_module.Empty, OSError, ValueError):
            pass

    def close(self) -> None:
        """End everything this run started: the gate thread, the ranks, the queue and the store's port."""
        with self._progress:
            self._closing = True
            self._progress.notify_all()
        if self.granter is not None:  # first, so that no step is allowed after the stop below
            self.granter.join(0.5)
            if self.granter.is_alive():  # paused or pacing inside Control.wait: the run is over
                self.control.stop(Text("run.message.ended"))
                self.granter.join(2)
        if self.gate is not None:
            self.gate.stop()
        if self.procs is not None:
            self._join(JOIN_TIMEOUT)
            for path in self.procs.error_files:
                if path and os.path.exists(path):
                    os.unlink(path)
        if self.queue is not None:
            self.queue.close()
            self.queue.join_thread()
        self.store = None  # the store's server closes its socket, freeing the port


def launch(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
    engine: Engine | None = None,
) -> RunEnded:
    """Fit y = X·W + b on cfg.workers spawned ranks that run `engine`, the strategy's own by default (its
    record's `ranks(cfg)`); emit train()'s events. It is every ranked strategy's trainer.

    Emits RunStarted, Detail('group') (the process group), Detail('shards') (each rank's dataset rows, for
    the first and the latest epoch), one Step per global step (a Replica per rank, the mean of the ranks'
    losses, the step's parameters as the engine joins them), the engine's own Details, Detail('final')
    (every rank's parameters) and RunEnded, which is also returned. The config must already be validated.

    .. warning::
        Starting the ranks takes seconds: each spawned process imports torch. Control is honoured between
        steps, for every rank at once; a rank that raises or dies ends the run as failed, and every rank
        has exited, and the store's port is closed, before RunEnded is emitted.
    """
    control = control or Control()
    t0 = clock()
    launch = _Launch(cfg, on_event, control, clock, t0, engine or engine_of(cfg))
    try:
        status, message = launch.run(plan or parse_devices(cfg.devices))
    except _RankFailed as exc:
        status, message = Status.FAILED, exc.message
    except Exception as exc:  # noqa: BLE001 - a failed run must end with its message
        status, message = Status.FAILED, describe_failure(exc)
    finally:
        launch.close()
    ended = RunEnded(
        status, message, launch.steps, launch.weights, launch.bias, launch.loss, clock() - launch.t0
    )
    on_event(ended)
    return ended
