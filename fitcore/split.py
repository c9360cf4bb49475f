"""How a step's batch is cut over the ranks: which rows and which columns of X each rank takes.

A strategy declares its Split (`Strategy.split`, and its Engine's); the engine, the config's rules, the
checks and the pictures read it instead of asking which strategy ran. DDP and FSDP cut the rows (each rank
its own shard of the batch, DistributedSampler's); TP cuts the columns (every rank every row, and its
torch.chunk features of X).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

Span = tuple[int, int]  # [lo, hi)


class RankSpan(NamedTuple):
    """What one rank takes of the step's batch: its rows and, where the columns are cut, its columns."""

    rows: Span  # positions in the batch
    columns: Span | None  # features of X; None: every feature


@dataclass(frozen=True)
class Split:
    """Which parts of the batch X (B, d) a rank takes: its own rows, its own columns, or both."""

    rows: bool  # each rank its own rows of the batch
    columns: bool  # each rank its own columns (features) of X

    def row_ranks(self, world_size: int) -> int:
        """Over how many ranks the rows are cut: all of them, or none (every rank every row)."""
        return world_size if self.rows else 1

    def spans(self, shapes: Sequence[tuple[int, ...]]) -> tuple[list[RankSpan], tuple[int, int]]:
        """Each rank's span of the batch from the shapes of what the ranks took, (rows, columns) each, in
        rank order, numbered on from the rank before it; and the whole batch's shape, (B, d)."""
        spans, row, column = [], 0, 0
        for n, c in shapes:
            rows = (row, row + n) if self.rows else (0, n)
            columns = (column, column + c) if self.columns else None
            spans.append(RankSpan(rows, columns))
            row, column = row + n * self.rows, column + c * self.columns
        first_rows, first_columns = shapes[0]
        return spans, (row if self.rows else first_rows, column if self.columns else first_columns)


ROWS = Split(rows=True, columns=False)  # DDP's and FSDP's: each rank its rows, every column
COLUMNS = Split(rows=False, columns=True)  # TP's: every rank every row, its columns
