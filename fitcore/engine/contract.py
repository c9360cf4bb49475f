"""What a ranked strategy hands the engine, and what its ranks tell the parent.

`Engine` is a strategy's part of the engine (its `RankPart` maker for the one rank loop, its `Split`, how its
reports read); the reports are the typed messages a spawned rank puts on the parent's queue (`Ready`, a
`StepReport` a step, its `Final`, or `Failed`), with the readers most strategies share. Both launchers (the
spawned ranks of fitcore.engine.launcher, torchrun's of fitcore.engine.torchrun) read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from fitcore.config import FitConfig
from fitcore.engine.loop import PartMaker
from fitcore.engine.rank import RankParams
from fitcore.errors import Text
from fitcore.events import Detail, Status
from fitcore.shards import Layout
from fitcore.split import ROWS, Split

# ---------------------------------------------------------------------------------------------------------
# What a rank tells the parent, on the queue.


class Ready(NamedTuple):
    """The rank has joined the process group and built its model: it waits for its first step."""

    rank: int
    label: str
    pid: int


class StepReport(NamedTuple):
    """The rank has taken a step."""

    rank: int
    step: int  # 1-based, over the whole run
    epoch: int
    batch: int
    input_shape: tuple[int, int]  # (b, d): this rank's rows
    output_shape: tuple[int, int]  # (b, 1)
    loss: float  # this rank's own loss
    weights: tuple[float, ...] | None  # rank 0's parameters after the step; None from the other ranks
    bias: float | None
    ids: tuple[int, ...]  # the dataset row ids of its first rows (at most MAX_IDS)
    times: tuple[float, ...]  # its slot times (fitcore.phases), seconds from its own step start
    sent: tuple[int, ...] = ()  # bytes its collectives sent, where the engine measures them (FSDP)
    extra: dict | None = None  # what else the engine reports on this step (FSDP: its memory, on step 1)


class Final(NamedTuple):
    """The rank's loop has ended: how, and its parameters."""

    rank: int
    status: Status
    message: Text
    steps: int
    params: RankParams
    extra: dict = {}  # what else the engine reports at the end (FSDP: the rank's shard and memory)


class Failed(NamedTuple):
    """The rank raised; it exits next."""

    rank: int
    message: Text


# ---------------------------------------------------------------------------------------------------------
# What the ranks run and how the parent reads them: each strategy's Engine.


def lead_weights(reports) -> tuple[tuple[float, ...], float]:
    """The step's parameters from the reports in rank order: rank 0's (where every rank holds them all)."""
    return tuple(reports[0].weights), reports[0].bias


def joined_parts(reports) -> tuple[tuple[float, ...], float]:
    """The step's parameters where each rank holds a part (FSDP's shards, TP's columns, a 2-D mesh's `tp`
    group): W from the parts of the ranks that report one, in rank order, b from the first rank that reports
    it. The parent joins them, no collective."""
    weights = tuple(w for m in reports if m.weights is not None for w in m.weights)
    return weights, next(m.bias for m in reports if m.bias is not None)


def memory_details(cfg, labels, finals) -> list[Detail]:
    """Detail('memory'): per_rank_memory, what each rank measured it holds after its loop."""
    rows = [final.extra["memory"] for final in finals if "memory" in final.extra]
    return [Detail("memory", rows)] if len(rows) == len(finals) else []


def first_memory_details(cfg, labels, reports) -> list[Detail]:
    """Detail('memory') after step 1, where every rank reported what it holds (its `step_extra` on step 1):
    the picture's chips and the page's table show measured bytes from the first step, not only at the end."""
    rows = [report.extra["memory"] for report in reports if report.extra and "memory" in report.extra]
    return [Detail("memory", rows)] if rows and len(rows) == len(reports) else []


def memory_on_step_one(memory_of: Callable, rank: int, model, step: int) -> dict | None:
    """A rank's `step_extra` (as partial(memory_on_step_one, memory_of)): on step 1 what it holds,
    memory_of(rank, model), once its optimizer has stepped (Adam's state exists); nothing on other steps."""
    return {"memory": memory_of(rank, model)} if step == 1 else None


def no_step_extra(rank: int, raw, step: int) -> dict | None:
    return None


def no_step_details(cfg, labels, reports) -> list[Detail]:
    return []


@dataclass(frozen=True)
class Engine:
    """What one strategy's ranks run and how the launchers read their reports (pickled to each rank).

    Every field is a module-level function (or a functools.partial of one), so that spawn can pickle it.
    `part` makes the strategy's part of the one rank loop (fitcore.engine.loop.run_rank) on its rank: its
    wrapped model, its batches, its collectives' record.
    """

    part: PartMaker  # (cfg, place, mark) -> the rank's RankPart
    step_params: Callable  # (rank, model) -> (weights, bias) its StepReport carries
    # model -> ((weights, bias), extra) after the loop, in the process group: the whole parameters as this
    # rank has them (gathered where it holds a part: a collective every rank makes) and what else it reports
    final: Callable
    specs: Callable  # (labels, d, itemsize, [StepReport], mesh) -> every rank's phase specs
    slots: int  # the time slots of one rank's step (its phases' marks)
    words: str  # its catalog's words: cli.<words>.header.cpu / .gpu / .torchrun, cli.run.where.<words>
    weights: Callable = lead_weights  # [StepReport in rank order] -> the step's (weights, bias)
    details: Callable = memory_details  # (cfg, labels, [Final in rank order]) -> Details before 'final'
    step_extra: Callable = no_step_extra  # (rank, model, step) -> what its StepReport carries as `extra`
    step_details: Callable = no_step_details  # (cfg, labels, [StepReport]) -> Details after the step's event
    # under torchrun, where the lead rank hears no other's report: (model) -> the step's (weights, bias), run
    # on every rank after each step (a collective where the ranks hold parts, FSDP's and TP's)
    joined: Callable | None = None
    split: Split = ROWS  # which rows and columns of the batch each rank takes (fitcore.split)

    def layout(self, cfg: FitConfig) -> Layout:
        """The steps and each rank's rows: its own shard where the rows are cut, else the whole batch."""
        return Layout(cfg.data_size, self.split.row_ranks(cfg.mesh_dims), cfg.batch_size)
