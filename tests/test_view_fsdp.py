"""fitcore.strategies.fsdp.view: who holds which parameters and how many bytes, the picture's FSDP part, its
console lines; and the planned memory against what a real run measures (in tests/test_fsdp.py)."""

from __future__ import annotations

import pytest

from fitcore.core.config import FitConfig, check, validate
from fitcore.kit import live
from fitcore.strategies.fsdp import view as fsdp
from fitcore.strategies.fsdp.layout import planned_memory, shards_value
from tests.view_helpers import plan_of

THREE = FitConfig(weights=(5.2, 9.6, -1.0), strategy="fsdp", workers=2, devices="cpu")


@pytest.mark.parametrize(
    "d, k, names",
    [
        (3, 2, [["w1", "w2", "b"], ["w3"]]),  # torch.chunk: ceil(3/2) = 2 rows, then 1; b on rank 0
        (3, 3, [["w1", "b"], ["w2"], ["w3"]]),
        (2, 3, [["w1", "b"], ["w2"], []]),  # fewer rows than ranks: the last holds nothing
        (1, 1, [["w1", "b"]]),
    ],
)
def test_each_rank_holds_torch_chunks_rows_of_w_and_b_on_rank_0(d, k, names):
    cfg = FitConfig(weights=tuple(range(1, d + 1)), strategy="fsdp", workers=k, devices="cpu")
    assert fsdp.shard_names(cfg, k) == names


def test_planned_memory_is_padded_shards_and_adam_of_the_real_rows():
    # 3 weights on 2 ranks: shards padded to ceil(3/2) + ceil(1/2) = 3 float32 numbers, 12 B each of
    # parameters and gradients; Adam: two moments of the real rows (3 on rank 0, 1 on rank 1), 8 B of steps
    assert [planned_memory(THREE, r, 2) for r in (0, 1)] == [
        {"rank": 0, "parameters": 12, "gradients": 12, "optimizer_state": 2 * 3 * 4 + 8},
        {"rank": 1, "parameters": 12, "gradients": 12, "optimizer_state": 2 * 1 * 4 + 8},
    ]
    sgd = FitConfig(**{**THREE.__dict__, "optimizer": "sgd"})
    assert planned_memory(sgd, 1, 2)["optimizer_state"] == 0  # plain SGD keeps no state


def test_the_planned_page_shows_what_each_rank_holds_and_says_it_is_planned():
    cfg = validate(THREE)
    own, *ddps = fsdp.sections(None, cfg, plan_of(cfg))
    assert own.title == "What each rank holds (ZeRO-3)" and [s.name for s in ddps] == ["shards", "ranks"]
    (rows,) = own.tables
    assert [(r["Rank"], r["Holds"], r["Parameters"], r["Optimizer state"]) for r in rows] == [
        (0, "w1, w2, b", "12 B", "32 B"),
        (1, "w3", "12 B", "16 B"),
    ]
    assert own.notes[0].startswith("Bytes each rank will hold, by the formula")
    zero2_cfg = validate(FitConfig(**{**THREE.__dict__, "reshard_after_forward": False}))
    zero2 = fsdp.sections(None, zero2_cfg, plan_of(zero2_cfg))[0]
    assert zero2.title == "What each rank holds (ZeRO-2)" and "ZeRO-2" in zero2.notes[1]


def test_the_planned_picture_gives_each_rank_its_shard_and_the_zero_stage():
    pic = live.planned_payload(check(THREE, gpus=[]))["picture"]
    assert pic["drawer"] == "fsdp" and pic["zero"] == 3 and pic["memory_measured"] is False
    assert [d["shard"]["names"] for d in pic["devices"]] == [["w1", "w2", "b"], ["w3"]]
    assert [d["shard"]["rows"] for d in pic["devices"]] == [[0, 2], [2, 3]]
    assert all("memory" not in d for d in pic["devices"])  # nothing measured before a run
    # the bytes of the planned step, side by side: FSDP's 2 ranks send 3 shards of 3 numbers each way
    assert pic["bytes"]["fsdp"] == 2 * 3 * 1 * 3 * 4 and pic["strategy_labels"]["fsdp"] == "FSDP"


def test_the_console_lines_say_who_holds_what_and_its_bytes():
    value = shards_value(3, 2, ("rank 0 · cpu · gloo", "rank 1 · cpu · gloo"), True)
    value["per_rank_memory"] = [planned_memory(THREE, r, 2) for r in (0, 1)]
    assert fsdp.layout_lines(value) == [
        "FSDP (ZeRO-3) on 2 ranks: W (d, 1) and b cut by rows, each shard padded to 3 numbers",
        "\trank 0 holds W[0:2] + b; parameters 12 B, gradients 12 B, optimizer state 32 B",
        "\trank 1 holds W[2:3]; parameters 12 B, gradients 12 B, optimizer state 16 B",
    ]


@pytest.mark.parametrize(
    "d, k, says",
    [
        (3, 2, "with 3 weights on 2 ranks, rank 0 holds `w1, w2` and `b`, rank 1 holds `w3`."),
        (3, 3, "with 3 weights on 3 ranks, rank 0 holds `w1` and `b`, rank 1 holds `w2`, rank 2 holds `w3`."),
        (2, 3, "with 2 weights on 3 ranks, rank 0 holds `w1` and `b`, rank 1 holds `w2`, rank 2 holds "
               "nothing."),
    ],
)
def test_the_explanation_describes_the_shown_runs_shards(d, k, says):
    from fitcore.protocols import registry

    cfg = FitConfig(weights=tuple(range(1, d + 1)), strategy="fsdp", workers=k, devices="cpu")
    text = " ".join(registry.strategy("fsdp").markdown(cfg).split())
    assert says in text


def test_fsdps_rank_panels_say_what_fsdp_does_not_what_ddp_does():
    from tests.view_helpers import ddp_step, snapshot

    three = dict(weights=(5.2, 9.6, -1.0), strategy="fsdp", workers=2, devices="cpu")
    cfg = validate(FitConfig(**three, data_size=11, batch_size=4))
    snap = snapshot(config=cfg, latest=ddp_step(losses=(1.0, 3.0)), devices=("rank 0", "rank 1"))
    _, shards, ranks = fsdp.sections(snap, cfg, plan_of(cfg))
    (caption,) = ranks.notes
    assert caption.startswith("Step 7: each rank runs forward on its own rows with the whole W it all-gathe")
    assert "reduce-scatters" in caption and "DDP" not in caption
    assert "DDP" not in " ".join(shards.notes)
    from fitcore.strategies.ddp import view as ddp_view

    ddp_cfg = validate(FitConfig(strategy="ddp", workers=2, devices="cpu", data_size=11, batch_size=4))
    ddp_snap = snapshot(config=ddp_cfg, latest=ddp_step(losses=(1.0, 3.0)))
    ddp_panels = ddp_view.sections(ddp_snap, ddp_cfg, plan_of(ddp_cfg))
    assert "DDP all-reduces the gradients" in ddp_panels[1].notes[0]
