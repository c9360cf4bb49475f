"""Compare's row for a run on a 2-D mesh: the real run (spawned ranks, torch's own RowwiseParallel over `tp`
and DDP or fully_shard over `dp`), each step's parameters against one device trained on the same rows.

The global batch of a step is the rows of the `dp` ranks, as DistributedSampler deals them over `dp` ranks
(the ranks of one `tp` group share theirs): the reference takes those rows, in rank order, without the
padding (equivalence.schedule over `dp` ranks). Cutting the features over `tp` changes only where the sums
are taken, so the two agree to rounding. The row takes the place of the strategy's simulated one.
"""

from __future__ import annotations

import time

import torch

from fitcore.core.config import FitConfig
from fitcore.core.data import make_data
from fitcore.core.errors import ConfigError, Text
from fitcore.core.events import Status, Step
from fitcore.core.i18n import t
from fitcore.kit.equivalence import FAILED, FINISHED, Toggles, Trainer, finite, max_diff, result, schedule
from fitcore.protocols import registry
from fitcore.protocols.mesh import DP


def is_2d(cfg: FitConfig) -> bool:
    """Does cfg run on a mesh of more than one dimension (its row is then a real run's)?"""
    return len(cfg.mesh_dims) > 1


def mesh_row(cfg: FitConfig, toggles: Toggles) -> dict:
    """The real run of cfg on its mesh, each step against the reference on the same rows (see the module)."""
    if toggles != Toggles():  # the toggles change a simulation's arithmetic, not torch's own wrappers
        raise ConfigError("mesh", cfg.mesh, Text("cli.compare.mesh_toggles"))
    dp = dict(cfg.mesh_dims).get(DP, 1)
    steps: list[Step] = []
    t0 = time.perf_counter()
    ended = registry.of(cfg).train(cfg, lambda e: steps.append(e) if isinstance(e, Step) else None)
    seconds = time.perf_counter() - t0
    device = torch.device("cpu")
    reference = Trainer(cfg, make_data(cfg, device), device)
    per_step = []
    for n, (rows, step) in enumerate(zip(schedule(cfg, dp, toggles), steps), 1):
        for ids in rows.batches:
            finite(reference.step(ids, toggles.loss_reduction), "reference", n, cfg.lr)
        learned = torch.tensor((*step.weights, step.bias), dtype=reference.flat().dtype)
        per_step.append(max_diff(learned, reference.flat()))
    status = FINISHED if ended.status == Status.FINISHED else FAILED
    engine = t("cli.compare.mesh_engine", who=registry.of(cfg).label, mesh=cfg.mesh, ranks=cfg.workers)
    causes = [t("cli.compare.mesh_cause", mesh=cfg.mesh, dp=dp)]
    if status == FAILED:
        causes.append(t("traps.run.failed", reason=str(ended.message)))
    final = {cfg.strategy: [*ended.weights, ended.bias]}  # the row's own final parameters, as it shows
    return result(cfg.strategy, cfg.workers, per_step, causes, engine=engine, seconds=seconds, status=status,
                  mesh=cfg.mesh, final_parameters=final)  # fmt: skip
