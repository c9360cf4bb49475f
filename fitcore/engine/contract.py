"""What a ranked strategy hands the engine, and what its ranks tell the parent.

`Engine` is a strategy's part of the engine (its `RankPart` maker for the one rank loop, its `Split`, how its
reports read); the reports are the typed messages a spawned rank puts on the parent's queue (`Ready`, a
`StepReport` a step, its `Final`, or `Failed`), with the readers most strategies share. Both launchers (the
spawned ranks of fitcore.engine.launcher, torchrun's of fitcore.engine.torchrun) read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, NamedTuple, Protocol, Sequence, TypeVar

from fitcore.core.config import FitConfig
from fitcore.core.errors import Text
from fitcore.core.events import Detail, Status
from fitcore.core.phases import PhaseSpec
from fitcore.core.shards import Layout
from fitcore.engine.loop import PartMaker
from fitcore.engine.rank import RankParams
from fitcore.protocols import registry
from fitcore.protocols.mesh import Mesh
from fitcore.protocols.split import ROWS, Split

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
    times: tuple[float, ...]  # its slot times (fitcore.core.phases), seconds from its own step start
    sent: tuple[int, ...] = ()  # bytes its collectives sent, where the engine measures them (FSDP)
    extra: dict[str, Any] | None = None  # what else the engine reports on this step (its memory, on step 1)


class Final(NamedTuple):
    """The rank's loop has ended: how, and its parameters."""

    rank: int
    status: Status
    message: Text
    steps: int
    params: RankParams
    extra: dict[str, Any] = {}  # what else the engine reports at the end (its shard and memory)


class Failed(NamedTuple):
    """The rank raised; it exits next."""

    rank: int
    message: Text


# ---------------------------------------------------------------------------------------------------------
# What the ranks run and how the parent reads them: each strategy's Engine.

H = TypeVar("H")  # what a strategy's rank holds (its model, its shards), as its part gives it
Params = tuple[tuple[float, ...], float]  # W and b
PartParams = tuple[tuple[float, ...] | None, float | None]  # a rank's part of them, or none


class Shaped(Protocol):
    """What a rank's phase specs are made from: its input's shape and the bytes its collectives sent, as its
    StepReport says (spawned ranks) or the shared table (torchrun's lead rank, fitcore.engine.loop.Shapes
    with `sent` of none)."""

    @property
    def input_shape(self) -> tuple[int, ...]: ...

    @property
    def sent(self) -> tuple[int, ...]: ...


def lead_weights(reports: Sequence[StepReport]) -> Params:
    """The step's parameters from the reports in rank order: rank 0's (where every rank holds them all)."""
    weights, bias = reports[0].weights, reports[0].bias
    if weights is None or bias is None:
        raise ValueError("rank 0 reported no parameters")
    return tuple(weights), bias


def joined_parts(reports: Sequence[StepReport]) -> Params:
    """The step's parameters where each rank holds a part (FSDP's shards, TP's columns, a 2-D mesh's `tp`
    group): W from the parts of the ranks that report one, in rank order, b from the first rank that reports
    it. The parent joins them, no collective."""
    weights = tuple(w for m in reports if m.weights is not None for w in m.weights)
    return weights, next(m.bias for m in reports if m.bias is not None)


def memory_details(cfg: FitConfig, labels: Sequence[str], finals: Sequence[Final]) -> list[Detail]:
    """Detail('memory'): per_rank_memory, what each rank measured it holds after its loop."""
    rows = [final.extra["memory"] for final in finals if "memory" in final.extra]
    return [Detail("memory", rows)] if len(rows) == len(finals) else []


def first_memory_details(
    cfg: FitConfig, labels: Sequence[str], reports: Sequence[StepReport]
) -> list[Detail]:
    """Detail('memory') after step 1, where every rank reported what it holds (its `step_extra` on step 1):
    the picture's chips and the page's table show measured bytes from the first step, not only at the end."""
    rows = [report.extra["memory"] for report in reports if report.extra and "memory" in report.extra]
    return [Detail("memory", rows)] if rows and len(rows) == len(reports) else []


