"""A ranked strategy that lives in tests/ only: `zero_ddp`, DistributedDataParallel with torch's
ZeroRedundancyOptimizer (ZeRO stage 1: every rank keeps the optimizer state of its own parameters only).

It stands on the engine as a built-in ranked strategy does and borrows no package's code: its record gives
its Engine (`ENGINE`, its part of the engine's one rank loop), and its train and torchrun are the engine's
own; this module is its view too (planned_step, sections, parallelism, console_frame, CONSOLE_HINT), and
tests/zero_drawer.js is its drawer, which the page serves as an installed package's. tests/test_contract.py
registers it and runs it through the engine's spawned ranks, the command line, a recording, `check`,
`compare` and `whatif`.

Its step: each rank's own rows (DistributedSampler's), forward, the loss, backward (DDP all-reduces the
gradients in a ring), then the optimizer: each rank updates only the parameters it owns and broadcasts them
to the others. ZeroRedundancyOptimizer gives the parameters to the ranks greedily, the largest first to the
rank that holds least (`owners`): W's d numbers to rank 0 and b to rank 1 on two ranks.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch
import torch.distributed as dist

from fitcore.core.i18n import t
from fitcore.core.memory import memory_part, rank_memory
from fitcore.core.parallel import LinearModel
from fitcore.core.phases import (
    BACKWARD,
    BACKWARD_END,
    FORWARD,
    FORWARD_END,
    LOAD,
    LOADED,
    LOSS,
    LOSS_END,
    OPTIMIZER,
    OPTIMIZER_END,
    START,
    PhaseSpec,
    ring_bytes,
)
from fitcore.core.projection import Projection, ring
from fitcore.core.shards import Layout, padded_part
from fitcore.core.train import first_model
from fitcore.engine.contract import Engine, first_memory_details, memory_on_step_one
from fitcore.engine.loop import Mark, Place, WholeForward, own_rows, sampler_batches
from fitcore.engine.rank import rank_params
from fitcore.kit import check
from fitcore.kit.labmath import RanksComparer, rank_causes
from fitcore.protocols.mesh import DP
from fitcore.protocols.registry import Strategy, hook, ranked, value
from fitcore.runs.console import rank_step_lines
from fitcore.view import ranks as rank_view
from fitcore.view.common import Section
from fitcore.view.ranks import planned_step, rank_sections, ranks_words

if TYPE_CHECKING:
    from fitcore.core.config import FitConfig

NAME = "zero_ddp"
LABEL = "DDP + ZeroRedundancyOptimizer"
PHASES = (LOAD, FORWARD, LOSS, BACKWARD, OPTIMIZER)
SLOTS = 6  # the slots every rank marks (fitcore.core.phases): START ... OPTIMIZER_END, LOADED, FORWARD_END
CONSOLE_HINT = "zero_ddp.console_hint"
__all__ = ["CONSOLE_HINT", "console_frame", "parallelism", "planned_step", "sections"]


def owners(sizes: Sequence[int], k: int) -> list[int]:
    """The rank that owns each parameter, as ZeroRedundancyOptimizer partitions them: by size, largest
    first, each to the rank that holds least so far (the lowest rank on a tie)."""
    loads, owner = [0] * k, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        rank = loads.index(min(loads))
        owner[i], loads[rank] = rank, loads[rank] + sizes[i]
    return owner


def broadcast_bytes(rank: int, k: int, d: int, itemsize: int) -> int:
    """What `rank` sends after its optimizer step: the parameters it owns, to each of the k - 1 others."""
    sizes = (d, 1)  # W's d numbers, then b
    own = sum(size for size, owner in zip(sizes, owners(sizes, k)) if owner == rank)
    return own * itemsize * (k - 1)


def specs(labels: Sequence[str], d: int, itemsize: int, reports=(), mesh=None) -> tuple[PhaseSpec, ...]:
    """Every rank's phases over its slots: the all-reduce inside backward, the broadcast after the step."""
    k = len(labels)
    return tuple(
        spec._replace(start=spec.start + r * SLOTS, stop=spec.stop + r * SLOTS)
        for r, label in enumerate(labels)
        for spec in (
            PhaseSpec(LOAD, label, 0, START, LOADED),
            PhaseSpec(FORWARD, label, 0, LOADED, FORWARD_END),
            PhaseSpec(LOSS, label, 0, FORWARD_END, LOSS_END),
            PhaseSpec(BACKWARD, label, ring_bytes(k, (d + 1) * itemsize), LOSS_END, BACKWARD_END),
            PhaseSpec(OPTIMIZER, label, broadcast_bytes(r, k, d, itemsize), BACKWARD_END, OPTIMIZER_END),
        )
    )


