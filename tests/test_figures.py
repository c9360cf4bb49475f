"""fitcore.figures: the page's plotly figures from plain data, checked without a page."""

from __future__ import annotations

import plotly.graph_objects as go

from fitcore import figures


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two #rrggbb colours."""

    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_white_numbers_are_readable_on_every_rank_colour():
    assert all(contrast(c, "#ffffff") >= 4.5 for c in figures.COLOURS), [
        (c, round(contrast(c, "#ffffff"), 2)) for c in figures.COLOURS
    ]


def ranks_of_ten_on_three() -> list[dict]:
    # 10 rows on 3 ranks, 4 each: ranks 1 and 2 repeat rows 0 and 1 of the order to pad
    return [
        {"rank": 0, "rows": 4, "indices": [3, 6, 9, 2], "padded": []},
        {"rank": 1, "rows": 4, "indices": [4, 7, 0, 3], "padded": [3]},
        {"rank": 2, "rows": 4, "indices": [5, 8, 1, 6], "padded": [6]},
    ]


def test_shard_grid_colours_each_ranks_rows_and_pales_its_padding():
    fig = figures.shard_grid(ranks_of_ten_on_three(), 10)
    go.Figure(fig)  # plotly checks every property name
    own, pad = fig["data"]
    assert own["y"] == ["rank 0 (4 rows)", "rank 1 (4 rows)", "rank 2 (4 rows)"]
    filled = [[i for i, v in enumerate(row) if v is not None] for row in own["z"]]
    assert filled == [[2, 3, 6, 9], [0, 4, 7], [1, 5, 8]]
    assert [[i for i, v in enumerate(row) if v is not None] for row in pad["z"]] == [[], [3], [6]]
    assert own["textfont"]["color"] == "#ffffff" and pad["textfont"]["color"] == figures.INK
    assert pad["opacity"] < own["opacity"] == 1.0
    # every cell shows its row number, so the axis under the grid repeats nothing
    assert own["texttemplate"] == "%{text}" and fig["layout"]["xaxis"]["showticklabels"] is False
    assert fig["layout"]["height"] == 36 + 36 * 3


def test_shard_grid_of_many_rows_keeps_the_axis_instead_of_numbers():
    ranks = [{"rank": r, "rows": 50, "indices": list(range(r, 100, 2)), "padded": []} for r in range(2)]
    fig = figures.shard_grid(ranks, 100)
    go.Figure(fig)
    assert fig["data"][0]["texttemplate"] is None
    assert fig["layout"]["xaxis"]["showticklabels"] is True
    assert fig["layout"]["xaxis"]["title"]["text"] == "dataset row"