def memory_on_step_one(
    memory_of: Callable[[int, H], dict[str, int]], rank: int, holds: H, step: int
) -> dict[str, object] | None:
    """A rank's `step_extra` (as partial(memory_on_step_one, memory_of)): on step 1 what it holds,
    memory_of(rank, holds), once its optimizer has stepped (Adam's state exists); nothing on other steps."""
    return {"memory": memory_of(rank, holds)} if step == 1 else None


def no_step_extra(rank: int, holds: object, step: int) -> dict[str, object] | None:
    return None


def no_step_details(cfg: FitConfig, labels: Sequence[str], reports: Sequence[StepReport]) -> list[Detail]:
    return []


@dataclass(frozen=True)
class Engine(Generic[H]):
    """What one strategy's ranks run and how the launchers read their reports (pickled to each rank).

    Every field is a module-level function (or a functools.partial of one), so that spawn can pickle it.
    `part` makes the strategy's part of the one rank loop (fitcore.engine.loop.run_rank) on its rank: its
    wrapped model, its batches, its collectives' record; H is what the part holds, which the other fields
    read.
    """

    part: PartMaker[H]  # (cfg, place, mark) -> the rank's RankPart
    step_params: Callable[[int, H], PartParams]  # (rank, holds) -> the (weights, bias) its StepReport carries
    # holds -> ((weights, bias), extra) after the loop, in the process group: the whole parameters as this
    # rank has them (gathered where it holds a part: a collective every rank makes) and what else it reports
    final: Callable[[H], tuple[Params, dict[str, object]]]
    # (labels, d, itemsize, what each rank reported, the run's mesh) -> every rank's phase specs
    specs: Callable[[Sequence[str], int, int, Sequence[Shaped], Mesh | None], tuple[PhaseSpec, ...]]
    slots: int  # the time slots of one rank's step (its phases' marks)
    words: str  # its catalog's words: cli.<words>.header.cpu / .gpu / .torchrun, cli.run.where.<words>
    weights: Callable[[Sequence[StepReport]], Params] = lead_weights  # the step's (weights, bias)
    # (cfg, labels, [Final in rank order]) -> Details before 'final'
    details: Callable[[FitConfig, Sequence[str], Sequence[Final]], list[Detail]] = memory_details
    # (rank, holds, step) -> what its StepReport carries as `extra`
    step_extra: Callable[[int, H, int], dict[str, object] | None] = no_step_extra
    # (cfg, labels, [StepReport]) -> Details after the step's event
    step_details: Callable[[FitConfig, Sequence[str], Sequence[StepReport]], list[Detail]] = no_step_details
    # under torchrun, where the lead rank hears no other's report: holds -> the step's (weights, bias), run
    # on every rank after each step (a collective where the ranks hold parts, FSDP's and TP's)
    joined: Callable[[H], Params] | None = None
    split: Split = ROWS  # which rows and columns of the batch each rank takes (fitcore.protocols.split)

    def layout(self, cfg: FitConfig) -> Layout:
        """The steps and each rank's rows: its own shard where the rows are cut, else the whole batch."""
        return Layout(cfg.data_size, self.split.row_ranks(cfg.mesh_dims), cfg.batch_size)


def engine_of(cfg: FitConfig) -> Engine[Any]:
    """The Engine of cfg's strategy (its record's `ranks(cfg)`): what both launchers run when no other is
    given. A strategy that trains in one process has none, and no launcher runs it."""
    ranks = registry.of(cfg).ranks
    if ranks is None:
        raise RuntimeError(f"the strategy {cfg.strategy!r} has no ranks for the engine to run")
    engine: Engine[Any] = ranks(cfg)
    return engine
