"""Real DistributedDataParallel on gloo for the lab's traps: K spawned CPU ranks on loopback, each given its
own list of optimizer steps, with a comm hook that counts every all-reduce and its bytes.

The lab's other DDP rows are simulated in one process; these two questions need a real run. Gradient
accumulation asks how many all-reduces `no_sync()` saves, which only DDP's reducer can answer, and uneven
inputs ask what the process group does when one rank runs out, which only a process group can show.

Every run is bounded: the ranks' collectives time out after `timeout_s`, and the parent terminates any rank
still alive at its deadline, so a rank left waiting never hangs the caller.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import nullcontext
from dataclasses import replace
from datetime import timedelta
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from fitcore.core.config import FitConfig
from fitcore.core.data import make_data
from fitcore.core.parallel import LinearModel, init_parameters
from fitcore.core.train import make_optimizer
from fitcore.engine.spawn import Spawned, join_group, run_spawned

ENGINE = "torch DDP on gloo"
START_BOUND = 90.0  # seconds for the spawned ranks to import torch and join, on a busy 2-core machine
REASON_CHARS = 240  # a rank's exception, cut to this many characters for a line


class RankJob(NamedTuple):
    """What every rank runs: its own optimizer steps, each a tuple of micro-batches of dataset row ids."""

    cfg: FitConfig  # the data, the seed of the initial parameters, the optimizer
    lr: float
    steps: tuple[tuple[tuple[tuple[int, ...], ...], ...], ...]  # steps[rank][step][micro] -> row ids
    reduction: str  # F.mse_loss(reduction=...)
    loss_scale: float  # each micro-batch's loss times this (1 / N to average N micro-batches)
    no_sync: bool  # model.no_sync() on every micro-batch but a step's last
    join: bool  # the loop inside torch.distributed.algorithms.Join
    timeout_s: float  # the process group's timeout: a collective waiting longer fails


class RankReport(NamedTuple):
    """What one rank tells the parent at its end."""

    rank: int
    status: str  # "finished" or "failed"
    steps_done: int
    step: int  # the 1-based step it was in when it failed; its last step when it finished
    reason: str  # the exception, "Type: message", when it failed
    per_step: tuple[tuple[float, ...], ...]  # its parameters after each of its steps (W's d entries, then b)
    calls: tuple[int, ...]  # all-reduces its comm hook saw during each step
    nbytes: tuple[int, ...]  # their bytes, during each step
    total_calls: int  # every all-reduce of the run, Join's shadow ones after its last step included
    total_bytes: int
    seconds: float  # from joining the group to its end
    waited: float  # seconds from the start of the step it failed in to the failure; 0 when it finished


def short_reason(exc: BaseException) -> str:
    """An exception in one line: its innermost message, without gloo's source locations."""
    text = str(exc).split("error when running the callback: ")[-1]
    text = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\] ", "", text).splitlines()[0] if text else ""
    if not re.match(r"\w+(Error|Exception): ", text):
        text = f"{type(exc).__name__}: {text}"
    return text.split(". ")[0][:REASON_CHARS]


class _Counter:
    """The comm hook's state: the all-reduces it has launched, and their bytes."""

    def __init__(self, group=None):
        self.calls = 0
        self.nbytes = 0
        self.group = group  # the process group DDP all-reduces on


def _counting_hook(state, bucket):  # no annotations: DDP rejects any but its own
    """DDP's default all-reduce (divide by K, then sum), counted."""
    buffer = bucket.buffer()
    state.calls += 1
    state.nbytes += buffer.numel() * buffer.element_size()
    return default_hooks.allreduce_hook(state.group, bucket)


def _flat(model: torch.nn.Module) -> tuple[float, ...]:
    return tuple(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist())


def _train(rank: int, job: RankJob, model, raw, counter: _Counter, done: list, began: list) -> None:
    """The rank's loop; `done` gets (params, calls, bytes) after each optimizer step, `began` its start."""
    X, y = make_data(job.cfg, torch.device("cpu"))
    optimizer = make_optimizer(replace(job.cfg, lr=job.lr), raw.parameters())
    for micro in job.steps[rank]:
        began.append(time.perf_counter())
        calls, nbytes = counter.calls, counter.nbytes
        optimizer.zero_grad(set_to_none=True)
        for j, ids in enumerate(micro):
            last = j == len(micro) - 1
            with model.no_sync() if job.no_sync and not last else nullcontext():
                idx = torch.tensor(ids, dtype=torch.long)
                loss = F.mse_loss(model(X[idx]), y[idx], reduction=job.reduction) * job.loss_scale
                loss.backward()  # the all-reduce runs here, unless no_sync() holds it back
        optimizer.step()
        done.append((_flat(raw), counter.calls - calls, counter.nbytes - nbytes))


def _rank_main(rank: int, world: int, port: int, out, job: RankJob) -> None:
    """One spawned rank: join the group through the parent's store, run its steps, report, leave."""
    torch.set_num_threads(1)
    done: list = []
    began: list = []
    counter = _Counter()
    t0 = time.perf_counter()
    status, reason = "finished", ""
    try:
        # the default group waits as long as the ranks' start may take; DDP's own group has the short timeout,
        # made once every rank is here, so that only a rank left waiting in training runs into it
        join_group("gloo", rank, world, port, START_BOUND, timedelta(seconds=START_BOUND))
        raw = LinearModel(job.cfg.n_features)
        init_parameters(raw, job.cfg.seed + 1)
        dist.barrier()
        group = dist.new_group(timeout=timedelta(seconds=job.timeout_s))
        t0 = time.perf_counter()
        model = DistributedDataParallel(raw, process_group=group)
        counter.group = group
        model.register_comm_hook(counter, _counting_hook)
        if job.join:
            from torch.distributed.algorithms.join import Join

            with Join([model]):
                _train(rank, job, model, raw, counter, done, began)
        else:
            _train(rank, job, model, raw, counter, done, began)
    except Exception as exc:  # noqa: BLE001 - a rank's failure is the lab's answer, sent to the parent
        status, reason = "failed", short_reason(exc)
    now = time.perf_counter()
    waited = now - began[-1] if status == "failed" and began else 0.0
    params, calls, nbytes = (tuple(column) for column in zip(*done)) if done else ((), (), ())
    step = len(done) + (status == "failed")
    report = RankReport(rank, status, len(done), step, reason, params, calls, nbytes, 0, 0, now - t0, waited)
    out.put(report._replace(total_calls=counter.calls, total_bytes=counter.nbytes))
    # leave at once once the report is flushed: tearing the group down waits on peers that may be gone
    out.close()
    out.join_thread()
    os._exit(0)


def per_step_calls(reports) -> tuple[int, int]:
    """All-reduces and their bytes in one optimizer step: the most any rank's comm hook saw in a step."""
    calls = max((c for rep in reports for c in rep.calls), default=0)
    nbytes = max((b for rep in reports for b in rep.nbytes), default=0)
    return calls, nbytes


def bound_for(job: RankJob) -> float:
    """The most a run may take: the ranks' start, then a collective's timeout twice over, then its steps."""
    steps = max(len(s) for s in job.steps)
    return START_BOUND + 2 * job.timeout_s + 0.05 * steps


def run_ranks(job: RankJob) -> Spawned:
    """Spawn one process per entry of job.steps on the engine's loopback launcher, run them to their end or
    the bound, and collect their RankReports by rank."""
    return run_spawned(_rank_main, (job,), len(job.steps), bound_for(job), START_BOUND)
