"""fitcore.report: presets, URL <-> controls, the status line, the split, results, CSV and JSON."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from types import SimpleNamespace

import pytest
import torch

from fitcore import ddp, report
from fitcore.config import ConfigError, FitConfig, validate
from fitcore.data import make_data
from fitcore.events import Step
from fitcore.parallel import chunk_sizes
from fitcore.runner import Run, Snapshot
from fitcore.train import train


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
    assert len(set(names)) == len(names) == 7
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
        (FitConfig(strategy="ddp", workers=3, devices="cpu", data_size=10, batch_size=10), "max"),
        (FitConfig(strategy="ddp", workers=8, devices="virtual:2"), "5"),
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
        "strategy": "dataparallel",
        "workers": "2",
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
        (
            {"devices": "cpu"},
            "devices: got 'cpu'; allowed: virtual:K (K from 1 to 8) or cuda:i,j,..., "
            "or cpu with strategy ddp",
        ),
        ({"strategy": "ddp2"}, "strategy: got 'ddp2'; allowed: dataparallel or ddp"),
        ({"workers": "two"}, "workers: got 'two'; allowed: an integer"),
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


def test_cpu_devices_in_the_query_belong_to_ddp():
    """`cpu` is ddp's ranks on the CPU; DataParallel on the page runs on virtual devices or GPUs."""
    query = {"devices": "cpu", "strategy": "ddp", "workers": "3"}
    assert report.from_query(query) == ({"devices": "cpu", "strategy": "ddp", "workers": 3}, None, [])
    values, _, errors = report.from_query({**query, "strategy": "dataparallel"})
    assert values == {"strategy": "dataparallel", "workers": 3}  # the default devices stay
    assert [e.field for e in errors] == ["devices"]
    # a worker count out of range is a setup the controls can hold: validation reports it, naming the field
    values, _, errors = report.from_query({**query, "workers": "9"})
    assert errors == [] and values["workers"] == 9
    with pytest.raises(ConfigError) as exc:
        report.config_from_controls({**report.defaults(), **values})
    assert report.error_text(exc.value) == (
        "Workers: workers: got 9; allowed: an integer from 1 to 8 (and at most the data size)"
    )


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


def test_workers_count_only_for_ddp():
    """DataParallel ignores `workers`: a different count is no difference and does not break a preset."""
    tutorial = report.preset("The tutorial").config
    values = {**report.config_values(tutorial), "workers": 5}
    assert report.matching_preset(values).name == "The tutorial"
    assert report.config_differences(values, tutorial) == []
    ddp_values = {**values, "strategy": "ddp", "devices": "cpu"}
    assert report.matching_preset(ddp_values) is None  # the DDP preset has 2 workers
    assert report.matching_preset({**ddp_values, "workers": 2}).name == "DistributedDataParallel"
    assert report.config_differences(ddp_values, tutorial) == [
        "Devices: virtual:2 in the run, cpu in the controls",
        "Strategy: dataparallel in the run, ddp in the controls",
        "Workers: 2 in the run, 5 in the controls",
    ]


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
    assert report.split_blocks(rows) == list(zip(devices, (0, 67, 134), (67, 134, 200)))


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


# ---------------------------------------------------------------------------------------------------------
# DistributedDataParallel: each rank's shard, its shapes, its final parameters, its console lines.


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
    value = report.planned_shards(cfg)
    expected = _sampler_rule(n, k, shuffle, seed, 1)
    per, pad = math.ceil(n / k), math.ceil(n / k) * k - n
    assert (value["rows_per_rank"], value["padding"], value["total_size"]) == (per, pad, per * k)
    rows = report.shard_rows(value, "first")
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
    cfg = report.preset("Uneven shards").config
    value = report.planned_shards(cfg)
    order = _sampler_rule(10, 3, True, 0, 1)
    repeated = [order[1][3], order[2][3]]  # positions 10 and 11 of the padded order
    assert [r["Dataset rows"] for r in report.shard_rows(value, "first")] == [4, 4, 4]
    assert report.shards_title(value, "first") == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 10 dataset rows to 3 ranks, "
        f"ceil(10 / 3) = 4 each; 2 rows ({repeated[0]}, {repeated[1]}) repeated to pad the last shards"
    )
    assert report.shards_title(report.planned_shards(report.preset("DistributedDataParallel").config)) == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 200 dataset rows to 2 ranks, "
        "ceil(200 / 2) = 100 each"
    )


