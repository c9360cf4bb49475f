"""fitcore.core.shards.Layout.padded_rows: the rows of a rank's step that DistributedSampler repeated to pad
its shard, against the sampler's own shards (what the live DDP picture marks on each rank)."""

from __future__ import annotations

import pytest

from fitcore.core.shards import Layout, epoch_shards, epoch_value


@pytest.mark.parametrize(
    "n, k, batch_size",
    [(11, 3, 6), (200, 3, 200), (10, 4, 4), (7, 8, 8), (12, 3, 6), (1, 2, 2)],
)
def test_padded_rows_match_the_samplers_padding(n, k, batch_size):
    layout = Layout(n, k, batch_size)
    shards = epoch_shards(n, k, shuffle=True, seed=0, epoch=1)
    value = epoch_value(layout, [f"rank {r}" for r in range(k)], 1, shards)
    for rank, shard in enumerate(shards):
        got = []
        for batch in range(1, layout.steps_per_epoch + 1):
            start = (batch - 1) * layout.per_rank_batch
            rows = shard[start : start + layout.local_rows(batch)]
            # the padding is the shard's last positions: this step's last padded_rows rows
            padded = layout.padded_rows(rank, batch)
            got += rows[len(rows) - padded :] if padded else []
        assert got == value["ranks"][rank]["padded"], (rank, got)
    total = sum(layout.padded_rows(r, b) for r in range(k) for b in range(1, layout.steps_per_epoch + 1))
    assert total == layout.padding
