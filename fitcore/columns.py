"""How X's columns (W's rows) are cut over tensor-parallel ranks: torch.chunk's rule, as DTensor's Shard(1)
of nn.Linear's weight [1, d] cuts them. TP's own run and the `tp` dimension of a 2-D mesh both follow it."""

from __future__ import annotations

from fitcore.phases import chunk_sizes


def columns(d: int, k: int) -> list[tuple[int, int]]:
    """Each rank's features [lo, hi): torch.chunk's rule (DTensor's Shard), ceil(d / k) each, the last fewer.

    3 features on 2 ranks: [(0, 2), (2, 3)]. Where torch.chunk gives fewer than k chunks (4 on 3: 2 and 2),
    a rank would hold nothing: `ranks_allowed` leaves such k out.
    """
    sizes = chunk_sizes(d, k)
    bounds, lo = [], 0
    for size in sizes:
        bounds.append((lo, lo + size))
        lo += size
    return bounds + [(d, d)] * (k - len(sizes))


def ranks_allowed(d: int, most: int) -> list[int]:
    """The rank counts (up to `most`) at which torch.chunk gives every rank some of d features."""
    return [k for k in range(1, min(d, most) + 1) if len(chunk_sizes(d, k)) == k]
