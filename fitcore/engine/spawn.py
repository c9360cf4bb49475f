"""Ranks spawned on loopback: the engine's one way of starting processes that form a process group.

The parent serves the group's TCPStore on a free port of 127.0.0.1 (`loopback_store`); each rank keeps its
own connections on loopback and joins through that store (`join_group`). The training launcher
(fitcore.engine.launcher) starts its ranks this way with its gate and its events; a bare run that only
wants each rank's report at its end (the lab's DDP on gloo, DDP's SyncBatchNorm check on nccl) calls
`run_spawned`, which bounds the whole run and terminates any rank still alive at its deadline.
"""

from __future__ import annotations

import os
import queue as queue_module
import socket
import time
from datetime import timedelta
from typing import Any, Callable, NamedTuple

import torch.distributed as dist
import torch.multiprocessing as mp

HOST = "127.0.0.1"  # spawned ranks talk over loopback only


def loopback_interface() -> str | None:
    """The loopback interface's name ("lo" on Linux, "lo0" on macOS), if the machine has one."""
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


def loopback_store(timeout: float) -> tuple[dist.TCPStore, int]:
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
            HOST, port, None, True, timedelta(seconds=timeout), wait_for_workers=False,
            master_listen_fd=fd,
        )  # fmt: skip
    except Exception:
        os.close(fd)
        raise
    return store, port


def join_group(backend: str, rank: int, world: int, port: int, start: float, timeout: timedelta) -> None:
    """One rank's side: keep its own connections on loopback, reach the parent's store within `start`
    seconds and join the default process group, whose collectives fail after `timeout`."""
    lo = loopback_interface()
    if lo:
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = lo
    store = dist.TCPStore(HOST, port, is_master=False, timeout=timedelta(seconds=start))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


class Spawned(NamedTuple):
    """A bare run's reports, by rank; the ranks that never reported were terminated at the bound."""

    reports: dict[int, Any]
    terminated: tuple[int, ...]
    seconds: float  # wall time of the whole run, the ranks' start included
    bound: float  # the seconds it was allowed


def run_spawned(target: Callable[..., None], args: tuple, world: int, bound: float, start: float) -> Spawned:
    """Spawn `world` ranks, each running `target(rank, world, port, out, *args)` and putting one report on
    `out` whose first item is its rank; collect them until every rank has reported, every rank has ended,
    or `bound` seconds have passed; then terminate any rank still alive. `start`: the store's wait for them.
    """
    store, port = loopback_store(start)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, world, port, out, *args), daemon=True) for r in range(world)]
    t0 = time.monotonic()
    deadline = t0 + bound
    reports: dict[int, Any] = {}
    try:
        for p in procs:
            p.start()
        while len(reports) < world and time.monotonic() < deadline:
            try:
                report = out.get(timeout=0.2)
                reports[report[0]] = report
            except queue_module.Empty:
                if not any(p.is_alive() for p in procs) and out.empty():
                    break  # a rank died without a word: nothing more will come
    finally:
        terminated = []
        for r, p in enumerate(procs):
            if p.pid is None:  # never started: a failure to start the others
                continue
            p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
                terminated.append(r)
        del store
    return Spawned(reports, tuple(terminated), time.monotonic() - t0, bound)
