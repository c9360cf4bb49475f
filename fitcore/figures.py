"""The page's plotly figures, as plain dicts built from plain data: no streamlit, testable on their own.

The live view (the step picture, the loss and the parameter charts) is drawn in the browser from
fitcore.live's payload; what stays a server-side figure is what changes at most once an epoch: DDP's shard
grid.
"""

from __future__ import annotations

from typing import Any

# One colour per device or rank, dark enough for white numbers on it (contrast >= 4.5 against white).
COLOURS = ("#1f6feb", "#c2410c", "#2f7d32", "#9333ea", "#b45309", "#0e7490", "#be185d", "#4d7c0f")
INK = "#111418"  # the page's text colour
# large, dark type in the page's own font: the page is projected in a classroom
FONT = dict(family='"Source Sans", "Source Sans Pro", sans-serif', size=16, color=INK)
AXIS = dict(showline=True, linecolor="#8a94a0", gridcolor="#e3e7ec", zeroline=False, tickfont=dict(size=15))
MAX_SHARD_PICTURE_ROWS = 2000  # dataset rows the shard grid draws one cell each; above, the table only
MAX_CELL_NUMBERS = 40  # rows up to which each cell shows its dataset row number


def layout(height: int, **more: Any) -> dict:
    """A figure's layout in the page's colours and type (drawn with theme=None so that these sizes hold)."""
    base = dict(
        template="none",
        height=height,
        margin=dict(l=10, r=10, t=10, b=10),
        font=FONT,
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
    )
    return base | more


def shard_grid(ranks: list[dict], data_size: int) -> dict:
    """DDP's shards as a grid: a row per rank, a cell per dataset row, coloured where the rank got it.

    Args:
        ranks: one dict per rank, in order: {"rank", "rows", "indices", "padded"} as ddp.shard_table gives
            (the dataset rows the rank got this epoch, and those repeated to pad its shard).
        data_size: rows in the dataset.

    Returns a figure dict {"data": [...], "layout": {...}}. Each cell that shows a number shows it in
    white on the rank's colour, or in the page's ink on a pale padding cell: readable on every colour.
    """
    n, k = data_size, len(ranks)
    names = [f"rank {r['rank']} ({r['rows']} rows)" for r in ranks]
    own = [[None] * n for _ in range(k)]  # (K, N): the rank's number where it got the row, else a gap
    pad = [[None] * n for _ in range(k)]  # the same for the rows repeated to pad its shard
    for r in ranks:
        for i in r["indices"]:
            own[r["rank"]][i] = r["rank"]
        for i in r["padded"]:
            own[r["rank"]][i], pad[r["rank"]][i] = None, r["rank"]
    # one flat colour per rank: value r falls in the band [r / K, (r + 1) / K] of the colour scale
    scale = [[(r + edge) / k, COLOURS[r % len(COLOURS)]] for r in range(k) for edge in (0, 1)]
    numbers = n <= MAX_CELL_NUMBERS
    text = [[str(i) for i in range(n)]] * k
    data = []
    for z, opacity, colour, what in ((own, 1.0, "#ffffff", "got"), (pad, 0.3, INK, "repeated to pad")):
        data.append(dict(
            type="heatmap",
            x=list(range(n)), y=names, z=z, zmin=-0.5, zmax=k - 0.5, colorscale=scale, showscale=False,
            opacity=opacity, xgap=1 if n <= 400 else 0, ygap=4, hoverongaps=False,
            text=text, texttemplate="%{text}" if numbers else None, textfont=dict(color=colour, size=15),
            hovertemplate=f"dataset row %{{x}}: {what} by %{{y}}<extra></extra>",
        ))  # fmt: skip
    # where every cell shows its row number, tick labels under the grid would only repeat them
    rows_axis = AXIS | dict(
        range=[-0.5, n - 0.5], showgrid=False, showline=False, ticks="", automargin=True,
        showticklabels=not numbers, title=dict(text="dataset row" if not numbers else "", standoff=4),
    )  # fmt: skip
    return dict(
        data=data,
        layout=layout(
            (36 if numbers else 60) + 36 * k,
            showlegend=False,
            margin=dict(l=10, r=10, t=4, b=6),
            xaxis=rows_axis,
            yaxis=AXIS | dict(autorange="reversed", showgrid=False, showline=False, automargin=True),
        ),
    )
