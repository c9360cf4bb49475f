"""A warm start for the ranks of a process strategy: a forkserver that has imported torch and fitcore once.

A spawned rank starts a fresh interpreter: it imports torch, then torch._dynamo, which DDP's constructor and
torch.optim's first optimizer import (about 1.3 s of a 2-core CPU at rest, far more under load), before its
first step; K ranks on 2 cores pay it K times at once. The forkserver pays it once, in one process started
the first time it is asked for, and forks every rank of every later run from that process: a rank starts
in milliseconds with everything imported, and is still a process of its own, with its own interpreter
state from the fork on.

Why a forkserver and not fork: forking the caller (a Streamlit server, with many threads, some holding
locks) would copy it in the middle of whatever its other threads do. The server is started clean, by
fork and exec of a fresh interpreter (multiprocessing's spawnv_passfds), and only imports modules: it
runs no Python thread and no torch op, so every fork of it copies a process at rest. Its one native
thread is numpy's OpenBLAS server, idle, which OpenBLAS's own fork handler stops and restarts; a torch op
there could have started torch's intra-op (OpenMP) threads, which a forked rank would lack but believe it
had.

Its lifetime is the caller's: the server holds the read end of a pipe whose write end this process holds
(each rank lets go of its copy, leave_server), and exits when it reads the end of the pipe, however this
process ends, even killed; a rank forked from it has the server as its parent, and ends with it (the
ranks' parent-death signal). Between runs it waits, idle, for the next one.

.. warning::
    A rank forked from the server has the server's environment and modules, as they were when the server
    started: environment variables set later in this process do not reach it (the ranks get everything
    they need as arguments), and neither do changes to fitcore's code until this process restarts.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from multiprocessing import forkserver
from types import ModuleType

from fitcore.protocols import registry

START_METHOD = "forkserver"
# What the server imports once: torch, torch._dynamo (what the first DistributedDataParallel and the first
# optimizer import), the profiler (the first optimizer step's), DDP itself, and each process strategy's
# trainer package, which imports its rank's module.
TORCH_MODULES = ("torch", "torch.distributed", "torch._dynamo", "torch.profiler", "torch.nn.parallel")

_lock = threading.Lock()


def preload() -> list[str]:
    """The modules the server imports before its first fork."""
    trainers = [m for s in registry.STRATEGIES.values() for m in s.preload]
    return [*TORCH_MODULES, *trainers, *main_imports()]


def main_imports() -> list[str]:
    """The modules the caller's main script took names from (the `streamlit` command: streamlit.web.cli).

    multiprocessing runs a main script again in every process it starts from a path, forked from the server
    as when spawned (Python's "__main__" preload never reaches the server: it asks for a key, main_path,
    that its own preparation data does not have); with these imported, that run costs nothing.
    """
    main = sys.modules.get("__main__")
    names = []
    for key, value in vars(main).items() if main is not None else ():
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if not key.startswith("__") and isinstance(name, str) and name != main.__name__ and name not in names:
            names.append(name)
    return names


def context() -> multiprocessing.context.BaseContext:
    """The forkserver context, its server started (once per process) with preload()'s modules.

    Returns at once: the server imports in the background, and the first rank asked of it waits for that.
    """
    ctx = multiprocessing.get_context(START_METHOD)
    with _lock:
        ctx.set_forkserver_preload(preload())  # read by a server starting, ignored by one already running
        forkserver.ensure_running()  # starts it, or starts it again if it died
    return ctx


def start() -> None:
    """Start the server now, so that its imports are done before a run asks for its first rank."""
    context()


def server_pid() -> int | None:
    """The server's process id (the parent of every rank it forks), or None before it is started."""
    return forkserver._forkserver._forkserver_pid  # multiprocessing keeps it on its one ForkServer


def leave_server() -> None:
    """In a rank, first thing: let go of the server's "alive" pipe, which every fork of the server inherits.

    The server ends when no process holds the pipe's write end: held by the ranks too, a killed caller would
    leave the server and its ranks (whose parent it is) running. Let go of, the server ends with the
    caller, and its ranks with the server. Does nothing in a process the server did not fork.
    """
    server = forkserver._forkserver
    if forkserver.get_inherited_fds() is not None and server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
