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
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fitcore.data import make_data
from fitcore.equivalence import Trainer, finite, loss_of, max_diff, result, schedule
from fitcore.errors import ConfigError, Text
from fitcore.i18n import t
from fitcore.parallel import EmulatedDataParallel, wrap
from fitcore.strategies.dataparallel.name import NAME as DP
from fitcore.strategies.ddp.name import NAME as DDP


class BatchNormModel(nn.Module):
    """BatchNorm1d(d), then nn.Linear(d, 1): the lab's model for the BatchNorm question."""

    def __init__(self, n_features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(n_features)
        self.fc = nn.Linear(n_features, 1)
        self.device_label: str | None = None  # set on the emulation's replicas, as on LinearModel's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(x))  # (rows, d) -> (rows, d) -> (rows, 1)


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
    ddp = _BatchNormTrainer(cfg, data, device, lr=cfg.lr * k if toggles.scale_lr else cfg.lr)
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


# ---------------------------------------------------------------------------------------------------------
# `fitcore check`: the one-process SyncBatchNorm against torch's own, on nccl with one GPU per rank.


def _sync_rank(rank: int, world: int, port: int, cfg, steps, out) -> None:
    """One spawned rank: SyncBatchNorm under DDP on cuda:rank, its shard of every step; reports its end."""
    import os
    from datetime import timedelta

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from fitcore.engine.launcher import HOST, _loopback_interface
    from fitcore.parallel import init_parameters
    from fitcore.train import make_optimizer

    lo = _loopback_interface()
    if lo:
        os.environ["NCCL_SOCKET_IFNAME"] = os.environ["GLOO_SOCKET_IFNAME"] = lo
    try:
        torch.cuda.set_device(rank)
        store = dist.TCPStore(HOST, port, is_master=False, timeout=timedelta(seconds=120))
        dist.init_process_group(
            "nccl", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60)
        )
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
    and the steps; raises RuntimeError naming a rank that failed.
    """
    import math

    import torch.multiprocessing as mp

    from fitcore.config import FitConfig, validate
    from fitcore.devices import parse_devices
    from fitcore.engine.launcher import _loopback_store
    from fitcore.equivalence import Toggles

    rows = gpus * math.ceil(200 / gpus)  # no padding: SyncBatchNorm's statistics are over the real rows
    cfg = validate(FitConfig(data_size=rows, batch_size=rows, epochs=10, optimizer="sgd", lr=0.1,
                             devices=f"virtual:{gpus}"))  # fmt: skip
    plan = parse_devices(cfg.devices)
    _, means, steps, finals = train(cfg, plan, Toggles(), sync=True)
    store, port = _loopback_store()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    shards = [s.ranks for s in steps]
    procs = [ctx.Process(target=_sync_rank, args=(r, gpus, port, cfg, shards, out)) for r in range(gpus)]
    for p in procs:
        p.start()
    try:
        reports = dict((rep[0], rep) for rep in (out.get(timeout=300) for _ in procs))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
        del store
    failed = [rep for rep in reports.values() if rep[3]]
    if failed:
        raise RuntimeError(f"rank {failed[0][0]}: {failed[0][3]}")
    _, flat, running, _ = reports[0]
    return {
        "steps": len(steps),
        "params_diff": max_diff(torch.tensor(flat), torch.tensor(finals[DDP])),
        "running_mean_diff": max_diff(torch.tensor(running), torch.tensor(means[DDP])),
    }