@pytest.mark.parametrize(
    "n, batch, k, local",
    [(200, 200, 2, 100), (10, 10, 3, 4), (40, 5, 2, 3), (40, 20, 2, 10), (9, 2, 4, 1)],
)
def test_planned_rank_table_takes_ceil_batch_over_ranks_rows_each(n, batch, k, local):
    cfg = FitConfig(strategy="ddp", workers=k, devices="cpu", data_size=n, batch_size=batch)
    rows = report.planned_rank_table(cfg)
    assert [r["Rank"] for r in rows] == list(range(k)) + ["all"]
    assert [r["Rows"] for r in rows] == [local] * k + [local * k]
    assert [r["Input shape"] for r in rows] == [f"[{local}, 2]"] * k + [f"[{local * k}, 2]"]
    assert [r["Output shape"] for r in rows] == [f"[{local}, 1]"] * k + [f"[{local * k}, 1]"]
    assert rows[-1]["Device"] == "All ranks together (never gathered)"
    assert "Local loss" not in rows[0]  # nothing has run: no loss to show


def _ddp_step(losses=None) -> Step:
    """A 2-rank step of 3 rows per rank, as ddp reports it (ranks' losses where given)."""
    replicas = tuple(
        SimpleNamespace(
            device=f"rank {r} · cpu · gloo", rows=3, input_shape=(3, 2), output_shape=(3, 1),
            loss=None if losses is None else losses[r],
        )
        for r in range(2)
    )  # fmt: skip
    mean = 2.0 if losses is None else sum(losses) / 2
    return Step(7, 4, 2, mean, (6, 2), (6, 1), replicas, (1.0, 2.0), 3.0, 0.5)


def test_rank_table_shows_each_ranks_local_loss_where_reported():
    rows = report.rank_table(_ddp_step([1.5, 0.25]))
    assert [r["Local loss"] for r in rows] == ["1.5", "0.25", "mean 0.875"]
    assert [r["Input shape"] for r in rows] == ["[3, 2]", "[3, 2]", "[6, 2]"]
    assert [r["Rows"] for r in rows] == [3, 3, 6]
    assert all("Local loss" not in r for r in report.rank_table(_ddp_step()))


def _ddp_snap(finals, **kw) -> Snapshot:
    cfg = FitConfig(strategy="ddp", workers=2, devices="cpu")
    return _snap(config=cfg, extra={"final": ddp.final_value(finals)} if finals else {}, **kw)


def test_final_rows_and_agreement_of_the_ranks():
    same = [("rank 0 · cpu · gloo", (5.2, 9.6), 3.4), ("rank 1 · cpu · gloo", (5.2, 9.6), 3.4)]
    snap = _ddp_snap(same, status="finished")
    assert report.final_rows(snap) == [
        {"Rank": 0, "Device": "rank 0 · cpu · gloo", "w1": 5.2, "w2": 9.6, "b": 3.4},
        {"Rank": 1, "Device": "rank 1 · cpu · gloo", "w1": 5.2, "w2": 9.6, "b": 3.4},
    ]
    assert report.final_agreement(snap) == (
        "All 2 ranks ended with identical parameters (largest difference 0): DDP kept them in step."
    )
    apart = _ddp_snap([same[0], ("rank 1 · cpu · gloo", (5.2, 9.1), 3.4)], status="finished")
    assert report.final_agreement(apart) == "The ranks' parameters differ: largest difference 0.5."
    assert report.final_rows(_ddp_snap(None)) == [] and report.final_agreement(_ddp_snap(None)) is None


def test_console_text_of_a_ddp_run_prints_each_rank():
    group = {
        "world_size": 2, "backend": "gloo", "master_addr": "127.0.0.1", "master_port": 29500,
        "launcher": "spawned with torch.multiprocessing", "per_rank_batch": 3, "rows_per_rank": 100,
        "steps_per_epoch": 34, "global_batch": 6,
    }  # fmt: skip
    finals = [("rank 0 · cpu · gloo", (5.2, 9.6), 3.4), ("rank 1 · cpu · gloo", (5.2, 9.6), 3.4)]
    steps = tuple(_ddp_step([1.0, 3.0])._replace(step=s) for s in range(1, 6))
    snap = _ddp_snap(finals, status="finished", header="DDP header", recent=steps)
    snap = dataclasses.replace(snap, extra={**snap.extra, "ddp": group})
    lines = report.console_text(snap, max_lines=12).splitlines()
    tail = ddp.final_lines(snap.extra["final"])
    assert lines[:2] == ["DDP header", ddp.group_line(group)]
    assert lines[-len(tail) :] == tail and len(tail) == 3
    body = lines[2 : -len(tail)]
    assert len(body) == 2 * 3  # 12 lines: header, group, final (3) leave room for two steps of 3 lines
    assert (
        body[0]
        == "\t[rank 0 · cpu · gloo] In Model: input size torch.Size([3, 2]) output size torch.Size([3, 1])"
    )
    assert body[2].startswith(
        "All ranks: input size torch.Size([6, 2]) over 2 ranks, no gather; mean loss: 2"
    )
    assert body[2].endswith("(epoch 4, step 4)") and body[5].endswith("(epoch 4, step 5)")
    # while the run is active the ranks have not reported their final parameters yet
    running = dataclasses.replace(snap, status="running")
    assert "Parameters per rank" not in report.console_text(running, max_lines=12)
