"""The ddp strategy: torch's DistributedDataParallel, one process per rank, each with its own data shard.

`train_ddp` starts K = cfg.workers ranks with torch.multiprocessing (spawn) on 127.0.0.1 and emits the same
events as fitcore.train.train; `train_torchrun` is one rank of a run that torchrun launched (one machine or
several). Both run the same loop, `_train_rank`:

  1. every rank builds the same data and the same initial parameters from the seed;
  2. a DistributedSampler(num_replicas=K, rank, shuffle, seed, drop_last=False) gives each rank its shard of
     ceil(N / K) rows per epoch (padded by repeating the first indices of the epoch's order, so all shards are
     the same length), and `set_epoch(epoch - 1)` draws a fresh order each epoch;
  3. each rank takes ceil(batch_size / K) rows of its shard per step, so the global batch is K times that:
     batch_size when K divides it, up to K - 1 rows more otherwise (DDP needs equal steps on every rank);
  4. forward and the loss on the rank's own rows only; backward, during which DDP all-reduces (averages)
     the gradients; then the same optimizer step everywhere, so the parameters stay identical.

Because every rank has the same number of rows at every step, the averaged gradient is the gradient of the
mean loss over the global batch: DDP matches single-process training on the concatenated rows.
"""

from __future__ import annotations

import math
import os
import queue as queue_module
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

from fitcore.config import MAX_WORKERS, ConfigError, FitConfig, validate
from fitcore.console import size
from fitcore.data import least_squares, make_data
from fitcore.devices import DevicePlan, parse_devices
from fitcore.parallel import LinearModel, ShapeRecorder, init_parameters
from fitcore.train import (
    DIVERGED,
    FAILED,
    FINISHED,
    STOPPED,
    Control,
    Detail,
    Event,
    Replica,
    RunEnded,
    RunStarted,
    Step,
    _describe_failure,
    _make_optimizer,
)

HOST = "127.0.0.1"  # spawned ranks talk over loopback only
MAX_SHARD_INDICES = 5000  # dataset indices kept per rank and epoch in Detail('shards'); counts stay exact
START_TIMEOUT = 180.0  # seconds for every rank to import torch and join the process group
COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a collective waiting longer than this fails its rank
JOIN_TIMEOUT = 10.0  # seconds ranks get to end by themselves before they are terminated
SHARDS_EVERY = 1.0  # seconds between updates of the latest epoch's shards
AHEAD = 1  # steps allowed before the previous one is reported: 1 is lockstep, so pause acts after one step

EXPLAIN_MARKDOWN = """\
**DataParallel** (`nn.DataParallel`) is *one process* driving several devices with threads. On every
forward call it **scatters** the batch from device 0 (`tensor.chunk(K)`), **replicates** the model onto
every device (again on every step), runs the replicas in parallel threads and **gathers** their outputs back
onto device 0, where the loss is computed. In backward the replicas' gradients are summed onto the one
model on device 0, and one optimizer step updates it. Device 0 does extra work every step, and the threads
share one Python interpreter.

**DistributedDataParallel** (`DistributedDataParallel`, the `ddp` strategy) is *one process per device*
(a *rank*). Each rank builds its own copy of the model once; DDP broadcasts rank 0's parameters when it
wraps the model, so all copies start equal. Each rank reads **its own shard** of the data: a
`DistributedSampler` deals the epoch's order out round-robin, `ceil(N / K)` rows per rank, repeating the
first rows of the order to pad the last shards when `N` does not divide by `K` (those rows count twice
that epoch). Each rank runs forward and its loss on its own rows only: **nothing is scattered and no
output is gathered**. During backward, DDP **all-reduces** the gradients (in buckets, overlapping with
the rest of backward), so every rank gets the same averaged gradient and takes the same optimizer step:
the parameters stay identical without ever being copied again.

Here each rank takes `ceil(batch size / K)` rows of its shard per step, so a step's global batch is `K`
times that; with equal rows on every rank the averaged gradient is the gradient of the mean loss over the
global batch, and DDP learns what one process would learn on the same rows.
"""


# ---------------------------------------------------------------------------------------------------------
# How an epoch is cut: shards per rank, rows per step.


