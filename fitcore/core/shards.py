"""How an epoch is cut across ranks: each rank's shard from DistributedSampler, rows per step, and the shards
as data. Every strategy with ranks uses it, and so does the lab's schedule (fitcore.lab.compare)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from torch.utils.data import DistributedSampler

from fitcore.core.config import FitConfig
from fitcore.protocols.mesh import DP, coords

MAX_SHARD_INDICES = 5000  # dataset indices kept per rank and epoch in Detail('shards'); counts stay exact


@dataclass(frozen=True)
class Layout:
    """How DDP cuts an epoch of `data_size` rows over `world_size` ranks with a global `batch_size`."""

    data_size: int
    world_size: int
    batch_size: int  # the configured global batch

    @property
    def rows_per_rank(self) -> int:
        """DistributedSampler's num_samples with drop_last=False: every shard has this many rows."""
        return math.ceil(self.data_size / self.world_size)

    @property
    def padding(self) -> int:
        """Rows repeated each epoch so that every shard is rows_per_rank long."""
        return self.rows_per_rank * self.world_size - self.data_size

    @property
    def per_rank_batch(self) -> int:
        """Rows each rank takes per step: K of them come as close to batch_size as equal parts allow."""
        return math.ceil(self.batch_size / self.world_size)

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.data_size, self.world_size, self.per_rank_batch)

    def local_rows(self, batch: int) -> int:
        """Rows each rank takes at the 1-based `batch` of an epoch (the last one may be smaller)."""
        return min(self.per_rank_batch, self.rows_per_rank - (batch - 1) * self.per_rank_batch)

    def padded_rows(self, rank: int, batch: int) -> int:
        """Rows of `rank`'s 1-based `batch` that repeat another rank's row to pad its shard: position i of a
        shard is rank + i * K of the padded order, and the positions from data_size on are the padding."""
        first = (batch - 1) * self.per_rank_batch
        last = first + self.local_rows(batch)  # one past
        # the shard's positions i with rank + i * K >= data_size, within [first, last)
        start = max(first, math.ceil((self.data_size - rank) / self.world_size))
        return max(0, last - start)

    @classmethod
    def of(cls, cfg: FitConfig) -> "Layout":
        return cls(cfg.data_size, cfg.workers, cfg.batch_size)


def padded_part(cfg: FitConfig, step, devices: list[dict]) -> dict:
    """The live picture's padding: on each busy rank, the rows of this step that repeat another rank's to pad
    its shard (DistributedSampler's duplicates), as `padded`. Changes `devices` in place; adds nothing
    else."""
    layout = Layout.of(cfg)
    for rank, device in enumerate(devices):
        if device["busy"] and rank < layout.world_size:
            device["padded"] = layout.padded_rows(rank, step.batch)
    return {}


def steps_per_epoch(data_size: int, world_size: int, per_rank_batch: int, drop_last: bool = False) -> int:
    """Optimizer steps per epoch: shards of ceil(N / K) rows (floor with drop_last), per_rank_batch a step."""
    shard = data_size // world_size if drop_last else math.ceil(data_size / world_size)
    return math.ceil(shard / per_rank_batch)


def is_padding(rank: int, i: int, world_size: int, data_size: int) -> bool:
    """Whether entry i of rank's shard is DistributedSampler's padding: position rank + i * K of the padded
    order is N or more."""
    return rank + i * world_size >= data_size


def epoch_shards(
    data_size: int, world_size: int, shuffle: bool, seed: int, epoch: int, drop_last: bool = False,
    set_epoch: bool = True,
) -> list[list[int]]:  # fmt: skip
    """Each rank's dataset indices for the 1-based `epoch`, from DistributedSampler itself.

    set_epoch=False forgets sampler.set_epoch, as a user might: the sampler stays at epoch 0's order.
    """
    shards = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            range(data_size), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
            drop_last=drop_last,
        )  # fmt: skip
        if set_epoch:
            sampler.set_epoch(epoch - 1)
        shards.append(list(sampler))
    return shards


def epoch_value(
    layout: Layout, labels, epoch: int, shards: list[list[int]], shard_of: Sequence[int] | None = None
) -> dict:
    """One epoch's shards as plain data, one entry per rank (`labels`); entry i of shard s is position
    s + i * K of the padded order. `shard_of` gives each rank's shard, its rows' coordinate on the mesh (the
    ranks of one tp group, one dp coordinate, take the same shard); by default rank r takes shard r."""
    k, n = layout.world_size, layout.data_size
    shard_of = list(shard_of) if shard_of is not None else list(range(len(shards)))
    # each shard's padding, (its position in the padded order, the repeated row), found once per shard
    padding = [[(s + i * k, index) for i, index in enumerate(shard) if is_padding(s, i, k, n)]
               for s, shard in enumerate(shards)]  # fmt: skip
    ranks = []
    for rank, s in enumerate(shard_of):
        shard = shards[s]
        ranks.append(
            {
                "rank": rank,
                "device": labels[rank],
                "count": len(shard),
                "first": shard[0],
                "last": shard[-1],
                "indices": shard[:MAX_SHARD_INDICES],
                "truncated": len(shard) > MAX_SHARD_INDICES,
                "padded": [index for _, index in padding[s]],
            }
        )
    return {
        "epoch": epoch,
        "set_epoch": epoch - 1,
        "ranks": ranks,
        # the padding, in the order it was appended
        "repeated": [index for _, index in sorted(p for pads in padding for p in pads)],
    }


def shards_value(cfg: FitConfig, layout: Layout, labels, first: dict, latest: dict) -> dict:
    """Detail('shards').value: the sampler's rule, and the first and the latest epoch's shards."""
    return {
        "data_size": layout.data_size,
        "world_size": layout.world_size,
        "rows_per_rank": layout.rows_per_rank,
        "total_size": layout.rows_per_rank * layout.world_size,
        "padding": layout.padding,
        "shuffle": cfg.shuffle,
        "seed": cfg.seed,
        "drop_last": False,
        "per_rank_batch": layout.per_rank_batch,
        "steps_per_epoch": layout.steps_per_epoch,
        "first": first,
        "latest": latest,
    }


def first_epoch_value(cfg: FitConfig, labels) -> dict:
    """Detail('shards').value of a ddp run of cfg before its second epoch: epoch 1's shards, first and latest.

    The run reports this very value; the page shows it before the run starts.
    """
    shard_of = row_shards(cfg.mesh_dims, len(labels))
    layout = Layout(cfg.data_size, max(shard_of) + 1, cfg.batch_size)
    shards = epoch_shards(cfg.data_size, layout.world_size, cfg.shuffle, cfg.seed, 1)
    first = epoch_value(layout, labels, 1, shards, shard_of)
    return shards_value(cfg, layout, labels, first, first)


def row_shards(dims: Sequence[tuple[str, int]], k: int) -> list[int]:
    """Each of k ranks' shard of the rows: its `dp` coordinate on the mesh (on dp=2,tp=2, ranks 0 and 1 take
    shard 0, ranks 2 and 3 shard 1, as DistributedSampler over the dp dimension deals them); rank r's own
    where the mesh has no dp dimension."""
    if DP not in dict(dims):
        return list(range(k))
    return [coords(dims, rank)[DP] for rank in range(k)]
