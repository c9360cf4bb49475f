"""Uneven inputs: rank r has one batch fewer than rank r + 1, on real DDP on gloo, with and without Join.

As when data is sharded by hand, or per rank with drop_last: the rank that runs out leaves its loop, and the
others enter an all-reduce it will never join. On gloo they end at the process group's short timeout here,
or sooner with a RuntimeError when the finished rank's exit closes its connections. With
`torch.distributed.algorithms.Join` a rank that has run out shadows the others' all-reduces with zeros, so
the run finishes; DDP still divides by the initial world size, so a step with fewer ranks takes a smaller
gradient than one device on the same rows.

One device takes, at each step, every row the ranks still in the run hold.
"""

from __future__ import annotations

import torch

from fitcore.core.data import make_data
from fitcore.core.errors import ConfigError, Text
from fitcore.core.i18n import count, t
from fitcore.kit.equivalence import Trainer, finite, max_diff, result, schedule
from fitcore.lab.traps.gloo import ENGINE, RankJob, per_step_calls, run_ranks
from fitcore.strategies.ddp.name import NAME as DDP

TIMEOUT_S = 5.0  # the process group's timeout: a rank left waiting fails after this, never hangs


def _ranks(ranks) -> str:
    """ "rank 1" or "ranks 1, 2", as a sentence names them."""
    return count("traps.count.ranks", len(ranks), ranks=", ".join(str(r) for r in ranks) or "-")


def step_counts(steps: int, k: int) -> list[int]:
    """Each rank's steps: rank r one fewer than rank r + 1, the last rank all of them."""
    return [steps - (k - 1 - r) for r in range(k)]


def _references(cfg, k: int, steps, counts) -> list[torch.Tensor]:
    device = torch.device("cpu")
    reference = Trainer(cfg, make_data(cfg, device), device)
    flats = []
    for i, rows in enumerate(steps, 1):
        ids = [row for r in range(k) if counts[r] >= i for row in rows.ranks[r]]
        finite(reference.step(ids, "mean"), "reference", i, cfg.lr)
        flats.append(reference.flat())
    return flats


def results(cfg, plan, toggles, join: bool) -> list[dict]:
    """One row: the real uneven run on gloo, finished with Join or failed without it."""
    k = len(plan.labels)
    steps = list(schedule(cfg, k, toggles))
    if k < 2 or len(steps) < k:
        counted = {"ranks": Text.count("cli.count.rank", k), "steps": Text.count("count.step", len(steps))}
        raise ConfigError("devices", cfg.devices, Text("traps.uneven.ranks", **counted))
    counts = step_counts(len(steps), k)
    job = RankJob(
        cfg, toggles.ranks_lr(cfg, k),
        tuple(tuple((tuple(s.ranks[r]),) for s in steps[: counts[r]]) for r in range(k)),
        "mean", 1.0, False, join, TIMEOUT_S,
    )  # fmt: skip
    references = _references(cfg, k, steps, counts)
    run = run_ranks(job)
    reports = {r: run.reports.get(r) for r in range(k)}
    last = reports[k - 1]
    params = last.per_step if last else ()
    diffs = [max_diff(torch.tensor(p), ref) for p, ref in zip(params, references)]
    waiting = [
        {
            "rank": r,
            "step": rep.step if rep else None,
            "reason": rep.reason if rep else "",
            "waited_s": rep.waited,
        }
        for r, rep in reports.items()
        if rep is None or rep.status == "failed"
    ]
    calls, nbytes = per_step_calls([rep for rep in reports.values() if rep])
    status = "failed" if waiting or run.terminated else "finished"
    # Join's shadow all-reduces: those a rank's hook saw after its own last step
    shadow = {r: rep.total_calls - sum(rep.calls) for r, rep in reports.items() if rep} if join else {}
    row = result(
        DDP, k, diffs, [], engine=ENGINE, seconds=run.seconds, bound_s=run.bound, status=status,
        reason="", steps_per_rank=counts, waiting=waiting, shadow_allreduces=shadow, allreduce_measured=True,
        allreduce_calls=calls, allreduce_bytes=nbytes,
    )  # fmt: skip
    if params:  # what the run and its reference ended with: compare's final_parameters of this question
        row["final_parameters"] = {"reference": references[len(params) - 1].tolist(), DDP: list(params[-1])}
    row["causes"] = [_why(row, counts, run, reports, join)]
    row["reason"] = row["causes"][0]
    return [row]


def _why(row: dict, counts: list[int], run, reports, join: bool) -> str:
    """The row's one line: who was left waiting, where and why; or what Join's shadow all-reduces did."""
    short = counts[0]
    if row["status"] == "finished":
        shadow = ", ".join(f"rank {r}: {n}" for r, n in row["shadow_allreduces"].items())
        diffs = row["per_step"]
        before = diffs[short - 1] if len(diffs) >= short > 0 else 0.0  # after the last step of every rank
        last = f"{diffs[-1]:.3g}" if diffs else "-"
        return t(
            "traps.uneven.join", k=len(counts), short=short, ran=count("count.step", short), shadow=shadow,
            last=last, before=f"{before:.3g}", seconds=f"{run.seconds:.1f}",
        )  # fmt: skip
    left = [w for w in row["waiting"] if w["step"] is not None]
    if not left:
        return t("traps.run.bound", bound=f"{run.bound:.0f}")
    w = left[0]
    done = [
        r for r, rep in reports.items() if rep and rep.status == "finished" and rep.steps_done < w["step"]
    ]
    if not done:  # nobody ran out: the run failed for another reason, said as it is
        return t("traps.run.failed", reason=w["reason"])
    return t(
        "traps.uneven.waiting", ranks=_ranks([x["rank"] for x in left]), step=w["step"],
        gone=_ranks(done), done=count("count.step", short), waited=f"{w['waited_s'] * 1000:.0f}",
        reason=w["reason"], timeout=f"{TIMEOUT_S:g}",
    )  # fmt: skip