@dataclass(frozen=True)
class Layout:
    """How DDP cuts an epoch of `data_size` rows over `world_size` ranks with a global `batch_size`."""

    data_size: int
    world_size: int
    batch_size: int  # the configured global batch

    @property
    def rows_per_rank(self) -> int:
        """DistributedSampler's num_samples with drop_last=False: every shard has this many rows."""
        return math.ceil(self.data_size / self.world_size)

    @property
    def padding(self) -> int:
        """Rows repeated each epoch so that every shard is rows_per_rank long."""
        return self.rows_per_rank * self.world_size - self.data_size

    @property
    def per_rank_batch(self) -> int:
        """Rows each rank takes per step: K of them come as close to batch_size as equal parts allow."""
        return math.ceil(self.batch_size / self.world_size)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.rows_per_rank / self.per_rank_batch)

    def local_rows(self, batch: int) -> int:
        """Rows each rank takes at the 1-based `batch` of an epoch (the last one may be smaller)."""
        return min(self.per_rank_batch, self.rows_per_rank - (batch - 1) * self.per_rank_batch)

    @classmethod
    def of(cls, cfg: FitConfig) -> "Layout":
        return cls(cfg.data_size, cfg.workers, cfg.batch_size)


def epoch_shards(data_size: int, world_size: int, shuffle: bool, seed: int, epoch: int) -> list[list[int]]:
    """Each rank's dataset indices for the 1-based `epoch`, from DistributedSampler itself."""
    shards = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            range(data_size), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=False
        )
        sampler.set_epoch(epoch - 1)
        shards.append(list(sampler))
    return shards


def _epoch_value(layout: Layout, labels, epoch: int, shards: list[list[int]]) -> dict:
    """One epoch's shards as plain data; entry i of a shard is position rank + i * K of the padded order."""
    k, n = layout.world_size, layout.data_size
    ranks, repeated = [], []
    for rank, shard in enumerate(shards):
        padded = [index for i, index in enumerate(shard) if rank + i * k >= n]
        repeated += [(rank + i * k, index) for i, index in enumerate(shard) if rank + i * k >= n]
        ranks.append(
            {
                "rank": rank,
                "device": labels[rank],
                "count": len(shard),
                "first": shard[0],
                "last": shard[-1],
                "indices": shard[:MAX_SHARD_INDICES],
                "truncated": len(shard) > MAX_SHARD_INDICES,
                "padded": padded,
            }
        )
    return {
        "epoch": epoch,
        "set_epoch": epoch - 1,
        "ranks": ranks,
        "repeated": [index for _, index in sorted(repeated)],  # the padding, in the order it was appended
    }


def shards_value(cfg: FitConfig, layout: Layout, labels, first: dict, latest: dict) -> dict:
    """Detail('shards').value: the sampler's rule, and the first and the latest epoch's shards."""
    return {
        "data_size": layout.data_size,
        "world_size": layout.world_size,
        "rows_per_rank": layout.rows_per_rank,
        "total_size": layout.rows_per_rank * layout.world_size,
        "padding": layout.padding,
        "shuffle": cfg.shuffle,
        "seed": cfg.seed,
        "drop_last": False,
        "per_rank_batch": layout.per_rank_batch,
        "steps_per_epoch": layout.steps_per_epoch,
        "first": first,
        "latest": latest,
    }


def _preview(indices: list[int], most: int = 8) -> str:
    head = ", ".join(map(str, indices[:most]))
    return f"[{head}, ...]" if len(indices) > most else f"[{head}]"


def shard_lines(value: dict, which: str = "first") -> list[str]:
    """Console lines: which dataset rows each rank got in the first (or latest) epoch."""
    epoch = value[which]
    lines = [
        f"Epoch {epoch['epoch']} shards (DistributedSampler, set_epoch({epoch['set_epoch']}), "
        f"shuffle={value['shuffle']}): {value['data_size']} rows, {value['rows_per_rank']} per rank"
        + (f", {value['padding']} repeated to pad: {epoch['repeated']}" if value["padding"] else "")
    ]
    for r in epoch["ranks"]:
        pad = f" (padded with {r['padded']})" if r["padded"] else ""
        lines.append(f"\t[{r['device']}] rows {_preview(r['indices'])}{pad}")
    return lines


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


# ---------------------------------------------------------------------------------------------------------
# Where the ranks run.


