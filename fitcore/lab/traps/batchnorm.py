"""BatchNorm under data parallelism: per-device statistics, and SyncBatchNorm's global ones.

The model is BatchNorm1d(d) on the inputs, then the linear layer: still a linear fit, in normalised
coordinates. In training mode BatchNorm normalises with the batch's own mean and variance, so it is the one
layer whose output depends on which rows share a device:

  dataparallel  each replica normalises its own chunk with that chunk's statistics. The emulation runs real
                nn.BatchNorm1d replicas: device 0's shares the module's buffers, the others get fresh copies
                at every forward (replicate's broadcast), so the running statistics are device 0's alone, as
                nn.DataParallel's warning says;
  ddp           each rank normalises its own shard; DDP broadcasts rank 0's buffers at every forward
                (broadcast_buffers), so its running statistics are rank 0's;
  ddp, sync     SyncBatchNorm: every rank's count, sum and squared deviations gathered, each rank's rows
                normalised with the global mean and variance. torch's SyncBatchNorm runs on GPU modules only,
                so its arithmetic is computed here exactly, in one process; `fitcore check` compares it with
                the real one where two or more GPUs exist.
"""

from __future__ import annotations

import copy

import torch

from fitcore.core.data import make_data
from fitcore.core.errors import ConfigError, Text
from fitcore.core.i18n import t
from fitcore.kit.equivalence import finite, max_diff, result, schedule
from fitcore.strategies.dataparallel.name import NAME as DP
from fitcore.strategies.dataparallel.wrappers import EmulatedDataParallel, wrap
from fitcore.strategies.ddp.name import NAME as DDP
from fitcore.strategies.ddp.syncbn import BatchNormModel, _BatchNormTrainer


class BatchNormEmulation(EmulatedDataParallel):
    """DataParallel's CPU emulation with real BatchNorm1d replicas, buffers as replicate() leaves them."""

    def __init__(self, module: BatchNormModel, labels: tuple[str, ...]):
        super().__init__(module, labels)
        for replica in self._replicas[1:]:  # their own BatchNorm1d, sharing the parameters, not the buffers
            replica.__dict__["_modules"] = dict(module._modules, bn=copy.copy(module.bn))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # replicate's broadcast: device 0's replica shares storage with the module, so its in-place updates
        # of the running statistics stay; every other replica updates a copy that is thrown away
        for replica in self._replicas[1:]:
            bn = replica._modules["bn"]
            bn.__dict__["_buffers"] = {n: b.clone() for n, b in self.module.bn._buffers.items()}
        return super().forward(x)


def _wrap(raw: BatchNormModel, plan):
    if plan.emulated:
        raw.to(plan.first_device)
        return BatchNormEmulation(raw, plan.labels)
    return wrap(raw, plan)  # nn.DataParallel on 2+ GPUs handles BatchNorm replicas itself


def _means(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def train(cfg, plan, toggles, sync: bool):
    """The reference, DataParallel and DDP on the BatchNorm model, on compare's schedule."""
    k, device = len(plan.labels), plan.first_device
    data = make_data(cfg, device)
    reference = _BatchNormTrainer(cfg, data, device)
    dp = _BatchNormTrainer(cfg, data, device, lambda raw: _wrap(raw, plan))
    ddp = _BatchNormTrainer(cfg, data, device, lr=toggles.ranks_lr(cfg, k))
    per_step = {DP: [], DDP: []}
    red = toggles.loss_reduction
    steps = list(schedule(cfg, k, toggles))
    try:
        for n, rows in enumerate(steps, 1):
            worst = 0.0
            for ids in rows.batches:
                finite(reference.step(ids, red), "reference", n, cfg.lr)
                finite(dp.step(ids, red), DP, n, cfg.lr)
                worst = max(worst, max_diff(dp.flat(), reference.flat()))
            per_step[DP].append(worst)
            finite(ddp.ddp_step(rows.ranks, red, sync), DDP, n, cfg.lr)
            per_step[DDP].append(max_diff(ddp.flat(), reference.flat()))
    except ValueError as exc:  # BatchNorm in training refuses a single row a channel
        raise ConfigError("batch_size", cfg.batch_size, Text("traps.bn.rows", k=k)) from exc
    finally:
        dp.close()
    means = {
        name: trainer.running_mean()
        for name, trainer in (("reference", reference), (DP, dp), (DDP, ddp))
    }
    finals = {"reference": reference.flat().tolist(), DDP: ddp.flat().tolist()}
    return per_step, means, steps, finals


def results(cfg, plan, toggles, sync: bool) -> list[dict]:
    """compare's DataParallel and DDP rows on the BatchNorm model, with their running means."""
    k = len(plan.labels)
    per_step, means, steps, _ = train(cfg, plan, toggles, sync)
    rows = []
    for name in (DP, DDP):
        diff = max_diff(torch.tensor(means[name]), torch.tensor(means["reference"]))
        row = result(name, k, per_step[name], [], running_mean=means[name])
        row["reference_running_mean"] = means["reference"]
        row["n_params"] = 3 * cfg.n_features + 1  # BatchNorm's weight and bias, then W and b
        measured = {"k": k, "worst": f"{row['max_abs_diff']:.3g}", "first": row["first_divergent_step"]}
        if name == DDP and sync:  # global statistics: exact, unless padding duplicates enter them
            row["causes"].append(t("traps.bn.sync", **measured))
            if row["first_divergent_step"] is not None:
                row["causes"].append(t("traps.bn.padded", **measured))
        elif row["first_divergent_step"] is not None:
            row["causes"].append(t(f"traps.bn.{name}" if name == DDP else "traps.bn.dp", **measured))
        running = "traps.bn.running_sync" if name == DDP and sync else f"traps.bn.running_{name}"
        row["causes"].append(
            t(running, mean=_means(means[name]), reference=_means(means["reference"]), d=f"{diff:.3g}")
        )
        if name == DDP:
            row["engine"] = t("traps.bn.engine_sync" if sync else "traps.bn.engine_ddp", k=k)
        rows.append(row)
    return rows
