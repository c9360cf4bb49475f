"""fitcore.view.ranks and fitcore.strategies.ddp.view: each rank's shard (its table and its grid), its shapes,
the planned step."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest
import torch

from fitcore.core.config import FitConfig, validate
from fitcore.strategies.ddp import view as ddp_own
from fitcore.view import controls, results
from fitcore.view import ranks as ddp
from tests.view_helpers import ddp_snapshot, ddp_step, plan_of


def _sampler_rule(n: int, k: int, shuffle: bool, seed: int, epoch: int) -> list[list[int]]:
    """DistributedSampler's shards written out: the epoch's order, its first rows repeated to pad, dealt."""
    order = list(range(n))
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch - 1)).tolist()
    per = math.ceil(n / k)
    padded = order + order[: per * k - n]
    return [padded[rank::k] for rank in range(k)]


@pytest.mark.parametrize(
    "n, k, shuffle, seed",
    [
        (10, 3, True, 0),
        (200, 2, True, 0),
        (7, 4, False, 0),
        (8, 8, True, 5),
        (1, 1, True, 0),
        (13, 5, True, 2),
    ],
)
def test_planned_shards_follow_the_sampler_rule_with_its_padding(n, k, shuffle, seed):
    cfg = FitConfig(
        strategy="ddp", workers=k, devices="cpu", data_size=n, batch_size=n, shuffle=shuffle, seed=seed
    )
    value = ddp.planned_shards(cfg, plan_of(cfg))
    expected = _sampler_rule(n, k, shuffle, seed, 1)
    per, pad = math.ceil(n / k), math.ceil(n / k) * k - n
    assert (value["rows_per_rank"], value["padding"], value["total_size"]) == (per, pad, per * k)
    rows = ddp.shard_rows(value, "first")
    assert [r["Dataset rows"] for r in rows] == [per] * k
    assert [r["Device"] for r in rows] == [f"rank {i} · cpu · gloo" for i in range(k)]
    for row, shard in zip(rows, expected):
        shown = ", ".join(map(str, shard[:12])) + (f", … ({per - 12} more)" if per > 12 else "")
        assert row["Rows, in the rank's order"] == shown
    # the padding is the last `pad` positions of the dealt order: the last shards' last rows
    padded = [[] for _ in range(k)]
    for position in range(n, per * k):
        padded[position % k].append(expected[position % k][position // k])
    assert [r["Padded (repeated)"] for r in rows] == [", ".join(map(str, p)) or "none" for p in padded]
    assert sum(r["Dataset rows"] for r in rows) == n + pad


def test_uneven_shards_preset_pads_two_rows():
    cfg = controls.preset("Uneven shards").config
    value = ddp.planned_shards(cfg, plan_of(cfg))
    order = _sampler_rule(10, 3, True, 0, 1)
    repeated = [order[1][3], order[2][3]]  # positions 10 and 11 of the padded order
    assert [r["Dataset rows"] for r in ddp.shard_rows(value, "first")] == [4, 4, 4]
    assert ddp.shards_title(value, "first") == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 10 dataset rows to 3 ranks, "
        f"ceil(10 / 3) = 4 each; 2 rows ({repeated[0]}, {repeated[1]}) repeated to pad the last shards"
    )
    preset = controls.preset("DistributedDataParallel").config
    assert ddp.shards_title(ddp.planned_shards(preset, plan_of(preset))) == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 200 dataset rows to 2 ranks, "
        "ceil(200 / 2) = 100 each"
    )


@pytest.mark.parametrize(
    "n, batch, k, local",
    [(200, 200, 2, 100), (10, 10, 3, 4), (40, 5, 2, 3), (40, 20, 2, 10), (9, 2, 4, 1)],
)
def test_planned_rank_table_takes_ceil_batch_over_ranks_rows_each(n, batch, k, local):
    cfg = FitConfig(strategy="ddp", workers=k, devices="cpu", data_size=n, batch_size=batch)
    rows = ddp.planned_rank_table(cfg, plan_of(cfg))
    assert [r["Rank"] for r in rows] == list(range(k)) + ["all"]
    assert [r["Rows"] for r in rows] == [local] * k + [local * k]
    assert [r["Input shape"] for r in rows] == [f"[{local}, 2]"] * k + [f"[{local * k}, 2]"]
    assert [r["Output shape"] for r in rows] == [f"[{local}, 1]"] * k + [f"[{local * k}, 1]"]
    assert rows[-1]["Device"] == "All ranks together (never gathered)"
    assert "Local loss" not in rows[0]  # nothing has run: no loss to show


def test_rank_table_shows_each_ranks_local_loss_where_reported():
    rows = ddp.rank_table(ddp_step([1.5, 0.25]))
    assert [r["Local loss"] for r in rows] == ["1.5", "0.25", "mean 0.875"]
    assert [r["Input shape"] for r in rows] == ["[3, 2]", "[3, 2]", "[6, 2]"]
    assert [r["Rows"] for r in rows] == [3, 3, 6]
    assert all("Local loss" not in r for r in ddp.rank_table(ddp_step()))


def test_shards_title_and_agreement_count_one_rank_and_one_padded_row_in_the_singular():
    one = FitConfig(strategy="ddp", workers=1, devices="cpu", data_size=1, batch_size=1)
    assert ddp.shards_title(ddp.planned_shards(one, plan_of(one))) == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 1 dataset row to 1 rank, "
        "ceil(1 / 1) = 1 each"
    )
    seven = FitConfig(strategy="ddp", workers=4, devices="cpu", data_size=7, batch_size=7)
    value = ddp.planned_shards(seven, plan_of(seven))
    repeated = value["first"]["repeated"]
    assert len(repeated) == 1 and ddp.shards_title(value) == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 7 dataset rows to 4 ranks, "
        f"ceil(7 / 4) = 2 each; 1 row ({repeated[0]}) repeated to pad the last shards"
    )
    alone = ddp_snapshot([("rank 0 · cpu · gloo", (5.2, 9.6), 3.4)], status="finished")
    assert results.final_agreement(alone) == (
        "The only rank ended with its own parameters: with 1 rank there is nothing to compare."
    )


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two #rrggbb colours."""

    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_white_numbers_are_readable_on_every_rank_colour():
    assert all(contrast(c, "#ffffff") >= 4.5 for c in ddp.COLOURS), [
        (c, round(contrast(c, "#ffffff"), 2)) for c in ddp.COLOURS
    ]


