"""The ddp column of `fitcore compare`: DDP's arithmetic for K ranks, simulated exactly in one process.

Each rank's rows come from DistributedSampler (the lab's schedule), each rank computes its own loss and
gradient, the gradients are divided by K and summed (what DDP's all-reduce hook does), then every rank takes
the same optimizer step: the replicas stay identical, so one copy of the parameters stands for all of them.
The arithmetic is fitcore.kit.labmath's RanksComparer, which FSDP's column shares; tests/test_compare.py
checks this simulation against the real gloo run to 1e-6.
"""

from __future__ import annotations

from fitcore.kit.labmath import RanksComparer, rank_causes
from fitcore.strategies.ddp.name import NAME


class Comparer(RanksComparer):
    """DDP's arithmetic for K ranks in one process: per-rank loss and gradient, then DDP's averaging."""

    name = NAME


def causes(cfg, plan, toggles, trained) -> list[str]:
    """The reasons DDP differs from the reference, each measured; none when it matches."""
    return rank_causes(cfg, plan, toggles, trained, NAME, "DDP")
