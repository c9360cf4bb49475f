"""SyncBatchNorm's arithmetic, exactly, in one process, and what `fitcore check` holds torch's own to.

The lab's BatchNorm question (fitcore.lab.traps.batchnorm) trains its model three ways; the DDP column's
arithmetic lives here, per-shard statistics or SyncBatchNorm's global ones, so that DDP's check can run it
without DataParallel's emulation, which only the question needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fitcore.core.data import make_data
from fitcore.kit.equivalence import Trainer, finite, loss_of, max_diff, schedule
from fitcore.strategies.ddp.name import NAME as DDP

START_BOUND = 120.0  # seconds for the GPU ranks to import torch and join
RUN_BOUND = 300.0  # seconds for the whole check, the ranks' start included


class BatchNormModel(nn.Module):
    """BatchNorm1d(d), then nn.Linear(d, 1): the lab's model for the BatchNorm question."""

    def __init__(self, n_features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(n_features)
        self.fc = nn.Linear(n_features, 1)
        self.device_label: str | None = None  # set on the emulation's replicas, as on LinearModel's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(x))  # (rows, d) -> (rows, d) -> (rows, 1)


def sync_batchnorm(xs: list[torch.Tensor], bn: nn.BatchNorm1d) -> list[torch.Tensor]:
    """SyncBatchNorm's training forward over K ranks' rows, in one process; updates bn's running statistics.

    Each rank's count and sums are what SyncBatchNorm all-gathers; the global mean and biased variance
    normalise every rank's rows, and the running variance takes the unbiased one over all rows. Autograd
    through these sums gives SyncBatchNorm's backward, whose all-reduce sums the same terms.

    Args:
        xs: each rank's rows, (b_r, d).
    """
    n = sum(x.shape[0] for x in xs)
    mean = sum(x.sum(0) for x in xs) / n  # (d,)
    var = sum(((x - mean) ** 2).sum(0) for x in xs) / n  # (d,), biased: what normalises
    with torch.no_grad():
        m = bn.momentum
        bn.running_mean.mul_(1 - m).add_(m * mean)
        bn.running_var.mul_(1 - m).add_(m * var * n / (n - 1))
        bn.num_batches_tracked += 1
    invstd = torch.rsqrt(var + bn.eps)
    return [(x - mean) * invstd * bn.weight + bn.bias for x in xs]


class _BatchNormTrainer(Trainer):
    """compare's trainer on the BatchNorm model, with DDP's step for per-shard and synchronised statistics."""

    def __init__(self, cfg, data, device, model=None, lr=None):
        super().__init__(cfg, data, device, model, lr, make=BatchNormModel)

    def ddp_step(self, ranks: tuple[list[int], ...], reduction: str, sync: bool) -> float:
        k, raw = len(ranks), self.raw
        batches = [self.rows(ids) for ids in ranks]
        if sync:
            hs = sync_batchnorm([x for x, _ in batches], raw.bn)
            outs = [F.linear(h, raw.fc.weight, raw.fc.bias) for h in hs]
        else:
            # broadcast_buffers: every rank starts from rank 0's buffers, and only rank 0's update is kept
            copies = [{f"bn.{n}": b.clone() for n, b in raw.bn._buffers.items()} for _ in ranks[1:]]
            outs = [raw(batches[0][0])]
            outs += [functional_call(raw, bufs, (x,)) for bufs, (x, _) in zip(copies, batches[1:])]
        losses = [loss_of(out, y, reduction) for out, (_, y) in zip(outs, batches)]
        grads = torch.autograd.grad(sum(losses) / k, self.params)  # each rank's gradient / K, summed
        for p, g in zip(self.params, grads):
            p.grad = g
        self.optimizer.step()
        return sum(loss.item() for loss in losses) / k

    def running_mean(self) -> list[float]:
        return self.raw.bn.running_mean.tolist()


def ddp_column(cfg, k: int, toggles, sync: bool) -> tuple[_BatchNormTrainer, list]:
    """DDP's arithmetic alone on the BatchNorm model, K ranks on compare's schedule: the trained column and
    the steps (each rank's rows), as fitcore.lab.traps.batchnorm trains it beside the reference."""
    device = torch.device("cpu")
    ddp = _BatchNormTrainer(cfg, make_data(cfg, device), device, lr=toggles.ranks_lr(cfg, k))
    steps = list(schedule(cfg, k, toggles))
    for n, rows in enumerate(steps, 1):
        finite(ddp.ddp_step(rows.ranks, toggles.loss_reduction, sync), DDP, n, cfg.lr)
    return ddp, steps


# ---------------------------------------------------------------------------------------------------------
# `fitcore check`: the one-process SyncBatchNorm against torch's own, on nccl with one GPU per rank.


def _sync_rank(rank: int, world: int, port: int, out, cfg, steps) -> None:
    """One spawned rank: SyncBatchNorm under DDP on cuda:rank, its shard of every step; reports its end."""
    from datetime import timedelta

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from fitcore.core.parallel import init_parameters
    from fitcore.core.train import make_optimizer
    from fitcore.engine.spawn import join_group

    try:
        torch.cuda.set_device(rank)
        join_group("nccl", rank, world, port, START_BOUND, timedelta(seconds=60))
        device = torch.device("cuda", rank)
        X, y = make_data(cfg, device)
        raw = BatchNormModel(cfg.n_features)
        init_parameters(raw, cfg.seed + 1)
        model = nn.SyncBatchNorm.convert_sync_batchnorm(raw).to(device)
        ddp = DistributedDataParallel(model, device_ids=[rank])
        optimizer = make_optimizer(cfg, model.parameters())
        for ranks in steps:
            idx = torch.tensor(ranks[rank], dtype=torch.long, device=device)
            loss = F.mse_loss(ddp(X[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
        out.put((rank, flat, model.bn.running_mean.tolist(), ""))
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - the check's row reports it
        out.put((rank, None, None, f"{type(exc).__name__}: {exc}"))


def check_sync_batchnorm(gpus: int) -> dict:
    """Train with torch's SyncBatchNorm on `gpus` ranks (nccl) and with this module's arithmetic on the CPU.

    Returns the largest |difference| of the parameters and of the running means, rank 0's against the CPU's,
    and the steps; raises RuntimeError naming a rank that failed or never reported.
    """
    import math

    from fitcore.core.config import FitConfig, check
    from fitcore.engine.spawn import run_spawned
    from fitcore.kit.equivalence import Toggles

    rows = gpus * math.ceil(200 / gpus)  # no padding: SyncBatchNorm's statistics are over the real rows
    checked = check(FitConfig(data_size=rows, batch_size=rows, epochs=10, optimizer="sgd", lr=0.1,
                              devices=f"virtual:{gpus}"))  # fmt: skip
    cfg, plan = checked.config, checked.plan
    ddp, steps = ddp_column(cfg, len(plan.labels), Toggles(), sync=True)
    run = run_spawned(_sync_rank, (cfg, [s.ranks for s in steps]), gpus, RUN_BOUND, START_BOUND)
    silent = [r for r in range(gpus) if r not in run.reports]
    if silent:
        raise RuntimeError(f"rank {silent[0]}: no report within {RUN_BOUND:g} s")
    failed = [rep for rep in run.reports.values() if rep[3]]
    if failed:
        raise RuntimeError(f"rank {failed[0][0]}: {failed[0][3]}")
    _, flat, running, _ = run.reports[0]
    return {
        "steps": len(steps),
        "params_diff": max_diff(torch.tensor(flat), ddp.flat()),
        "running_mean_diff": max_diff(torch.tensor(running), torch.tensor(ddp.running_mean())),
    }