def placement(cfg: FitConfig, plan: DevicePlan, world_size: int | None = None) -> tuple[str, tuple[str, ...]]:
    """The backend and each local rank's device: gloo on the CPU, nccl with one GPU per rank.

    For ddp, `cpu` and `virtual:K` both mean K = cfg.workers CPU processes; `cuda`/`cuda:i,j` need exactly
    one rank per listed GPU.
    """
    k = cfg.workers if world_size is None else world_size
    if plan.kind != "cuda":
        return "gloo", ("cpu",) * k
    if k != len(plan.device_ids):
        raise ConfigError(
            "workers", k, f"{len(plan.device_ids)}: one process per GPU in devices {plan.spec} for ddp"
        )
    return "nccl", tuple(f"cuda:{i}" for i in plan.device_ids)


def rank_label(rank: int, device: str, backend: str) -> str:
    return f"rank {rank} · {device} · {backend}"


# ---------------------------------------------------------------------------------------------------------
# Console lines.


def rank_line(replica: Replica) -> str:
    """The tutorial's `In Model:` line, as one rank prints it from inside its forward."""
    return (
        f"\t[{replica.device}] In Model: input size {size(replica.input_shape)} "
        f"output size {size(replica.output_shape)}"
    )


def global_line(step: Step) -> str:
    """What the step did over all ranks: there is no gathered output, only the all-reduced gradients."""
    return (
        f"All ranks: input size {size(step.input_shape)} over {len(step.replicas)} ranks, no gather; "
        f"mean loss: {step.loss:.6g}, gradients all-reduced  (epoch {step.epoch}, step {step.step})"
    )


def step_lines(step: Step) -> list[str]:
    return [rank_line(r) for r in step.replicas] + [global_line(step)]


def _vector(values) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def final_value(finals: list[tuple[str, tuple[float, ...], float]]) -> dict:
    """Detail('final').value from each rank's (label, weights, bias): are they identical?"""
    params = [tuple(w) + (b,) for _, w, b in finals]
    diff = max((abs(a - b) for p in params[1:] for a, b in zip(params[0], p)), default=0.0)
    return {
        "ranks": [
            {"rank": r, "device": label, "weights": list(w), "bias": b}
            for r, (label, w, b) in enumerate(finals)
        ],
        "identical": all(p == params[0] for p in params),
        "max_abs_diff": diff,
    }


def final_lines(value: dict) -> list[str]:
    lines = [f"\t[{r['device']}] W = {_vector(r['weights'])}  b = {r['bias']:.4f}" for r in value["ranks"]]
    same = (
        "identical on every rank"
        if value["identical"]
        else f"NOT identical (largest difference {value['max_abs_diff']:.3g})"
    )
    return ["Parameters per rank after the last step: " + same] + lines


# ---------------------------------------------------------------------------------------------------------
# One rank's loop, shared by the spawned ranks and by torchrun's.


@dataclass
class _RankState:
    status: str = FINISHED
    message: str = ""
    steps: int = 0
    loss: float | None = None


def _params(raw: LinearModel) -> tuple[tuple[float, ...], float]:
    return tuple(raw.fc.weight.detach().view(-1).tolist()), raw.fc.bias.item()


