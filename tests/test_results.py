"""fitcore.view.results: the parameters' table, every rank's parameters, the history CSV, the result JSON."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path

import pytest

from fitcore.core import i18n
from fitcore.core.config import FitConfig
from fitcore.kit import live
from fitcore.strategies.dataparallel.view import split_table
from fitcore.view import results
from tests.view_helpers import ddp_snapshot, run_to_end, snapshot


def test_results_table_against_least_squares():
    cfg = FitConfig(noise=1.0, data_size=50, batch_size=50, epochs=300)
    snap = run_to_end(cfg)
    rows = results.results_table(snap)
    assert [r["Parameter"] for r in rows] == ["w1", "w2", "b"]
    for row, learned, true, ref in zip(
        rows,
        list(snap.weights) + [snap.bias],
        list(cfg.weights) + [cfg.bias],
        list(snap.lstsq_weights) + [snap.lstsq_bias],
    ):
        assert (row["Learned"], row["True"], row["Least squares"]) == (learned, true, ref)
        assert row["Learned − true"] == pytest.approx(learned - true)
        assert row["Learned − least squares"] == pytest.approx(learned - ref)
        assert abs(row["Learned − least squares"]) < 2e-3
    assert results.results_table(snapshot()) == []  # nothing learned yet


def test_history_csv_holds_every_kept_point():
    snap = run_to_end(FitConfig(epochs=30))
    text = results.history_csv(snap)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["step", "loss", "w1", "w2", "b"]
    assert [int(r["step"]) for r in rows] == list(range(1, 31))
    assert [float(r["loss"]) for r in rows] == [loss for _, loss in snap.loss_history]
    last = rows[-1]
    assert [float(last[k]) for k in ("w1", "w2", "b")] == list(snap.param_history[-1][1])


def test_history_csv_leaves_cells_empty_where_a_series_thinned():
    snap = snapshot(
        loss_history=((1, 4.0), (2, 3.0), (3, 2.0)),
        param_history=((1, (1.0, 2.0, 3.0)), (3, (1.5, 2.5, 3.5))),
    )
    assert results.history_csv(snap) == "step,loss,w1,w2,b\n1,4.0,1.0,2.0,3.0\n2,3.0,,,\n3,2.0,1.5,2.5,3.5\n"


def test_json_rows_read_like_the_pages_table():
    """One convention for people: the page's "Batch rows 0–66" is {"first_position": 0, "last_position": 66,
    "rows": 67} in JSON's `batch_rows`: positions in the batch, named so beside the dataset ids."""
    snap = run_to_end(FitConfig(devices="virtual:3", epochs=1, shuffle=False))
    table = split_table(snap.first)
    data = json.loads(results.result_json(snap))
    rows = [r["batch_rows"] for r in data["first_step"]["replicas"]]
    assert [t["Batch rows"] for t in table[:-1]] == ["0–66", "67–133", "134–199"]
    assert rows == [
        {"first_position": 0, "last_position": 66, "rows": 67},
        {"first_position": 67, "last_position": 133, "rows": 67},
        {"first_position": 134, "last_position": 199, "rows": 66},
    ]
    spans = [f"{r['first_position']}–{r['last_position']}" for r in rows]
    assert spans == [t["Batch rows"] for t in table[:-1]]
    assert [r["rows"] for r in rows] == [t["Rows"] for t in table[:-1]] == [67, 67, 66]


def test_json_says_which_strategy_and_devices_ran():
    snap = run_to_end(FitConfig(devices="virtual:3", epochs=1))
    data = json.loads(results.result_json(snap))
    assert (data["strategy"], data["parallelism"], data["emulated"]) == (
        "dataparallel",
        "DataParallel emulated on the CPU (virtual:3)",
        True,
    )
    assert data["devices"] == [f"virtual:{i} (emulated on CPU)" for i in range(3)]
    assert "data_parallel" not in data
    started = snap.started
    gpus = dataclasses.replace(started, devices=("cuda:0", "cuda:1"), emulated=False, data_parallel=True)
    assert results.parallelism(FitConfig(devices="cuda:0,1"), gpus) == "nn.DataParallel on cuda:0,1"
    on_gpu = FitConfig(devices="virtual:2@cuda:0")
    assert results.parallelism(on_gpu, started) == "DataParallel emulated on cuda:0 (virtual:2@cuda:0)"
    one = dataclasses.replace(started, devices=("cpu",), emulated=False, data_parallel=False)
    assert results.parallelism(FitConfig(devices="cpu"), one) == "one device, no split (cpu)"
    ranks = ("rank 0 · cpu · gloo", "rank 1 · cpu · gloo")
    ddp_cfg = FitConfig(strategy="ddp", workers=2, devices="cpu")
    ddp_started = dataclasses.replace(started, devices=ranks, emulated=False, data_parallel=False)
    assert results.parallelism(ddp_cfg, ddp_started) == "DistributedDataParallel, 2 ranks, gloo"
    alone = dataclasses.replace(ddp_started, devices=ranks[:1])
    assert results.parallelism(ddp_cfg, alone) == "DistributedDataParallel, 1 rank, gloo"
    assert results.parallelism(ddp_cfg, None) is None


