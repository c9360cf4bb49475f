"""How a step's batch is cut over the ranks: which rows and which columns of X each rank takes.

A strategy declares its Split (`Strategy.split`, and its Engine's); the engine, the config's rules, the
checks and the pictures read it instead of asking which strategy ran. A split names the mesh dimension
(fitcore.protocols.mesh) that cuts the rows and the one that cuts the columns: DDP and FSDP cut the rows over
`dp` (each rank its own shard of the batch, DistributedSampler's); TP cuts the columns over `tp` (every rank
every row, and its torch.chunk features of X). A 2-D mesh cuts both, a rank's block of rows by its `dp`
coordinate and its block of columns by its `tp` coordinate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

from fitcore.protocols.mesh import DP, TP

Span = tuple[int, int]  # [lo, hi)


class RankSpan(NamedTuple):
    """What one rank takes of the step's batch: its rows and, where the columns are cut, its columns."""

    rows: Span  # positions in the batch
    columns: Span | None  # features of X; None: every feature


@dataclass(frozen=True)
class Split:
    """Which parts of the batch X (B, d) a rank takes: the mesh dimension that cuts its rows, and the one
    that cuts its columns (None: not cut, every rank takes all of them). A dimension cuts only where the
    run's mesh has it: DDP's split names `tp` for its columns, which a 1-D DDP mesh (dp only) leaves whole."""

    rows: str | None  # the dimension whose coordinate gives a rank its rows
    columns: str | None  # the dimension whose coordinate gives a rank its columns (features) of X

    def row_ranks(self, dims: Sequence[tuple[str, int]]) -> int:
        """Over how many ranks the rows are cut: the size of the rows' dimension, or 1 (every rank takes
        every row)."""
        return dict(dims).get(self.rows, 1) if self.rows else 1

    def spans(
        self, shapes: Sequence[tuple[int, ...]], coords: Sequence[Mapping[str, int]]
    ) -> tuple[list[RankSpan], tuple[int, int]]:
        """Each rank's span of the batch from the shapes of what the ranks took, (rows, columns) each in rank
        order, and their coordinates on the mesh: the blocks numbered on along each cut dimension; and the
        whole batch's shape, (B, d)."""
        rows = _starts(self.rows, (s[0] for s in shapes), coords)
        columns = _starts(self.columns, (s[1] for s in shapes), coords)
        spans = []
        for (n, c), at in zip(shapes, coords):
            row = rows[0][at[self.rows]] if self.rows is not None and self.rows in at else 0
            column = columns[0][at[self.columns]] if self.columns is not None and self.columns in at else None
            spans.append(RankSpan((row, row + n), None if column is None else (column, column + c)))
        first_rows, first_columns = shapes[0]
        cut_rows, cut_columns = self.rows in coords[0], self.columns in coords[0]
        return spans, (rows[1] if cut_rows else first_rows, columns[1] if cut_columns else first_columns)


def _starts(
    dim: str | None, sizes: Iterable[int], coords: Sequence[Mapping[str, int]]
) -> tuple[dict[int, int], int]:
    """Where each block along `dim` starts, by its coordinate, and the blocks' total: each coordinate's
    size is its first rank's (the ranks that share a coordinate share its block)."""
    size_of: dict[int, int] = {}
    for size, at in zip(sizes, coords):
        size_of.setdefault(at.get(dim, 0) if dim else 0, size)
    starts, total = {}, 0
    for index in sorted(size_of):
        starts[index], total = total, total + size_of[index]
    return starts, total


ROWS = Split(rows=DP, columns=TP)  # DDP's and FSDP's: each rank its rows; on a dp x tp mesh, its columns
COLUMNS = Split(rows=None, columns=TP)  # TP's: every rank every row, its columns
# a pipeline's: every rank the whole batch (what it cuts is the model's layers)
WHOLE = Split(rows=None, columns=None)