class ZeroPart(WholeForward):
    """A rank's part of the engine's loop: its replica in DistributedDataParallel, its optimizer torch's
    ZeroRedundancyOptimizer over the optimizer fitcore would make, its rows from DistributedSampler."""

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark):
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel

        self.cfg, self.place, self.mark = cfg, place, mark
        raw = first_model(cfg)
        raw.device_label = place.label
        raw.to(place.device)
        self.model = DistributedDataParallel(raw)
        kind = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam
        self.optimizer = ZeroRedundancyOptimizer(raw.parameters(), optimizer_class=kind, lr=cfg.lr)
        raw.optimizer = self.optimizer
        self.raw = raw

    @property
    def holds(self) -> LinearModel:
        return self.raw

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return sampler_batches(self.cfg, self.place, epoch)

    def inputs(self, X, y, idx):
        return own_rows(X, y, idx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        self.mark(FORWARD_END)
        return out

    def begin_step(self) -> None:
        pass

    def end_backward(self) -> None:
        pass

    def end_early(self) -> None:
        pass

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        return ()  # its bytes are its specs'


def step_params(rank: int, raw: LinearModel) -> tuple[tuple[float, ...], float]:
    return rank_params(raw)  # every rank's parameters are the same after the broadcast


def holds_memory(rank: int, raw: LinearModel) -> dict:
    """What the rank holds: every parameter and gradient, and the optimizer state of its own alone."""
    return rank_memory(rank, list(raw.parameters()), raw.optimizer.optim)


def final(raw: LinearModel) -> tuple[tuple[tuple[float, ...], float], dict]:
    return rank_params(raw), {"memory": holds_memory(dist.get_rank(), raw)}


ENGINE = Engine(
    part=ZeroPart, step_params=step_params, final=final, specs=specs, slots=SLOTS, words=NAME,
    joined=rank_params, step_extra=partial(memory_on_step_one, holds_memory),
    step_details=first_memory_details,
)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Its view: the page's panels, its parallelism line, its console frame.


def sections(snap: Any, cfg: FitConfig | None, plan: Any) -> list[Section]:
    return rank_sections(snap, cfg, plan)  # each rank's shard and shapes, as DDP's


def parallelism(cfg: FitConfig, started: Any) -> str:
    return f"{LABEL}, {ranks_words(cfg, started)}"


def console_frame(snap: Any) -> tuple[list[str], list[str]]:
    return rank_view.console_frame(snap)


# ---------------------------------------------------------------------------------------------------------
# The lab: its check row, its compare column, its what-if row.


def _check_rows(machine) -> list:
    def run() -> check.Verified:
        return check.check_ranks("cpu", 2, (), check.CHECK_CONFIG, NAME)[0]

    return [check.row("zero_ddp gloo 2 ranks (CPU)", run, check.rank_skips(machine)[0])]


class Comparer(RanksComparer):
    """Its arithmetic is DDP's: the same averaged gradient, the same update, wherever its state lives."""

    name = NAME


PROJECTIONS = (Projection(NAME, LABEL, lambda p, g, o, k: p + g + o / k, ring, 2),)


def _picture(cfg, step, devices: list[dict], extra: dict) -> dict:
    part = padded_part(cfg, step, devices)
    return {**part, "memory_measured": memory_part(devices, extra.get("memory"))}


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label=LABEL,
    short="ZeRO-1",
    processes=True,
    drawer=NAME,
    drawer_file=str(Path(__file__).with_name("zero_drawer.js")),
    steps_per_epoch=lambda cfg: Layout(cfg.data_size, max(1, cfg.workers), cfg.batch_size).steps_per_epoch,
    **ranked(value(f"{__name__}:ENGINE")),  # its Engine; its train and torchrun the engine's own
    step_lines=rank_step_lines,
    markdown=lambda cfg=None: t("zero_ddp.explain"),
    bytes_of_step=lambda rows, k, d, itemsize, cfg=None: sum(
        ring_bytes(k, (d + 1) * itemsize) + broadcast_bytes(r, k, d, itemsize) for r in range(k)
    ),
    view=value(__name__),
    check_rows=_check_rows,
    comparer=Comparer,
    compare_causes=partial(rank_causes, name=NAME, who="ZeRO-1"),
    engine=lambda plan: f"DDP + ZeroRedundancyOptimizer simulated on {len(plan.labels)} ranks",
    engine_word=lambda plan: t("cli.compare.word.simulated"),
    projections=lambda: PROJECTIONS,
    questions=hook("fitcore.view.quiz:shard_questions"),
    words={"title": "zero_ddp.title", "explain": "zero_ddp.title", "lab": "zero_ddp.lab",
           "who": "zero_ddp.who"},  # fmt: skip
    locale=str(Path(__file__).with_name("zero_locale.json")),
    preload=(__name__,),
    phases=lambda: PHASES,
    picture=_picture,
    dim=DP,
)