def test_result_json_of_a_finished_and_a_diverged_run():
    snap = run_to_end(FitConfig(devices="virtual:3", epochs=20))
    data = json.loads(results.result_json(snap))
    assert data["status"] == "finished" and data["steps"] == 20
    assert data["config"]["devices"] == "virtual:3"
    assert data["weights"] == list(snap.weights) and data["true_weights"] == [5.2, 9.6]
    assert [r["input_shape"] for r in data["latest_step"]["replicas"]] == [[67, 2], [67, 2], [66, 2]]
    assert [p["Parameter"] for p in data["parameters"]] == ["w1", "w2", "b"]
    diverged = snapshot(status="diverged", weights=(math.inf, 1.0), bias=math.nan, final_loss=math.inf)
    data = json.loads(results.result_json(diverged))  # strict JSON: no Infinity or NaN
    assert (data["weights"], data["bias"], data["final_loss"]) == ([None, 1.0], None, None)


def test_final_rows_and_agreement_of_the_ranks():
    same = [("rank 0 · cpu · gloo", (5.2, 9.6), 3.4), ("rank 1 · cpu · gloo", (5.2, 9.6), 3.4)]
    snap = ddp_snapshot(same, status="finished")
    assert results.final_rows(snap) == [
        {"Rank": 0, "Device": "rank 0 · cpu · gloo", "w1": 5.2, "w2": 9.6, "b": 3.4},
        {"Rank": 1, "Device": "rank 1 · cpu · gloo", "w1": 5.2, "w2": 9.6, "b": 3.4},
    ]
    assert results.final_agreement(snap) == (
        "All 2 ranks ended with identical parameters (largest difference 0): DDP kept them in step."
    )
    apart = ddp_snapshot([same[0], ("rank 1 · cpu · gloo", (5.2, 9.1), 3.4)], status="finished")
    assert results.final_agreement(apart) == "The ranks' parameters differ: largest difference 0.5."
    nothing = ddp_snapshot(None)
    assert results.final_rows(nothing) == [] and results.final_agreement(nothing) is None


HOUSES = str(Path(__file__).resolve().parents[1] / "examples" / "houses.csv")


def test_a_csv_run_names_its_file_target_and_columns_and_says_how_far_it_ended():
    # lr 1 on batches of 16 of the 120 rows: Adam's steps and the minibatch noise keep it off the answer
    cfg = FitConfig(data=HOUSES, target="price", batch_size=16, lr=1.0, epochs=40)
    snap = run_to_end(cfg)
    body = live.payload(snap, 0, 3)
    assert body["names"] == ["area", "rooms", "age", "b"]  # the parameter chart's legend
    label = "Run 3 · DataParallel · virtual:2 · houses.csv: price from area, rooms, age"
    assert body["run"]["label"] == label
    assert [r["Parameter"] for r in results.results_table(snap)] == ["area", "rooms", "age", "b"]
    learned = list(snap.weights) + [snap.bias]
    gap = max(abs(a - b) for a, b in zip(learned, list(snap.lstsq_weights) + [snap.lstsq_bias]))
    assert gap > 1e-2  # a real distance, not a rounding
    note = results.least_squares_gap(snap)
    assert note.startswith(f"This run ended {gap:.3g} from the least-squares answer")
    assert "a smaller learning rate (0.1 instead of 1)" in note
    assert "a larger batch (up to all 120 rows instead of 16)" in note
    with i18n.using("zh"):
        zh = results.least_squares_gap(snap)
        assert live.payload(snap, 0, 3)["run"]["label"].endswith("houses.csv：由 area, rooms, age 预测 price")
    assert f"还差 {gap:.3g}" in zh and "用 0.1 代替 1" in zh and "最多用全部 120 行" in zh
    # the same file at full batch and a small rate settles: nothing to say
    settled = run_to_end(dataclasses.replace(cfg, batch_size=120, lr=0.05, epochs=300))
    assert results.least_squares_gap(settled) is None


def test_a_csv_runs_history_names_the_files_columns():
    """The history CSV's header is the file's feature columns and b, as the page names the parameters; a
    column that would clash with step or loss falls back to w1 ... wd."""
    from tests.view_helpers import snapshot

    cfg = FitConfig(data="houses.csv", target="price", features=("area", "rooms", "age"), weights=(1.0,) * 3)
    snap = snapshot(config=cfg, loss_history=((1, 4.0),), param_history=((1, (1.0, 2.0, 3.0, 0.5)),))
    assert results.history_csv(snap) == "step,loss,area,rooms,age,b\n1,4.0,1.0,2.0,3.0,0.5\n"
    clash = dataclasses.replace(cfg, features=("area", "loss", "age"))
    assert (
        results.history_csv(dataclasses.replace(snap, config=clash)).splitlines()[0] == "step,loss,w1,w2,w3,b"
    )
