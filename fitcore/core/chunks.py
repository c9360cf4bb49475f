"""torch.chunk's rule, wherever fitcore cuts something over k devices: a batch's rows over DataParallel's
replicas (`tensor.chunk`), and X's columns (W's rows) over tensor-parallel ranks, as DTensor's Shard(1) of
nn.Linear's weight [1, d] cuts them (TP's own run, and the `tp` dimension of a 2-D mesh)."""

from __future__ import annotations

import math


def chunk_sizes(n: int, k: int) -> tuple[int, ...]:
    """Rows per replica when DataParallel scatters n rows over k devices.

    `tensor.chunk(k)` gives chunks of ceil(n / k) rows and a smaller last one, so a batch can use fewer
    than k devices: 9 rows on 4 devices is 3/3/3, and 5 rows on 8 devices is five chunks of 1.
    """
    if n < 1 or k < 1:
        raise ValueError(f"chunk_sizes needs n >= 1 and k >= 1, got n={n}, k={k}")
    size = math.ceil(n / k)
    full, rest = divmod(n, size)
    return (size,) * full + ((rest,) if rest else ())


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
