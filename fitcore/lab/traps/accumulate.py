"""Gradient accumulation: N micro-batches per optimizer step, with and without no_sync() and the loss / N.

Each rank cuts its rows of a step into N micro-batches (sizes as `torch.tensor_split` gives them) and steps
once after the N backward passes; one device takes the step's rows as one batch, as in compare. With the
loss divided by N the accumulated gradient is the one-batch gradient (micro-batches of equal size), so DDP
matches with or without no_sync(); no_sync() only holds back the all-reduce of the first N - 1 backward
passes. Without the division the gradient is N times larger, which SGD follows and Adam mostly divides out.

DDP runs for real on gloo (fitcore.lab.traps.gloo), its comm hook counting every all-reduce; DataParallel
accumulates in this process, on its one copy of the parameters.
"""

from __future__ import annotations

from fitcore.core.data import make_data
from fitcore.core.errors import ConfigError, Text
from fitcore.core.i18n import count, t
from fitcore.core.phases import ring_bytes
from fitcore.kit.equivalence import Trainer, finite, loss_of, max_diff, result, schedule
from fitcore.lab.traps.gloo import ENGINE, RankJob, per_step_calls, run_ranks
from fitcore.strategies.dataparallel.name import NAME as DP
from fitcore.strategies.dataparallel.wrappers import wrap
from fitcore.strategies.ddp.name import NAME as DDP

TIMEOUT_S = 30.0  # no rank waits for another here: a generous bound on one collective


def split(ids, n: int) -> tuple[tuple[int, ...], ...]:
    """`ids` in n consecutive parts, the first len % n one longer: torch.tensor_split's sizes."""
    q, r = divmod(len(ids), n)
    parts, start = [], 0
    for j in range(n):
        size = q + (j < r)
        parts.append(tuple(ids[start : start + size]))
        start += size
    return tuple(parts)


def _accumulated_step(trainer: Trainer, ids: list[int], n: int, scale: float, reduction: str) -> float:
    """N forward and backward passes, the gradients summed on the parameters, then one step."""
    for p in trainer.params:
        p.grad = None
    total = 0.0
    for micro in split(ids, n):
        xb, yb = trainer.rows(list(micro))
        loss = loss_of(trainer.model(xb), yb, reduction) * scale
        loss.backward()
        total += loss.item()
    trainer.optimizer.step()
    return total


def results(cfg, plan, toggles, traps) -> list[dict]:
    """DataParallel accumulating in this process, and real DDP on gloo, each against one device per step."""
    k, n = len(plan.labels), traps.accumulate
    steps = list(schedule(cfg, k, toggles))
    fewest = min(len(ids) for s in steps for ids in s.ranks)
    if fewest < n:
        raise ConfigError("accumulate", n, Text("traps.acc.rows", most=fewest))
    scale = 1 / n if traps.loss_scaling else 1.0
    red = toggles.loss_reduction
    device = plan.first_device
    data = make_data(cfg, device)
    reference, dp = Trainer(cfg, data, device), Trainer(cfg, data, device, lambda raw: wrap(raw, plan))
    references, dp_diffs = [], []
    try:
        for i, rows in enumerate(steps, 1):
            worst = 0.0
            for ids in rows.batches:
                finite(reference.step(ids, red), "reference", i, cfg.lr)
                finite(_accumulated_step(dp, ids, n, scale, red), DP, i, cfg.lr)
                worst = max(worst, max_diff(dp.flat(), reference.flat()))
            references.append(reference.flat().cpu())
            dp_diffs.append(worst)
    finally:
        dp.close()
    job = RankJob(
        cfg, toggles.ranks_lr(cfg, k),
        tuple(tuple(split(s.ranks[r], n) for s in steps) for r in range(k)),
        red, scale, traps.no_sync, False, TIMEOUT_S,
    )  # fmt: skip
    # DataParallel splits each batch of the reference into n micro-batches: of unequal size where n does not
    # divide it, and then each one's mean loss / n weighs its rows unequally, as on DDP's ranks
    unequal = any(len({len(m) for m in split(ids, n)}) > 1 for s in steps for ids in s.batches)
    return [_dp_row(k, n, dp_diffs, traps, unequal), _ddp_row(k, n, job, references, traps)]


def _dp_row(k: int, n: int, diffs: list[float], traps, unequal: bool) -> dict:
    row = result(DP, k, diffs, [t("traps.acc.dp", n=n)])
    if not traps.loss_scaling and row["first_divergent_step"] is not None:
        row["causes"].append(t("traps.acc.unscaled", n=n, worst=f"{row['max_abs_diff']:.3g}"))
    elif row["first_divergent_step"] is not None and unequal:
        row["causes"].append(t("traps.acc.unequal", n=n))
    return row


def _ddp_row(k: int, n: int, job: RankJob, references, traps) -> dict:
    import torch

    run = run_ranks(job)
    reports = [run.reports[r] for r in sorted(run.reports)]
    first = run.reports.get(0)
    params = first.per_step if first else ()
    diffs = [max_diff(torch.tensor(p), ref) for p, ref in zip(params, references)]
    calls, nbytes = per_step_calls(reports)
    key = "traps.acc.no_sync" if traps.no_sync else "traps.acc.every"
    # the hook measures the buckets; the picture shows what the ring sends of them: name both, one sentence
    calls_text = count("traps.count.allreduce", calls)  # per optimizer step, on each rank
    causes = [t(key, n=n, held=n - 1, calls=calls_text, bytes=nbytes, k=k, ring=ring_bytes(k, nbytes))]
    failed = [rep for rep in reports if rep.status == "failed"]
    reason = failed[0].reason if failed else ""
    if run.terminated or len(reports) < len(job.steps):
        reason = reason or t("traps.run.bound", bound=f"{run.bound:.0f}")
    status = "failed" if reason else "finished"
    row = result(
        DDP, k, diffs, causes, engine=ENGINE, seconds=run.seconds, status=status,
        reason=reason, allreduce_calls=calls, allreduce_bytes=nbytes, allreduce_measured=True,
        allreduce_calls_total=sum(rep.total_calls for rep in reports[:1]),
    )  # fmt: skip
    if reason:
        row["causes"].append(t("traps.run.failed", reason=reason))
    elif not traps.loss_scaling and row["first_divergent_step"] is not None:
        row["causes"].append(t("traps.acc.unscaled", n=n, worst=f"{row['max_abs_diff']:.3g}"))
    elif row["first_divergent_step"] is not None and len({len(m) for s in job.steps[0] for m in s}) > 1:
        row["causes"].append(t("traps.acc.unequal", n=n))
    return row