def _train_rank(
    cfg: FitConfig,
    rank: int,
    world_size: int,
    device: torch.device,
    label: str,
    wait_turn: Callable[[int], bool],
    want_stop: Callable[[], bool],
    report: Callable[[int, int, int, torch.Tensor, float, LinearModel], None],
    ready: Callable[[], None] = lambda: None,
) -> tuple[_RankState, LinearModel]:
    """Train this rank's replica in the process group already initialised; return how it ended.

    Args:
        wait_turn: called before each step; False ends the run at once (the spawned ranks' gate, which
            every rank sees the same).
        want_stop: this rank's wish to stop; all ranks share theirs with the loss, so they stop together.
        report: called after each step with (step, epoch, batch, table, local loss, model), where table
            (K, 6) holds every rank's [loss, input rows, input cols, output rows, output cols, stop].
        ready: called once the model, DDP and the optimizer exist (the first optimizer of a process costs
            seconds), just before the first step.
    """
    state = _RankState()
    # 1. the same data and initial parameters on every rank, from the seed
    X, y = make_data(cfg, device)  # (N, d), (N, 1)
    recorder = ShapeRecorder()
    raw = LinearModel(cfg.n_features, recorder)
    init_parameters(raw, cfg.seed + 1)
    raw.device_label = label
    raw.to(device)
    model = DistributedDataParallel(raw, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = _make_optimizer(cfg, model.parameters())
    sampler = DistributedSampler(
        TensorDataset(X, y), num_replicas=world_size, rank=rank, shuffle=cfg.shuffle, seed=cfg.seed,
        drop_last=False,
    )  # fmt: skip
    layout = Layout(cfg.data_size, world_size, cfg.batch_size)
    ready()

    # 2. each step: forward on this rank's rows, share losses and stop wishes, backward (all-reduce), step
    for epoch in range(1, cfg.epochs + 1):
        sampler.set_epoch(epoch - 1)
        shard = torch.tensor(list(sampler), dtype=torch.long, device=device)  # (rows_per_rank,)
        for batch, idx in enumerate(shard.split(layout.per_rank_batch), 1):
            if not wait_turn(state.steps + 1):
                state.status = STOPPED
                return state, raw
            xb, yb = X[idx], y[idx]  # (b, d), (b, 1): this rank's rows only
            out = model(xb)  # (b, 1); DDP does not gather it anywhere
            loss = F.mse_loss(out, yb)
            value = loss.item()
            (seen,) = recorder.take()
            mine = torch.tensor(
                [value, *seen.input_shape, *seen.output_shape, float(want_stop())],
                dtype=torch.float64,
                device=device,
            )
            gathered = [torch.empty_like(mine) for _ in range(world_size)]
            dist.all_gather(gathered, mine)
            table = torch.stack(gathered).cpu()  # (K, 6), the same on every rank
            mean = table[:, 0].mean().item()
            if table[:, 5].any():
                state.status = STOPPED
                return state, raw
            if not math.isfinite(mean):
                state.status, state.message = (
                    DIVERGED,
                    (
                        f"the loss became {mean} at step {state.steps + 1} (epoch {epoch}); "
                        f"the learning rate {cfg.lr:g} is too high for this data"
                    ),
                )
                return state, raw
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here, averaging them over the ranks
            optimizer.step()
            state.steps, state.loss = state.steps + 1, mean
            report(state.steps, epoch, batch, table, value, raw)
    return state, raw


# ---------------------------------------------------------------------------------------------------------
# The spawned ranks (train_ddp).


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


def _loopback_interface() -> str | None:
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


def _worker(rank, cfg, world_size, backend, devices, port, out, gate, parent_pid) -> None:
    """One spawned rank: join the process group through the parent's store, train, report, leave."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops every rank
    try:
        from torch.multiprocessing import _prctl_pr_set_pdeathsig

        _prctl_pr_set_pdeathsig(signal.SIGTERM)  # end with the parent, even if it is killed
    except (ImportError, AttributeError):
        pass
    lo = _loopback_interface()
    if lo:  # the ranks' own connections stay on loopback too
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = lo
    try:
        device = torch.device(devices[rank])
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        label = rank_label(rank, devices[rank], backend)
        store = dist.TCPStore(HOST, port, is_master=False, timeout=timedelta(seconds=START_TIMEOUT))
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT
        )

        def report(step, epoch, batch, table, value, raw):
            shapes = table[rank, 1:5].long().tolist()
            weights, bias = _params(raw) if rank == 0 else (None, None)
            out.put(
                ("step", rank, step, epoch, batch, tuple(shapes[:2]), tuple(shapes[2:]), value, weights, bias)
            )

        state, raw = _train_rank(
            cfg,
            rank,
            world_size,
            device,
            label,
            lambda step: gate.wait_for(rank, parent_pid),
            lambda: False,
            report,
            lambda: out.put(("ready", rank, label, os.getpid())),
        )
        weights, bias = _params(raw)
        out.put(("final", rank, state.status, state.message, state.steps, weights, bias))
    except Exception as exc:
        out.put(("error", rank, _describe_failure(exc)))
        raise  # start_processes records the traceback and the exit status
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _loopback_store() -> tuple[dist.TCPStore, int]:
    """The process group's TCPStore, served by the parent on a free port of 127.0.0.1 only.

    TCPStore binds every interface when given a port; handing it a socket already bound to loopback keeps
    it there, and picking the port with that socket leaves no race for it. The store closes the socket.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    fd = sock.detach()
    try:
        store = dist.TCPStore(
            HOST, port, None, True, timedelta(seconds=START_TIMEOUT), wait_for_workers=False,
            master_listen_fd=fd,
        )  # fmt: skip
    except Exception:
        os.close(fd)
        raise
    return store, port


class _RankFailed(Exception):
    """A rank raised or died; the message says which and why."""


class _Launch:
    """The parent's side of a spawned run: the store, the ranks, the gate and the events."""

    def __init__(self, cfg, on_event, control, clock, t0):
        self.cfg, self.on_event, self.control, self.clock, self.t0 = cfg, on_event, control, clock, t0
        self.layout = Layout.of(cfg)
        self.k = cfg.workers
        self.store = self.procs = self.queue = self.gate = self.granter = None
        self.port: int | None = None
        self.steps, self.loss = 0, None
        self.weights, self.bias = (), float("nan")
        self.labels: tuple[str, ...] = ()
        self.pids: list[int] = []
        self._progress = threading.Condition()
        self._completed = 0  # steps every rank has reported
        self._closing = False
        self._errors: dict[int, str] = {}  # rank -> its own failure message
        self._shards_first: dict | None = None
        self._shards_epoch, self._shards_at = 0, 0.0

    # -- the run ------------------------------------------------------------------------------------
    def run(self, plan: DevicePlan) -> tuple[str, str]:
        cfg, k = self.cfg, self.k
        # 1. the reference and the placement, in the parent
        backend, devices = placement(cfg, plan)
        X, y = make_data(cfg)  # (N, d), (N, 1)
        lstsq_w, lstsq_b = least_squares(X, y)
        del X, y

        # 2. the store on a loopback port, then K ranks (spawn: each imports torch afresh)
        self.store, self.port = _loopback_store()
        ctx = mp.get_context("spawn")
        self.queue, self.gate = ctx.Queue(), _Gate(ctx, k)
        args = (cfg, k, backend, devices, self.port, self.queue, self.gate, os.getpid())
        self.procs = mp.start_processes(
            _worker, args, nprocs=k, join=False, daemon=True, start_method="spawn"
        )
        self.pids = self.procs.pids()
        started = self.clock()

        # 3. every rank in the process group
        labels = [None] * k
        while None in labels:
            if self.control.stopped:
                return STOPPED, self.control.stop_reason + " while the ranks were starting"
            if self.clock() - started > START_TIMEOUT:
                raise _RankFailed(f"the ranks did not join the process group within {START_TIMEOUT:g} s")
            msg = self._receive()
            if msg is not None and msg[0] == "ready":
                labels[msg[1]] = msg[2]
        self.labels = tuple(labels)
        startup = self.clock() - started
        self.t0 = self.clock()  # like train(), time the training, not the seconds the ranks took to start
        self.on_event(
            RunStarted(
                cfg,
                self.labels,
                False,
                False,
                f"Using DistributedDataParallel: {k} process{'es' if k > 1 else ''}, backend {backend}"
                + (" on the CPU." if backend == "gloo" else " with one GPU each."),
                cfg.epochs * self.layout.steps_per_epoch,
                self.layout.steps_per_epoch,
                lstsq_w,
                lstsq_b,
            )
        )
        self._emit_group(backend, devices, startup)
        self._update_shards(1)

        # 4. steps: the granter thread allows them as Control permits; this thread turns reports into events
        self.granter = threading.Thread(target=self._grant, name="fitcore-ddp-gate", daemon=True)
        self.granter.start()
        return self._collect()

    def _emit_group(self, backend: str, devices, startup: float) -> None:
        lay = self.layout
        value = {
            "backend": backend,
            "world_size": self.k,
            "master_addr": HOST,
            "master_port": self.port,
            "launcher": "spawned with torch.multiprocessing",
            "devices": list(devices),
            "labels": list(self.labels),
            "pids": list(self.pids),
            "rows_per_rank": lay.rows_per_rank,
            "padding": lay.padding,
            "per_rank_batch": lay.per_rank_batch,
            "global_batch": lay.per_rank_batch * self.k,
            "steps_per_epoch": lay.steps_per_epoch,
            "startup_seconds": startup,
        }
        self.on_event(Detail("ddp", value, group_line(value)))

    def _update_shards(self, epoch: int, force: bool = False) -> None:
        """Detail('shards'): the first epoch once, the latest at most every SHARDS_EVERY seconds."""
        now = self.clock()
        if epoch == self._shards_epoch or (
            not force and self._shards_first and now - self._shards_at < SHARDS_EVERY
        ):
            return
        cfg = self.cfg
        shards = epoch_shards(cfg.data_size, self.k, cfg.shuffle, cfg.seed, epoch)
        latest = _epoch_value(self.layout, self.labels, epoch, shards)
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

    def _collect(self) -> tuple[str, str]:
        """Turn the ranks' reports into Step events until every rank has sent its final parameters."""
        pending: dict[int, dict[int, tuple]] = {}
        finals: dict[int, tuple] = {}
        while len(finals) < self.k:
            msg = self._receive()
            if msg is None:
                if self._exited():
                    missing = sorted(set(range(self.k)) - set(finals))
                    raise _RankFailed(f"ranks {missing} exited without reporting their parameters")
                continue
            if msg[0] == "step":
                pending.setdefault(msg[2], {})[msg[1]] = msg
                while len(pending.get(self.steps + 1, ())) == self.k:
                    self._emit_step(pending.pop(self.steps + 1))
            elif msg[0] == "final":
                finals[msg[1]] = msg
        # every rank has ended its loop: let them leave the process group and exit
        self._join(JOIN_TIMEOUT)
        if self.steps:
            self._update_shards(self._shards_epoch_of(self.steps), force=True)
        ordered = [finals[r] for r in range(self.k)]
        value = final_value([(self.labels[r], m[5], m[6]) for r, m in enumerate(ordered)])
        self.on_event(Detail("final", value, "\n".join(final_lines(value))))
        self.weights, self.bias = tuple(ordered[0][5]), ordered[0][6]
        statuses = {m[2] for m in ordered}
        if DIVERGED in statuses:
            return DIVERGED, next(m[3] for m in ordered if m[2] == DIVERGED)
        if STOPPED in statuses or self.steps < self.cfg.epochs * self.layout.steps_per_epoch:
            return STOPPED, self.control.stop_reason or "stopped"
        return FINISHED, (
            f"finished {self.steps} steps in {self.clock() - self.t0:.2f} s on {self.k} processes "
            f"(DistributedDataParallel)"
        )

    def _shards_epoch_of(self, step: int) -> int:
        return (step - 1) // self.layout.steps_per_epoch + 1

    def _emit_step(self, reports: dict[int, tuple]) -> None:
        msgs = [reports[r] for r in range(self.k)]
        replicas, start = [], 0
        for r, m in enumerate(msgs):
            rows = m[5][0]
            replicas.append(Replica(self.labels[r], start, start + rows, m[5], m[6], loss=m[7]))
            start += rows
        step, epoch, batch = msgs[0][2:5]
        if epoch != self._shards_epoch:
            self._update_shards(epoch)
        d = msgs[0][5][1]
        loss = sum(m[7] for m in msgs) / self.k  # the mean of the ranks' losses
        self.steps, self.loss = step, loss
        self.weights, self.bias = tuple(msgs[0][8]), msgs[0][9]
        self.on_event(
            Step(
                step,
                epoch,
                batch,
                loss,
                (start, d),  # every rank's rows together; no tensor of this shape exists (no gather)
                (start, msgs[0][6][1]),
                tuple(replicas),
                self.weights,
                self.bias,
                self.clock() - self.t0,
            )
        )
        with self._progress:
            self._completed = step
            self._progress.notify_all()

    # -- the ranks as processes ---------------------------------------------------------------------
    def _receive(self, timeout: float = 0.05):
        """The next report, or None; raises _RankFailed as soon as a rank reports an error or dies."""
        try:
            msg = self.queue.get(timeout=timeout)
        except queue_module.Empty:
            self._exited()
            return None
        if msg[0] == "error":
            self._errors[msg[1]] = msg[2]
            raise _RankFailed(self._root_cause(msg[1]))
        return msg

    def _exited(self) -> bool:
        """True once every rank has exited; raises _RankFailed if one exited badly."""
        try:
            return self.procs.join(timeout=0, grace_period=2)  # ends the other ranks after a failure
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            self._read_errors()
            raise _RankFailed(self._describe(exc.error_index)) from None

    def _root_cause(self, rank: int) -> str:
        """A rank whose peer died fails too, with a connection error: name the peer that died first."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            dead = [
                i for i, p in enumerate(self.procs.processes) if i != rank and p.exitcode not in (None, 0)
            ]
            if dead:
                self._read_errors()
                return f"{self._describe(dead[0])} (then {self._describe(rank)})"
            time.sleep(0.05)
        return self._describe(rank)

    def _read_errors(self) -> None:
        try:
            while True:
                msg = self.queue.get_nowait()
                if msg[0] == "error":
                    self._errors[msg[1]] = msg[2]
        except (queue_module.Empty, OSError, ValueError):
            pass

    def _describe(self, rank: int) -> str:
        """The rank's own error message if it sent one, else how its process ended."""
        if rank in self._errors:
            return f"rank {rank} failed: {self._errors[rank]}"
        process = self.procs.processes[rank]
        code = process.exitcode
        if code is not None and code < 0:
            try:
                why = f"signal {signal.Signals(-code).name}"
            except ValueError:
                why = f"signal {-code}"
        else:
            why = f"exit code {code}"
        return f"rank {rank} (pid {process.pid}) ended with {why}"

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
                self.control.stop("the run has ended")
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


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text


def group_line(value: dict) -> str:
    """The console line about the process group and how each step is cut."""
    return (
        f"Process group: {value['world_size']} ranks, backend {value['backend']}, "
        f"{value['master_addr']}:{value['master_port']} ({value['launcher']}); each rank takes "
        f"{value['per_rank_batch']} of its {value['rows_per_rank']} rows per step, "
        f"{value['steps_per_epoch']} step{'s' if value['steps_per_epoch'] != 1 else ''} per epoch, "
        f"global batch {value['global_batch']}"
    )


def train_ddp(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
) -> RunEnded:
    """Fit y = X·W + b with DistributedDataParallel on cfg.workers spawned ranks; emit train()'s events.

    Emits RunStarted, Detail('ddp') (the process group), Detail('shards') (each rank's dataset rows, for
    the first and the latest epoch), one Step per global step (a Replica per rank, the mean of the ranks'
    losses, rank 0's parameters), Detail('final') (every rank's parameters) and RunEnded, which is also
    returned. The config must already be validated.

    .. warning::
        Starting the ranks takes seconds: each spawned process imports torch. Control is honoured between
        steps, for every rank at once; a rank that raises or dies ends the run as failed, and every rank
        has exited, and the store's port is closed, before RunEnded is emitted.
    """
    control = control or Control()
    t0 = clock()
    launch = _Launch(cfg, on_event, control, clock, t0)
    try:
        status, message = launch.run(plan or parse_devices(cfg.devices))
    except _RankFailed as exc:
        status, message = FAILED, str(exc)
    except Exception as exc:  # noqa: BLE001 - a failed run must end with its message
        status, message = FAILED, _describe_failure(exc)
    finally:
        launch.close()
    ended = RunEnded(
        status, message, launch.steps, launch.weights, launch.bias, launch.loss, clock() - launch.t0
    )
    on_event(ended)
    return ended


# ---------------------------------------------------------------------------------------------------------
# One rank of a torchrun launch (python -m fitcore under torchrun).


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
        raise ConfigError("torchrun environment", given, "integers") from None


def config_for_torchrun(cfg: FitConfig, env: TorchrunEnv, workers_given: bool = False) -> FitConfig:
    """Validate cfg for one rank of a torchrun launch; return it with workers = the world size.

    The devices are checked per machine (one GPU per local rank for cuda); the world size, which torchrun
    sets, must be at most the data size.
    """
    if workers_given and cfg.workers != env.world_size:
        raise ConfigError(
            "workers", cfg.workers, f"{env.world_size} (torchrun's WORLD_SIZE), or leave --workers out"
        )
    local = replace(cfg, workers=min(env.local_world_size, MAX_WORKERS))
    validate(local)
    if env.world_size > cfg.data_size:
        raise ConfigError("workers", env.world_size, f"at most the data size ({cfg.data_size}) ranks")
    return replace(cfg, workers=env.world_size)


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
) -> RunEnded:
    """Be one rank of a run torchrun launched: init_process_group from the environment and train.

    Rank 0 emits the events (with every rank's shapes and losses, which the ranks share each step);
    the other ranks emit nothing. Every rank returns its RunEnded. cfg.workers must be the world size
    (config_for_torchrun).
    """
    control = control or Control()
    env = env or torchrun_env()
    if env is None:
        raise RuntimeError("train_torchrun needs torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
    plan = plan or parse_devices(cfg.devices)
    lead = env.rank == 0
    emit = on_event if lead else (lambda event: None)
    t0 = clock()  # reset once the model and optimizer exist: time the training, as train() does
    k, layout = env.world_size, Layout(cfg.data_size, env.world_size, cfg.batch_size)
    backend = "nccl" if plan.kind == "cuda" else "gloo"
    device = f"cuda:{plan.device_ids[env.local_rank]}" if backend == "nccl" else "cpu"
    state, raw = _RankState(status=FAILED), None
    weights, bias = (), float("nan")
    try:
        if backend == "nccl":
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group(
            backend, init_method="env://", rank=env.rank, world_size=k, timeout=COLLECTIVE_TIMEOUT
        )
        # 1. who is where: every rank's label, host and pid, once
        me = (rank_label(env.rank, device, backend), socket.gethostname(), os.getpid())
        everyone: list = [None] * k
        dist.all_gather_object(everyone, me)
        labels = tuple(e[0] for e in everyone)
        if lead:
            X, y = make_data(cfg)
            lstsq_w, lstsq_b = least_squares(X, y)
            del X, y
            emit(
                RunStarted(
                    cfg, labels, False, False,
                    f"Using DistributedDataParallel under torchrun: {k} ranks, backend {backend}.",
                    cfg.epochs * layout.steps_per_epoch, layout.steps_per_epoch, lstsq_w, lstsq_b,
                )
            )  # fmt: skip
            group = {
                "backend": backend,
                "world_size": k,
                "master_addr": env.master_addr,
                "master_port": env.master_port,
                "launcher": "launched by torchrun",
                "devices": [e[0].split(" · ")[1] for e in everyone],
                "labels": list(labels),
                "hosts": [e[1] for e in everyone],
                "pids": [e[2] for e in everyone],
                "rows_per_rank": layout.rows_per_rank,
                "padding": layout.padding,
                "per_rank_batch": layout.per_rank_batch,
                "global_batch": layout.per_rank_batch * k,
                "steps_per_epoch": layout.steps_per_epoch,
            }
            emit(Detail("ddp", group, group_line(group)))
            first = _epoch_value(layout, labels, 1, epoch_shards(cfg.data_size, k, cfg.shuffle, cfg.seed, 1))
            shards = shards_value(cfg, layout, labels, first, first)
            emit(Detail("shards", shards, "\n".join(shard_lines(shards, "first"))))

        def ready():
            nonlocal t0
            t0 = clock()

        def report(step, epoch, batch, table, value, model):
            if not lead:
                return
            replicas, start = [], 0
            for r in range(k):
                rows, cols, out_rows, out_cols = table[r, 1:5].long().tolist()
                replicas.append(Replica(labels[r], start, start + rows, (rows, cols), (out_rows, out_cols)))
                start += rows
            w, b = _params(model)
            loss = table[:, 0].mean().item()
            shape_in, shape_out = (start, cols), (start, out_cols)  # every rank's rows together
            emit(Step(step, epoch, batch, loss, shape_in, shape_out, tuple(replicas), w, b, clock() - t0))

        state, raw = _train_rank(
            cfg, env.rank, k, torch.device(device), labels[env.rank], lambda step: True,
            lambda: not control.wait(), report, ready,
        )  # fmt: skip
        # 2. every rank's parameters, to show that they are identical
        weights, bias = _params(raw)
        finals: list = [None] * k
        dist.all_gather_object(finals, (labels[env.rank], weights, bias))
        if lead:
            value = final_value(finals)
            emit(Detail("final", value, "\n".join(final_lines(value))))
        if state.status == STOPPED:
            state.message = control.stop_reason or "stopped by another rank"
        elif state.status == FINISHED:
            state.message = f"finished {state.steps} steps in {clock() - t0:.2f} s on {k} ranks (torchrun)"
    except Exception as exc:  # noqa: BLE001 - a failed rank ends with its message; torchrun sees the exit status
        state.status, state.message = FAILED, _describe_failure(exc)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    ended = RunEnded(state.status, state.message, state.steps, weights, bias, state.loss, clock() - t0)
    emit(ended)
    return ended
