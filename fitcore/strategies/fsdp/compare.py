"""The fsdp column of `fitcore compare`: FSDP's arithmetic for K ranks, simulated exactly in one process.

A step of fully_shard on K ranks computes, on every rank, the gradient of its own rows' loss with respect to
the whole (all-gathered) W and b; the reduce-scatter averages those K gradients and leaves each rank the
rows of its own shard; each rank's optimizer then steps its shard. Adam and SGD work number by number, so
K optimizers over K shards take the very step one optimizer takes over the whole: the arithmetic is DDP's
(average the ranks' gradients, step), and one copy of the parameters stands for the shards joined.
tests/test_compare.py checks this simulation against the real fully_shard run on gloo ranks.
"""

from __future__ import annotations

from fitcore.kit.labmath import RanksComparer, rank_causes
from fitcore.strategies.fsdp.name import NAME


class Comparer(RanksComparer):
    """The ranks' gradients averaged (the reduce-scatter) and every shard stepped: DDP's arithmetic."""

    name = NAME


def causes(cfg, plan, toggles, trained) -> list[str]:
    """The reasons FSDP differs from the reference, each measured: those of ranks on DistributedSampler's
    rows, as DDP's."""
    return rank_causes(cfg, plan, toggles, trained, NAME, "FSDP")
