"""fitcore.report: presets, URL <-> controls, the status line, the split, results, CSV and JSON."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re

import pytest
import torch

from fitcore import report
from fitcore.config import ConfigError, FitConfig, validate
from fitcore.data import make_data
from fitcore.parallel import chunk_sizes
from fitcore.runner import Run, Snapshot
from fitcore.train import Step, train


def _run(cfg: FitConfig) -> Snapshot:
    """Train cfg to the end in a Run and return its final snapshot."""
    run = Run(validate(cfg)).start()
    assert run.wait(60)
    return run.snapshot()


def _steps(cfg: FitConfig) -> list[Step]:
    events: list = []
    train(validate(cfg), events.append)
    return [e for e in events if isinstance(e, Step)]


# ---------------------------------------------------------------------------------------------------------
# Presets.


def test_every_preset_is_valid_and_named_once():
    names = [p.name for p in report.PRESETS]
    assert len(set(names)) == len(names) == 5
    for p in report.PRESETS:
        validate(p.config)
        assert report.preset(p.name) is p


def test_tutorial_preset_is_the_tutorial_and_the_default():
    cfg = report.preset("The tutorial").config
    assert (cfg.weights, cfg.bias, cfg.data_size, cfg.batch_size) == ((5.2, 9.6), 3.4, 200, 200)
    assert (cfg.optimizer, cfg.lr, cfg.epochs, cfg.devices) == ("adam", 0.5, 200, "virtual:2")
    assert report.matching_preset(report.defaults()).name == "The tutorial"


def test_split_presets_cut_the_batch_as_their_lessons_say():
    uneven = report.preset("Uneven split").config
    assert (uneven.batch_size, uneven.devices) == (200, "virtual:3")
    assert chunk_sizes(200, 3) == (67, 67, 66)
    few = report.preset("Fewer rows than devices").config
    assert (few.batch_size, few.devices) == (5, "virtual:8") and few.data_size >= 8
    assert chunk_sizes(5, 8) == (1, 1, 1, 1, 1)
    # and what the trainer really records agrees
    assert [r.rows for r in _steps(dataclasses.replace(uneven, epochs=1))[0].replicas] == [67, 67, 66]
    assert [r.rows for r in _steps(dataclasses.replace(few, epochs=1))[0].replicas] == [1] * 5


def test_too_high_a_learning_rate_really_diverges():
    snap = _run(report.preset("Too high a learning rate").config)
    assert snap.status == "diverged"
    assert 0 < snap.step < snap.total_steps
    assert "too high" in snap.message
    # the same setup with a sensible rate converges, so it is the rate that diverges
    fine = _run(dataclasses.replace(report.preset("Too high a learning rate").config, lr=0.5))
    assert fine.status == "finished"


def test_noisy_preset_learns_least_squares_not_the_truth():
    cfg = report.preset("Noisy data").config
    snap = _run(cfg)
    assert snap.status == "finished"
    X, y = make_data(cfg)
    A = torch.cat([X.double(), torch.ones(len(X), 1, dtype=torch.float64)], 1)
    ref = torch.linalg.lstsq(A, y.double()).solution.view(-1).tolist()
    learned = list(snap.weights) + [snap.bias]
    true = list(cfg.weights) + [cfg.bias]
    assert learned == pytest.approx(ref, abs=2e-3)
    assert max(abs(a - b) for a, b in zip(learned, true)) > 0.1  # visibly not the true values


def test_matching_preset_needs_every_control_equal():
    values = report.config_values(report.preset("Uneven split").config)
    assert report.matching_preset(values).name == "Uneven split"
    assert report.matching_preset({**values, "seed": 1}) is None


# ---------------------------------------------------------------------------------------------------------
# The URL.


@pytest.mark.parametrize(
    "cfg, pace",
    [
        (FitConfig(), "20"),
        (FitConfig(weights=(1.5, -2.0, 0.125), bias=-0.5, noise=0.3, devices="virtual:4"), "max"),
        (FitConfig(data_size=1000, batch_size=64, epochs=3, lr=0.01, optimizer="sgd", shuffle=False), "1"),
        (FitConfig(seed=2**40, weights=(1e-7,)), "200"),
    ],
)
def test_query_round_trip(cfg, pace):
    query = report.to_query(report.config_values(cfg), pace)
    assert all(isinstance(v, str) for v in query.values())
    values, got_pace, errors = report.from_query(query)
    assert errors == []
    assert got_pace == pace
    assert values == report.config_values(cfg)


def test_query_text():
    query = report.to_query(report.config_values(FitConfig(devices="virtual:3", shuffle=False)), "max")
    assert query == {
        "weights": "5.2,9.6",
        "bias": "3.4",
        "noise": "0",
        "data_size": "200",
        "batch_size": "200",
        "epochs": "200",
        "lr": "0.5",
        "optimizer": "adam",
        "shuffle": "false",
        "seed": "0",
        "devices": "virtual:3",
        "pace": "max",
    }


@pytest.mark.parametrize(
    "params, message",
    [
        ({"data_size": "abc"}, "data_size: got 'abc'; allowed: an integer"),
        ({"batch_size": "2.5"}, "batch_size: got '2.5'; allowed: an integer"),
        ({"lr": "inf"}, "lr: got 'inf'; allowed: a finite number"),
        ({"bias": "nan"}, "bias: got 'nan'; allowed: a finite number"),
        ({"weights": ""}, "weights: got ''; allowed: 1 to 16 numbers"),
        ({"weights": "1,x"}, "weights: got '1,x'; allowed: 1 to 16 numbers"),
        (
            {"weights": ",".join(["1"] * 33)},
            f"weights: got {','.join(['1'] * 33)!r}; allowed: 1 to 16 numbers",
        ),
        ({"optimizer": "rmsprop"}, "optimizer: got 'rmsprop'; allowed: adam or sgd"),
        ({"shuffle": "maybe"}, "shuffle: got 'maybe'; allowed: true or false"),
        ({"seed": str(2**60)}, f"seed: got '{2**60}'; allowed: an integer from -{2**53 - 1} to {2**53 - 1}"),
        ({"devices": "cpu"}, "devices: got 'cpu'; allowed: virtual:K (K from 1 to 8) or cuda:i,j,..."),
        (
            {"pace": "7"},
            "pace: got '7'; allowed: one of 1, 2, 5, 10, 20, 50, 100, 200, max (steps per second)",
        ),
    ],
)
def test_bad_query_values_are_reported_and_left_out(params, message):
    values, pace, errors = report.from_query({**params, "epochs": "7", "embed": "true"})
    assert [str(e) for e in errors] == [message]
    assert values == {"epochs": 7}  # the good one is kept, Streamlit's own `embed` is ignored
    assert pace is None


def test_bad_device_in_query_names_what_this_machine_allows():
    _, _, errors = report.from_query({"devices": "virtual:9"}, gpus=[])
    assert [e.field for e in errors] == ["devices"]
    assert "virtual:K (K from 1 to 8)" in str(errors[0]) and "0 CUDA GPUs" in str(errors[0])


def test_query_keeps_what_only_validation_refuses():
    """A link with batch > data is a setup the controls can hold: validation, not the URL, reports it."""
    values, _, errors = report.from_query({"batch_size": "300", "data_size": "200"})
    assert errors == [] and values == {"batch_size": 300, "data_size": 200}
    with pytest.raises(ConfigError) as exc:
        report.config_from_controls({**report.defaults(), **values})
    assert str(exc.value) == "batch_size: got 300; allowed: an integer from 1 to 200 (the data size)"
    assert report.error_text(exc.value) == "Batch size: " + str(exc.value)


def test_config_differences_name_each_changed_control():
    running = FitConfig()
    values = {**report.config_values(running), "batch_size": 100, "weights": (5.2, 1.0)}
    assert report.config_differences(values, running) == [
        "True weights: [5.2, 9.6] in the run, [5.2, 1] in the controls",
        "Batch size: 200 in the run, 100 in the controls",
    ]
    assert report.config_differences(report.config_values(running), running) == []


# ---------------------------------------------------------------------------------------------------------
# The status line.


def _snap(**kw) -> Snapshot:
    base = dict(run_id="run-9", status="running", message="epoch 12, step 12", config=FitConfig())
    base.update(kw)
    return Snapshot(**base)


@pytest.mark.parametrize(
    "kw, line",
    [
        (
            dict(step=12, epoch=12, total_steps=200, steps_per_second=95.2),
            "Running · epoch 12 / 200 · step 12 / 200 · 95 steps/s",
        ),
        (dict(status="paused", step=3, epoch=3, total_steps=200), "Paused · epoch 3 / 200 · step 3 / 200"),
        (
            dict(status="queued", queue_position=2, total_steps=200, message="waiting: 2 runs ahead"),
            "Queued · position 2 in the queue · step 0 / 200 · waiting: 2 runs ahead",
        ),
        (
            dict(
                status="finished", step=200, epoch=200, total_steps=200, steps_per_second=1000, message="done"
            ),
            "Finished · epoch 200 / 200 · step 200 / 200 · 1000 steps/s · done",
        ),
        (
            dict(status="diverged", step=42, epoch=43, total_steps=200, message="the loss became inf"),
            "Diverged · epoch 43 / 200 · step 42 / 200 · the loss became inf",
        ),
        (
            dict(status="failed", total_steps=200, message="RuntimeError: boom"),
            "Failed · step 0 / 200 · RuntimeError: boom",
        ),
    ],
)
def test_status_line(kw, line):
    text = report.status_line(_snap(**kw))
    assert text == line
    n, total = map(int, re.search(r"step (\d+) / (\d+)", text).groups())
    assert (n, total) == (kw.get("step", 0), 200)


def test_status_kind_and_markdown_escape():
    assert [report.status_kind(_snap(status=s)) for s in ("running", "finished", "stopped", "failed")] == [
        "info",
        "success",
        "warning",
        "error",
    ]
    assert report.escape_markdown("a*b_[c](d) `e` <b>") == "a\\*b\\_\\[c\\](d) \\`e\\` \\<b\\>"


# ---------------------------------------------------------------------------------------------------------
# The split, the console, the results.


def test_split_table_of_a_real_step():
    step = _steps(FitConfig(devices="virtual:3", epochs=1))[0]
    rows = report.split_table(step)
    assert [r["Device"] for r in rows] == [
        "virtual:0 (emulated on CPU)",
        "virtual:1 (emulated on CPU)",
        "virtual:2 (emulated on CPU)",
        "Outside (gathered)",
    ]
    assert [r["Rows"] for r in rows] == [67, 67, 66, 200]
    assert [r["Batch rows"] for r in rows] == ["0–66", "67–133", "134–199", "0–199"]
    assert [r["Input shape"] for r in rows] == ["[67, 2]", "[67, 2]", "[66, 2]", "[200, 2]"]
    assert [r["Output shape"] for r in rows] == ["[67, 1]", "[67, 1]", "[66, 1]", "[200, 1]"]
    devices = [r["Device"] for r in rows[:3]]
    assert report.split_blocks(step) == list(zip(devices, (0, 67, 134), (67, 134, 200)))


@pytest.mark.parametrize(
    "cfg",
    [
        FitConfig(),
        FitConfig(devices="virtual:3"),
        FitConfig(data_size=40, batch_size=5, devices="virtual:8", weights=(1.0, 2.0, 3.0)),
        FitConfig(data_size=9, batch_size=9, devices="virtual:4"),
        FitConfig(data_size=50, batch_size=40, devices="virtual:1"),
    ],
)
def test_planned_split_is_what_the_trainer_records(cfg):
    first = _steps(dataclasses.replace(cfg, epochs=1))[0]
    assert report.planned_split(cfg) == report.split_table(first)


def test_idle_devices_when_the_batch_is_smaller_than_the_device_count():
    snap = _run(FitConfig(data_size=40, batch_size=5, epochs=1, devices="virtual:8"))
    assert len(snap.latest.replicas) == 5
    assert report.idle_devices(snap) == [f"virtual:{i} (emulated on CPU)" for i in (5, 6, 7)]
    assert report.idle_devices(_run(FitConfig(epochs=1))) == []


def test_console_text_is_the_tutorials_lines_for_the_latest_steps():
    snap = _run(FitConfig(epochs=10, devices="virtual:2"))
    lines = report.console_text(snap, max_lines=10).splitlines()
    assert lines[0] == snap.header
    assert len(lines) == 1 + 3 * 3  # three steps of two In Model lines and one Outside line fit in 10
    assert lines[1] == (
        "\tIn Model: input size torch.Size([100, 2]) output size torch.Size([100, 1])"
        "  [virtual:0 (emulated on CPU)]"
    )
    assert lines[-1].startswith(
        "Outside: input size torch.Size([200, 2]) output_size torch.Size([200, 1]) loss:"
    )
    assert lines[-1].endswith("(epoch 10, step 10)")


def test_results_table_against_least_squares():
    cfg = FitConfig(noise=1.0, data_size=50, batch_size=50, epochs=300)
    snap = _run(cfg)
    rows = report.results_table(snap)
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
    assert report.results_table(_snap()) == []  # nothing learned yet


def test_history_csv_holds_every_kept_point():
    snap = _run(FitConfig(epochs=30))
    text = report.history_csv(snap)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["step", "loss", "w1", "w2", "b"]
    assert [int(r["step"]) for r in rows] == list(range(1, 31))
    assert [float(r["loss"]) for r in rows] == [loss for _, loss in snap.loss_history]
    last = rows[-1]
    assert [float(last[k]) for k in ("w1", "w2", "b")] == list(snap.param_history[-1][1])


def test_history_csv_leaves_cells_empty_where_a_series_thinned():
    snap = _snap(
        loss_history=((1, 4.0), (2, 3.0), (3, 2.0)),
        param_history=((1, (1.0, 2.0, 3.0)), (3, (1.5, 2.5, 3.5))),
    )
    assert report.history_csv(snap) == "step,loss,w1,w2,b\n1,4.0,1.0,2.0,3.0\n2,3.0,,,\n3,2.0,1.5,2.5,3.5\n"


def test_result_json_of_a_finished_and_a_diverged_run():
    snap = _run(FitConfig(devices="virtual:3", epochs=20))
    data = json.loads(report.result_json(snap))
    assert data["status"] == "finished" and data["steps"] == 20
    assert data["config"]["devices"] == "virtual:3"
    assert data["weights"] == list(snap.weights) and data["true_weights"] == [5.2, 9.6]
    assert [r["input_shape"] for r in data["latest_step"]["replicas"]] == [[67, 2], [67, 2], [66, 2]]
    assert [p["Parameter"] for p in data["parameters"]] == ["w1", "w2", "b"]
    diverged = _snap(status="diverged", weights=(math.inf, 1.0), bias=math.nan, final_loss=math.inf)
    data = json.loads(report.result_json(diverged))  # strict JSON: no Infinity or NaN
    assert (data["weights"], data["bias"], data["final_loss"]) == ([None, 1.0], None, None)


# ---------------------------------------------------------------------------------------------------------
# Smoothing and labels.


def test_smooth():
    values = [100.0, 10.0, 1.0, 0.1]
    assert report.smooth(values, 0.0) == values
    assert report.smooth([5.0] * 4, 0.9) == pytest.approx([5.0] * 4)  # bias correction: no ramp from zero
    # by hand: the bias-corrected moving average of log10(values), raised back to a power of 10
    w, acc, want = 0.5, 0.0, []
    for n, v in enumerate(values, 1):
        acc = w * acc + (1 - w) * math.log10(v)
        want.append(10 ** (acc / (1 - w**n)))
    assert report.smooth(values, 0.5) == pytest.approx(want)
    assert report.smooth([1.0, 0.0, math.inf, 1.0], 0.5) == [1.0, 0.0, math.inf, 1.0]
    assert report.smooth([1.0, 3.0], 0.5, log=False) == pytest.approx([1.0, 1.75 / 0.75])


def test_log_ticks():
    assert report.log_ticks([0.5, 30.0]) == [0.1, 1.0, 10.0, 100.0]
    assert report.log_ticks([1e-8, 1e2]) == [1e-8, 1e-6, 1e-4, 1e-2, 1.0, 1e2]
    ticks = report.log_ticks([1e-3, 1e35, 0.0, math.inf])
    assert len(ticks) <= 6 and ticks[0] == 1e-3 and ticks[-1] >= 1e30
    assert report.log_ticks([]) == [1.0]


def test_pace_choices():
    assert report.DEFAULT_PACE == "20" and report.parse_pace("20") == 20.0
    assert report.parse_pace("max") is None
    assert [report.pace_label(c) for c in ("1", "5", "max")] == [
        "1 step/s",
        "5 steps/s",
        "as fast as possible",
    ]
    assert report.run_label(_snap()) == "run-9: virtual:2, adam lr 0.5, batch 200 (running)"
