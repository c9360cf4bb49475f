"""DistributedDataParallel's part of the page: the ranks' shards and shapes (fitcore.view.ranks), what each
rank holds (the whole model, on every rank), how it ran, and its console lines around the steps.

It exposes the names every strategy's view module does (fitcore.protocols.registry.StrategyView).
"""

from __future__ import annotations

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import RunStarted
from fitcore.core.i18n import t
from fitcore.core.memory import whole_model
from fitcore.engine.rank import rank_labels
from fitcore.runs.runner import Snapshot
from fitcore.strategies.ddp.memory import ddp_rows
from fitcore.view import ranks as rank_view
from fitcore.view.common import Section, ranks_memory, shown
from fitcore.view.ranks import planned_step, rank_sections, ranks_words

CONSOLE_HINT = "view.console_hint.ddp"  # the catalog's words for what the console will show
__all__ = ["CONSOLE_HINT", "console_frame", "parallelism", "planned_step", "sections"]


def sections(snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None) -> list[Section]:
    """DDP's split (rank_sections), then what each rank holds: the whole model, on every rank."""
    split = rank_sections(snap, cfg, plan)
    config, plan = shown(snap, cfg, plan)
    if not split or config is None:
        return split
    if snap is not None and snap.devices:
        labels = tuple(snap.devices)
    elif plan is not None:
        labels = rank_labels(config, plan)
    else:
        return split
    measured = snap.extra.get("memory") if snap is not None else None
    planned = ddp_rows(whole_model(config), len(labels))
    return [*split, ranks_memory(labels, measured, planned, t("view.memory.ddp"))]


def parallelism(cfg: FitConfig, started: RunStarted) -> str:
    """ "DistributedDataParallel, 2 ranks, gloo"."""
    return f"DistributedDataParallel, {ranks_words(cfg, started)}"


def console_frame(snap: Snapshot) -> tuple[list[str], list[str]]:
    """What the command line prints around the steps: the process group first, and once the run has ended
    every rank's final parameters."""
    return rank_view.console_frame(snap)