def ranks_of_ten_on_three() -> list[dict]:
    # 10 rows on 3 ranks, 4 each: ranks 1 and 2 repeat rows 0 and 1 of the order to pad
    return [
        {"rank": 0, "rows": 4, "indices": [3, 6, 9, 2], "padded": []},
        {"rank": 1, "rows": 4, "indices": [4, 7, 0, 3], "padded": [3]},
        {"rank": 2, "rows": 4, "indices": [5, 8, 1, 6], "padded": [6]},
    ]


def test_shard_grid_colours_each_ranks_rows_and_pales_its_padding():
    fig = ddp.shard_grid(ranks_of_ten_on_three(), 10)
    go.Figure(fig)  # plotly checks every property name
    own, pad = fig["data"]
    assert own["y"] == ["rank 0 (4 rows)", "rank 1 (4 rows)", "rank 2 (4 rows)"]
    filled = [[i for i, v in enumerate(row) if v is not None] for row in own["z"]]
    assert filled == [[2, 3, 6, 9], [0, 4, 7], [1, 5, 8]]
    assert [[i for i, v in enumerate(row) if v is not None] for row in pad["z"]] == [[], [3], [6]]
    assert own["textfont"]["color"] == "#ffffff" and pad["textfont"]["color"] == ddp.INK
    # each number once: white where the rank's colour is, ink elsewhere (a gap, or pale padding)
    assert [[i for i, v in enumerate(row) if v] for row in own["text"]] == filled
    assert [[i for i, v in enumerate(row) if v] for row in pad["text"]] == [
        [i for i in range(10) if i not in row] for row in filled
    ]
    assert pad["opacity"] < own["opacity"] == 1.0
    # every cell shows its row number, so the axis under the grid repeats nothing
    assert own["texttemplate"] == "%{text}" and fig["layout"]["xaxis"]["showticklabels"] is False
    assert fig["layout"]["height"] == 36 + 36 * 3


def test_shard_grid_of_many_rows_keeps_the_axis_instead_of_numbers():
    ranks = [{"rank": r, "rows": 50, "indices": list(range(r, 100, 2)), "padded": []} for r in range(2)]
    fig = ddp.shard_grid(ranks, 100)
    go.Figure(fig)
    assert fig["data"][0]["texttemplate"] is None
    assert fig["layout"]["xaxis"]["showticklabels"] is True
    assert fig["layout"]["xaxis"]["title"]["text"] == "dataset row"


def test_ddps_panels_before_a_run_plan_the_first_epochs_shards():
    cfg = controls.preset("Uneven shards").config
    shards, ranks, memory = ddp_own.sections(None, cfg, plan_of(cfg))
    assert memory.name == "memory"
    value = ddp.planned_shards(cfg, plan_of(cfg))
    assert shards.heading == "The shards each rank will get. " + ddp.shards_title(value, "first")
    assert shards.figure == ddp.shard_grid(ddp.shard_table(value, "first"), 10)
    assert len(shards.notes) == 1 and shards.notes[0].startswith("Pale cells are padding")  # 2 rows repeated
    assert ranks.tables == (ddp.shard_rows(value, "first"), ddp.planned_rank_table(cfg, plan_of(cfg)))
    assert ranks.text_columns == ("Rank",)


def test_ddps_shard_grid_gives_way_to_the_table_above_its_row_limit():
    n = ddp.MAX_SHARD_PICTURE_ROWS + 2
    cfg = FitConfig(strategy="ddp", workers=2, devices="cpu", data_size=n, batch_size=n)
    shards, _, _ = ddp_own.sections(None, cfg, plan_of(cfg))
    assert shards.figure is None
    assert shards.notes == (f"{n} rows are too many to draw one by one; the table below counts them.",)


def test_what_each_ddp_rank_holds_is_the_whole_model_measured_or_by_the_formula():
    from fitcore.strategies.ddp import view as ddp_view
    from tests.view_helpers import snapshot

    cfg = validate(FitConfig(weights=(1.0, 2.0, 3.0), strategy="ddp", workers=2, devices="cpu"))
    planned = ddp_view.sections(None, cfg, plan_of(cfg))[-1]
    assert planned.name == "memory" and planned.title == "What each rank holds"
    # W (3) and b: 16 B, its gradients, Adam's two moments (32 B) and two 4-byte step counts
    assert [(r["Parameters"], r["Optimizer state"]) for r in planned.tables[0]] == [("16 B", "40 B")] * 2
    measured = [{"rank": r, "parameters": 16, "gradients": 16, "optimizer_state": 40} for r in range(2)]
    snap = snapshot(config=cfg, devices=("rank 0 · cpu · gloo", "rank 1 · cpu · gloo"),
                    extra={"memory": measured})  # fmt: skip
    held = ddp_view.sections(snap, cfg, plan_of(cfg))[-1]
    assert held.tables[0] == planned.tables[0]
    assert held.notes[0].startswith("Bytes each device or rank holds, measured")
    assert "DDP replicates, it does not shard" in held.notes[1]
