"""`train_ddp`: DistributedDataParallel on cfg.workers spawned ranks: the engine's launcher, DDP's Engine."""

from __future__ import annotations

import time
from typing import Callable

from fitcore.config import FitConfig
from fitcore.devices import DevicePlan
from fitcore.engine.launcher import launch
from fitcore.engine.torchrun import train_torchrun
from fitcore.events import Event, RunEnded
from fitcore.strategies.ddp.rank import ENGINE
from fitcore.train import Control


def train_ddp(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
) -> RunEnded:
    """Fit y = X·W + b with DistributedDataParallel on cfg.workers spawned ranks; emit train()'s events.

    The engine's events (fitcore.engine.launcher.launch): RunStarted, Detail('group'), Detail('shards'), a
    Step per global step (a Replica per rank, the mean of the ranks' losses, rank 0's parameters, which are
    every rank's), Detail('memory'), Detail('final') and RunEnded, which is also returned.
    """
    return launch(cfg, on_event, control, clock, plan, ENGINE)


def torchrun_ddp(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    plan: DevicePlan | None = None,
) -> RunEnded:
    """One rank of a torchrun launch of DDP (its record's `torchrun`): the engine's torchrun side, DDP's
    Engine."""
    return train_torchrun(cfg, on_event, control, plan=plan, engine=ENGINE)
