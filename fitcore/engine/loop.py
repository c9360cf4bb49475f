"""The one rank loop of every ranked strategy: each step's phases as small named calls, in the order a rank
takes them; what differs between DDP, FSDP and TP is the strategy's `RankPart`.

A step on one rank:

  1. wait for the step's turn (the spawned ranks' gate; torchrun's ranks never wait);
  2. load this rank's part of the batch (its rows, or its columns, as its part says);
  3. forward, through the strategy's wrapper (DDP, fully_shard, RowwiseParallel), and the loss;
  4. share the losses, the shapes and the stop wishes with every rank (one all-gather: share_step), so that
     all ranks stop, or find the loss diverged, at the same step;
  5. backward, where the wrapper's collectives run (DDP's all-reduce, FSDP's reduce-scatter);
  6. the optimizer's step on what this rank holds, then report the step.

A pipeline (fitcore.strategies.pp) runs 3 and 5 as one: its schedule interleaves the microbatches' forwards
and backwards, so its part's `forward_loss` runs the whole schedule and its `backward` has nothing left to do.

The loop only reads the clock's slots START, LOADED, LOSS_END, BACKWARD_END and OPTIMIZER_END
(fitcore.core.phases); a part marks its own (its collectives', its forward's end) with the `mark` it is given.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from fitcore.core.config import FitConfig
from fitcore.core.data import make_data
from fitcore.core.events import MAX_IDS, Status
from fitcore.core.phases import BACKWARD_END, LOADED, LOSS_END, OPTIMIZER_END, START
from fitcore.core.shards import Layout
from fitcore.core.train import diverged_message
from fitcore.engine.rank import (
    LOSS_COL,
    STOP_COL,
    RankState,
    gather_times,
    previous_times,
    rank_clock,
    share_step,
)
from fitcore.protocols.mesh import DP, Mesh


class Mark(Protocol):
    """Marks a slot of the rank's clock: now, or on the host's clock `at` a time the part read before (a
    pipeline's zero, shared by its ranks on one machine: fitcore.strategies.pp.rank); a GPU's only now."""

    def __call__(self, slot: int, at: float | None = None) -> None: ...


H = TypeVar("H")  # what a strategy's rank holds (its model, its shards)
H_co = TypeVar("H_co", covariant=True)


class Place(NamedTuple):
    """Where one rank runs: its rank in the group, the group's size, its device and its label, and the run's
    mesh (made once per run, fitcore.protocols.mesh), from which a part takes torch's DeviceMesh and its
    dimension."""

    rank: int
    world_size: int
    device: torch.device
    label: str
    mesh: Mesh

    @property
    def coords(self) -> dict[str, int]:
        """This rank's coordinate along each of the mesh's dimensions."""
        return self.mesh.coords(self.rank)


class Shapes(NamedTuple):
    """This rank's shapes in a step, as share_step sends them."""

    input_shape: tuple[int, ...]  # (b, d) of its rows, or (B, columns) of its columns
    output_shape: tuple[int, ...]  # (b, 1), or (B, 1)


class RankPart(Protocol[H_co]):
    """What a strategy's rank does inside the loop: its wrapped model, its batches, its collectives' record.

    A part is made on its rank (`PartMaker`), after the process group exists, and lives for the loop.
    """

    optimizer: torch.optim.Optimizer  # of what this rank holds

    @property
    def holds(self) -> H_co:
        """What the rank holds, as its Engine's report and final functions read it."""
        ...

    def batches(self, epoch: int) -> Iterable[torch.Tensor]:
        """This rank's dataset row ids of each of the epoch's steps, in order (its rows, or every row)."""
        ...

    def inputs(
        self, X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
        """The model's input and the targets of rows `idx`, and the shape of what this rank holds of them."""
        ...

    def forward_loss(self, x: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's output on this rank, whose shape it reports, and the step's loss, whose value it
        shares: the wrapped model's forward (its collectives run here where it has forward ones, FSDP's
        all-gather, TP's all-reduce of the partial outputs) and the MSE (WholeForward's); a pipeline's whole
        schedule, backward included."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """The loss's backward, where the wrapper's gradient collectives run (nothing left for a pipeline)."""
        ...

    def begin_step(self) -> None:
        """Reset what the part records per step (before START)."""
        ...

    def end_backward(self) -> None:
        """After backward: mark what did not run this step (FSDP's collectives on one rank)."""
        ...

    def end_early(self) -> None:
        """The loop ends before backward (a stop, a diverged loss): leave the model as a step would."""
        ...

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        """The bytes this rank's collectives sent in the step, as measured (none where the engine's specs
        give them, DDP's)."""
        ...


class WholeForward:
    """forward_loss and backward of a part whose every rank runs a forward of the whole batch it took (DDP,
    FSDP, TP): its own `forward`, then the MSE of its output; backward from that loss."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_loss(self, x: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.forward(x)
        return out, F.mse_loss(out, yb)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()


def sampler_batches(cfg: FitConfig, place: Place, epoch: int) -> Iterator[torch.Tensor]:
    """The batches of a rank that takes its own rows (DDP's, FSDP's): its shard of the epoch, as
    DistributedSampler deals it over the mesh's `dp` dimension (reshuffled by set_epoch), cut into the
    per-rank batch. The ranks of one `tp` group share their `dp` coordinate, so they take the same rows."""
    ranks = place.mesh.size(DP)
    sampler = DistributedSampler(
        range(cfg.data_size), num_replicas=ranks, rank=place.coords.get(DP, 0), shuffle=cfg.shuffle,
        seed=cfg.seed, drop_last=False,
    )  # fmt: skip
    sampler.set_epoch(epoch - 1)
    shard = torch.tensor(list(sampler), dtype=torch.long, device=place.device)  # (rows_per_rank,)
    return iter(shard.split(Layout(cfg.data_size, ranks, cfg.batch_size).per_rank_batch))


def own_rows(
    X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """The inputs of a rank that takes its own rows: X's and y's rows `idx`, (b, d) and (b, 1)."""
    xb = X[idx]
    return xb, y[idx], tuple(xb.shape)


# (cfg, place, mark) -> the rank's part: a module-level function or a functools.partial of one, so that
# spawn can carry it to each rank inside the Engine
PartMaker = Callable[[FitConfig, Place, Mark], RankPart[H]]
# (step, epoch, batch, the shared table, this rank's loss, what it holds, its slot times, its bytes sent)
Report = Callable[[int, int, int, torch.Tensor, float, H, tuple[float, ...], tuple[int, ...]], None]


def run_rank(
    make_part: PartMaker[H],
    slots: int,
    cfg: FitConfig,
    place: Place,
    wait_turn: Callable[[int], bool],
    want_stop: Callable[[], bool],
    report: Report[H],
    ready: Callable[[], None] = lambda: None,
    pass_times: bool = False,
) -> tuple[RankState, H]:
    """Train this rank's part in the process group already initialised; return how it ended and what the
    rank holds.

    Args:
        make_part: the strategy's part maker (its Engine's `part`).
        slots: the time slots of one rank's step (its Engine's `slots`).
        wait_turn: called before each step; False ends the run at once (the spawned ranks' gate, which
            every rank sees the same).
        want_stop: this rank's wish to stop; all ranks share theirs with the loss, so they stop together.
        report: called after each step with (step, epoch, batch, table, local loss, holds, times, sent),
            where table (K, 14) holds every rank's [loss, input shape, output shape, stop, its first MAX_IDS
            dataset row ids padded with -1] (and, with pass_times, its times of the step before) and times
            are this rank's slot times in seconds from its own START.
        ready: called once the part exists (the first optimizer of a process costs seconds), just before
            the first step.
        pass_times: also share each rank's times of a step, in the table of the step after it (zeros at a
            run's first step), and those of the last step in RankState.last_times once the loop ends by
            itself, the loss or a stop wish: for a launcher that hears the ranks through the lead rank alone
            (torchrun), at no extra collective per step.
    """
    state = RankState()
    X, y = make_data(cfg, place.device)  # (N, d), (N, 1): the same data on every rank, from the seed
    clock = rank_clock(place.device, slots)
    part = make_part(cfg, place, clock.mark)
    times = (0.0,) * slots
    ready()
    for epoch in range(1, cfg.epochs + 1):
        for batch, idx in enumerate(part.batches(epoch), 1):
            if not wait_turn(state.steps + 1):
                state.status = Status.STOPPED
                return state, part.holds
            part.begin_step()
            part.optimizer.zero_grad(set_to_none=True)  # before the step: a pipeline's backward is in it
            clock.mark(START)
            x, yb, held_shape = part.inputs(X, y, idx)
            clock.mark(LOADED)
            out, loss = part.forward_loss(x, yb)
            value = loss.item()
            seen = Shapes(held_shape, tuple(out.shape))
            ids = idx[:MAX_IDS].tolist()
            more = times if pass_times else ()
            table = share_step(value, seen, ids, want_stop(), place.device, place.world_size, more)
            mean = table[:, LOSS_COL].mean().item()  # the step's loss: the mean of every rank's
            if _ends_here(state, table, mean, epoch, cfg.lr):
                state.last_times = previous_times(table, pass_times, state.steps)
                part.end_early()
                return state, part.holds
            _backward_and_step(part, loss, clock.mark)
            times = _relative(clock.resolve(tuple(range(slots))))
            state.steps, state.loss = state.steps + 1, mean
            report(state.steps, epoch, batch, table, value, part.holds, times, part.sent(out))
    if pass_times and state.steps:  # the last step's times have no next step to travel with
        state.last_times = gather_times(times, place.device, place.world_size)
    return state, part.holds


def _ends_here(state: RankState, table: torch.Tensor, mean: float, epoch: int, lr: float) -> bool:
    """Does the run end at this step, before its backward: a rank wished to stop, or the mean loss of the
    ranks is not finite? Every rank reads the same table, so every rank ends at the same step."""
    if table[:, STOP_COL].any():
        state.status = Status.STOPPED
        return True
    if not math.isfinite(mean):
        state.status = Status.DIVERGED
        state.message = diverged_message(mean, state.steps + 1, epoch, lr)
        return True
    return False


def _backward_and_step(part: RankPart[object], loss: torch.Tensor, mark: Mark) -> None:
    """Backward (the wrapper's gradient collectives run inside it), then the optimizer on this rank's part."""
    mark(LOSS_END)  # the loss phase ends here: the step's loss is the ranks' mean, shared just before
    part.backward(loss)
    mark(BACKWARD_END)
    part.end_backward()
    part.optimizer.step()
    mark(OPTIMIZER_END)


def _relative(times: tuple[float, ...]) -> tuple[float, ...]:
    """A rank's slot times in seconds from its own START: what it sends, plain floats."""
    return tuple(t - times[START] for t in times)
