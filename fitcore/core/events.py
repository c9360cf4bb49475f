"""What a training run emits, for every strategy: RunStarted, one Step per optimizer step, Detail, RunEnded.

Trainers (each in its package of fitcore.strategies) only emit these; the
runner, the command line and the page consume them. Every value is a plain Python number, string or tuple
(`.item()` already called), so an event can be kept, compared and sent between processes; a run's message is
a fitcore.core.errors.Text, its catalog key and fields, put into words by whoever shows it.

Replica and Step are NamedTuples, made on every step; the others, made once a run, are frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from fitcore.core.phases import StepPhases

if TYPE_CHECKING:
    from fitcore.core.config import FitConfig
    from fitcore.core.errors import Text


class Status(str, Enum):
    """Where a run stands. A str, so that it equals "finished", prints as "finished" and is JSON text."""

    QUEUED = "queued"  # waiting for a free slot in the pool
    RUNNING = "running"
    PAUSED = "paused"  # between two steps, until resumed
    FINISHED = "finished"  # every step taken
    STOPPED = "stopped"  # by the user, a time limit, a closed page or Ctrl-C
    DIVERGED = "diverged"  # the loss stopped being a finite number
    FAILED = "failed"  # an exception, or a DDP rank that raised or died

    __str__ = str.__str__  # "finished", not "Status.FINISHED", in f-strings and print
    __format__ = str.__format__

    @property
    def active(self) -> bool:
        """Not yet ended: queued, running or paused."""
        return self in ACTIVE


ACTIVE = (Status.QUEUED, Status.RUNNING, Status.PAUSED)


MAX_IDS = 8  # the dataset row ids a replica's (or rank's) part of a step names: those of its first rows


class Replica(NamedTuple):
    """One replica's (or rank's) share of a step: rows [start, stop) of the batch, its shapes, and its columns
    [lo, hi) of X where it holds only some (tensor parallelism: every rank the whole batch, its features)."""

    device: str  # its label as shown: "virtual:0 (emulated on CPU)", "cuda:1", "rank 1 · cpu · gloo"
    start: int  # first row of the batch this replica got
    stop: int  # one past its last row
    input_shape: tuple[int, ...]  # (rows, d): what its forward was given (the tutorial's `In Model:`)
    output_shape: tuple[int, ...]  # (rows, 1): what its forward returned
    loss: float | None = None  # the replica's own MSE where it computes one (a DDP rank); DataParallel's
    # replicas only run forward, and the loss is computed once, on the gathered output
    ids: tuple[int, ...] = ()  # dataset row ids of its first rows (MAX_IDS at most): where its rows came from
    columns: tuple[int, int] | None = None  # its features [lo, hi) of X; None: all of them

    @property
    def rows(self) -> int:
        return self.stop - self.start


class Step(NamedTuple):
    """Emitted after every optimizer step."""

    step: int  # 1-based, over the whole run
    epoch: int  # 1-based
    batch: int  # 1-based within the epoch
    loss: float  # MSE of this batch before the step (DDP: the mean of the ranks' losses)
    input_shape: tuple[int, ...]  # (B, d): the batch, the tutorial's `Outside: input size`
    output_shape: tuple[int, ...]  # (B, 1): the gathered output (DDP: every rank's rows, never gathered)
    replicas: tuple[Replica, ...]  # one per replica that got rows, in device order
    weights: tuple[float, ...]  # (d,) after the step
    bias: float  # after the step
    elapsed: float  # seconds since the first step could start
    phases: StepPhases | None = None  # what happened in the step, phase by phase and device by device:
    # its times and the bytes each phase moved (fitcore.core.phases); None where nothing records them


@dataclass(frozen=True)
class RunStarted:
    """Emitted once, after the data, the reference and the model exist."""

    config: FitConfig
    devices: tuple[str, ...]  # labels, one per replica or rank; emulated ones say so
    emulated: bool  # True for virtual:K, DataParallel emulated on the CPU
    data_parallel: bool  # True when the real torch.nn.DataParallel is in use
    header: str  # the first printed line: "Let's use 2 GPUs!", the emulation line, the DDP line
    total_steps: int  # epochs x batches_per_epoch
    batches_per_epoch: int  # optimizer steps per epoch
    lstsq_weights: tuple[float, ...]  # (d,) the exact least-squares answer for the data
    lstsq_bias: float


@dataclass(frozen=True)
class RunEnded:
    """Emitted once, last: how the run ended and what it learned."""

    status: Status  # finished, stopped, diverged or failed
    message: Text  # why, in a sentence: a catalog key and its fields, put into words where it is shown
    steps: int  # steps completed
    weights: tuple[float, ...]  # (d,) learned; () if the model never existed
    bias: float  # learned; nan if the model never existed
    final_loss: float | None  # the last step's loss; None before any step
    elapsed: float  # seconds


@dataclass(frozen=True)
class Detail:
    """Strategy-specific information (DDP's shards, say): kept in Snapshot.extra[key], printed by the CLI."""

    key: str  # "ddp" (the process group), "shards" (each rank's rows), "final" (each rank's parameters)
    value: object  # plain Python data, JSON-ready
    text: str = ""  # lines for the console; empty prints nothing


Event = RunStarted | Step | RunEnded | Detail


def run_started(
    cfg: FitConfig,
    devices: tuple[str, ...],
    header: str,
    batches_per_epoch: int,
    lstsq: tuple[tuple[float, ...], float],
    emulated: bool = False,
    data_parallel: bool = False,
) -> RunStarted:
    """The RunStarted of a run of cfg whose epochs have `batches_per_epoch` steps; lstsq is (W, b)."""
    lstsq_weights, lstsq_bias = lstsq
    return RunStarted(
        cfg,
        tuple(devices),
        emulated,
        data_parallel,
        header,
        cfg.epochs * batches_per_epoch,
        batches_per_epoch,
        tuple(lstsq_weights),
        lstsq_bias,
    )
