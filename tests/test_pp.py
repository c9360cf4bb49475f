"""Pipeline parallelism (fitcore.strategies.pp): the schedules' order as torch runs it, the bubble against its
formula, the activations each stage holds, the bytes between stages, the lab's column and the config's
rules."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from fitcore.cli import main as cli_main
from fitcore.core.config import ConfigError, FitConfig, validate
from fitcore.core.data import least_squares, make_data
from fitcore.lab.compare import run as compare_run
from fitcore.protocols import registry
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.check import one_device
from fitcore.strategies.pp.model import deep_model, whole_weights
from fitcore.strategies.pp.schedule import blocks_of
from fitcore.strategies.pp.shapes import DETAIL
from fitcore.strategies.pp.view import held_text

PP = FitConfig(strategy="pp", devices="cpu", workers=2, layers=4, microbatches=4)


def run_json(capsys, *flags: str) -> dict:
    code = cli_main(["--strategy", "pp", "--devices", "cpu", "--workers", "2", *flags, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


# ---------------------------------------------------------------------------------------------------------
# The arithmetic, against torch's own.


@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("schedule", layout.SCHEDULES)
def test_stages_lie_on_ranks_as_torch_lays_them(schedule, p):
    from torch.distributed.pipelining.schedules import generate_stage_to_rank_mapping

    stages = layout.n_stages(schedule, p)
    style = "v" if schedule == layout.ZBV else "loop"
    torch_map = generate_stage_to_rank_mapping(p, stages, style=style)
    assert [layout.stage_rank(schedule, p, s) for s in range(stages)] == [torch_map[s] for s in range(stages)]


def test_layers_split_as_evenly_as_they_go():
    assert layout.stage_layers(4, 2) == [(0, 2), (2, 4)]
    assert layout.stage_layers(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert [hi - lo for lo, hi in layout.stage_layers(7, 7)] == [1] * 7


@pytest.mark.parametrize("p, m", [(2, 4), (3, 6), (4, 8)])
def test_gpipe_and_1f1b_in_unit_time_leave_the_textbook_bubble(p, m):
    # every block one tick: GPipe and 1F1B both take 2(m + p - 1) ticks, of which each rank is busy 2m
    for schedule in (layout.GPIPE, layout.ONE_F_ONE_B):
        starts = layout.ticks(schedule, p, m)
        assert max(s for rank in starts for s in rank) + 1 == 2 * (m + p - 1)
        assert layout.unit_bubble(schedule, p, m) == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
        assert layout.formula_bubble(schedule, p, m) == pytest.approx((p - 1) / (m + p - 1))


def test_1f1b_holds_at_most_p_minus_r_microbatches_and_gpipe_all_m():
    p, m = 4, 8
    for r, blocks in enumerate(layout.order(layout.ONE_F_ONE_B, p, m)):
        assert layout.held_counts(blocks) == {r: p - r}
    for r, blocks in enumerate(layout.order(layout.GPIPE, p, m)):
        assert layout.held_counts(blocks) == {r: m}


def test_the_interleaved_formula_is_v_fold_less():
    p, m, v = 4, 8, 2
    assert layout.formula_bubble(layout.INTERLEAVED, p, m) == pytest.approx((p - 1) / (v * m + p - 1))
    assert layout.formula_bubble(layout.INTERLEAVED, p, m) < layout.formula_bubble(layout.ONE_F_ONE_B, p, m)


def test_the_deep_model_starts_as_one_layer_and_its_least_squares_is_the_fits():
    for width in (0, 16):
        cfg = replace(PP, width=width)
        w, b = whole_weights(deep_model(cfg))
        from fitcore.core.train import first_model

        fc = first_model(cfg).fc
        assert max(abs(x - y) for x, y in zip(w, fc.weight.view(-1).tolist())) < 1e-6
        assert b == pytest.approx(fc.bias.item())


def test_microbatches_are_tensor_splits_rows():
    # the schedule cuts the batch with tensor_split; the rules ask for equal microbatches
    cfg = validate(PP)
    rows = [len(c) for c in torch.arange(cfg.batch_size).tensor_split(cfg.microbatches)]
    assert rows == [cfg.batch_size // cfg.microbatches] * cfg.microbatches == [50, 50, 50, 50]


def test_the_page_offers_every_schedule():
    assert registry.strategy("pp").choices["schedule"] == layout.SCHEDULES


# ---------------------------------------------------------------------------------------------------------
# Real runs on two gloo ranks.


def waits_before_its_input(value: dict) -> list[tuple]:
    """The blocks that seem to start before the block whose output they take had ended: a forward before
    the previous stage's forward of its microbatch, a backward before the next stage's backward (the
    gradient of its output). None on one clock (the ranks' shared zero, fitcore.strategies.pp.rank)."""
    passes = [b for rank in value["ranks"] for b in rank["blocks"] if b["kind"] != "W"]  # W sends nothing
    ended = {("F" if b["kind"] == "F" else "B", b["stage"], b["microbatch"]): b["end"] for b in passes}
    late = []
    for b in passes:
        kind = "F" if b["kind"] == "F" else "B"
        source = (kind, b["stage"] + (-1 if kind == "F" else 1), b["microbatch"])
        if source in ended and b["start"] < ended[source]:
            late.append((b["kind"], b["stage"], b["microbatch"], b["start"], ended[source]))
    return late


def test_1f1b_reaches_least_squares_with_each_block_timed_and_measured(capsys):
    out = run_json(capsys, "--layers", "4", "--microbatches", "4", "--schedule", "1f1b")
    cfg = validate(PP)
    w, b = least_squares(*make_data(cfg))
    assert out["status"] == "finished" and out["steps"] == cfg.total_steps
    assert max(abs(x - y) for x, y in zip(out["weights"] + [out["bias"]], list(w) + [b])) < 1e-3
    value = out["details"]["pp"]
    assert DETAIL(value, "pp") == value  # the shape a recording is read through
    runs = layout.order("1f1b", 2, 4)
    for r, rank in enumerate(value["ranks"]):
        assert tuple(blocks_of(rank["blocks"])) == runs[r]  # the order torch ran is the layout's
        assert all(b["end"] >= b["start"] >= 0 for b in rank["blocks"])
    # the ranks' blocks on one clock: each starts after what it receives was made, on every step's picture
    assert waits_before_its_input(value) == []
    assert [[h["microbatches"] for h in r["held"]] for r in value["ranks"]] == [[2], [1]]  # p - r
    # each held microbatch: 50 rows of each of its 2 layers' inputs, 2 numbers wide, float32
    assert value["ranks"][0]["held"][0]["bytes"] == 2 * 50 * 2 * 2 * 4
    # 4 microbatches of (50, 2) down one link and their gradients back: 2 x 4 x 400
    assert value["bytes_between_stages"] == layout.step_bytes(200, 2, 2, "1f1b") == 3200
    assert value["links"] == [{"from_stage": 0, "to_stage": 1, "forward_bytes": 1600, "backward_bytes": 1600}]
    assert value["bubble_formula"] == pytest.approx(1 / 5) and 0 <= value["bubble_measured"] < 1
    assert value["bubble_formula_text"] == "(p−1)/(m+p−1)"
    memory = out["per_rank_memory"]
    assert memory == [layout.planned_memory(cfg, r, 2) | {"rank": r} for r in range(2)]


@pytest.mark.parametrize("schedule", ["gpipe", "interleaved-1f1b", "zbv"])
def test_each_schedule_is_the_same_deep_model_as_one_device(capsys, schedule, tmp_path):
    flags = ["--epochs", "30", "--schedule", schedule, "--trace", str(tmp_path / "pp.json")]
    out = run_json(capsys, *flags)
    cfg = validate(replace(PP, epochs=30, schedule=schedule))
    assert out["status"] == "finished"
    learned = tuple(out["weights"]) + (out["bias"],)
    assert max(abs(x - y) for x, y in zip(learned, one_device(cfg))) < 1e-5
    value = out["details"]["pp"]
    runs = layout.order(schedule, 2, 4)
    assert [tuple(blocks_of(r["blocks"])) for r in value["ranks"]] == list(runs)
    assert waits_before_its_input(value) == []
    held = [[h["microbatches"] for h in r["held"]] for r in value["ranks"]]
    if schedule == "gpipe":
        assert held == [[4], [4]]  # every forward first: all m at once
    # each link between stages on two ranks carries 200 rows of 2 activations down and their gradients
    # back, 3,200 B: GPipe's one link, interleaved's three (0-1-2-3 dealt round), ZBV's two (its "v" keeps
    # stages 1 and 2 on rank 1: no message between them)
    links = {"gpipe": 1, "interleaved-1f1b": 3, "zbv": 2}[schedule]
    assert value["stages"] == layout.n_stages(schedule, 2)
    assert value["bytes_between_stages"] == layout.step_bytes(200, 2, 2, schedule) == links * 3200
    # the trace draws each of those sends as an arrow from the sender's block to the receiver's: a link's 4
    # microbatches down and their 4 gradients back, every one of the 30 steps, each end inside a block of
    # its own rank's track (where Perfetto binds it)
    events = json.loads((tmp_path / "pp.json").read_text())["traceEvents"]
    starts, ends = [e for e in events if e["ph"] == "s"], [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(ends) == 30 * links * 2 * 4
    assert sorted(e["id"] for e in starts) == sorted(e["id"] for e in ends) == list(range(1, len(starts) + 1))
    blocks = [e for e in events if e["ph"] == "X"]
    for arrow in starts + ends:
        assert any(b["tid"] == arrow["tid"] and b["ts"] <= arrow["ts"] <= b["ts"] + b["dur"] for b in blocks)
    pairs = {e["id"]: e["tid"] for e in starts}
    assert all(pairs[e["id"]] != e["tid"] for e in ends)  # every arrow goes to the other rank


def test_more_microbatches_make_the_measured_bubble_smaller(capsys):
    # with each block's work well above a message's time and the ranks' start skew on a loaded machine
    # (block_ms), the step follows the formula
    measured = {}
    for m in (2, 4, 8):
        out = run_json(capsys, "--epochs", "2", "--microbatches", str(m), "--block-ms", "25")
        value = out["details"]["pp"]
        measured[m] = value["bubble_measured"]
        assert value["bubble_formula"] == pytest.approx(1 / (m + 1))
        assert abs(measured[m] - value["bubble_formula"]) < 0.08  # the schedule's idle, and the messages
    assert measured[2] > measured[4] > measured[8]


def test_a_slow_stage_moves_the_bubble_to_the_stages_that_wait_for_it(capsys):
    """Stage 1 three times slower (1F1B, 2 ranks, 4 microbatches): in work units stage 0 is busy 4·(1+2) =
    12 and stage 1 36 of a span of 1 + 36 + 2 = 39, so stage 0 idles 69 % and stage 1 8 %, and the step's
    bubble grows from 1 − 24/30 = 20 % to 1 − 48/78 = 38 %."""
    ranks, bubble = {}, {}
    for slow in ("-1", "1"):
        out = run_json(capsys, "--epochs", "2", "--block-ms", "10", "--slow-stage", slow)
        value = out["details"]["pp"]
        bubble[slow] = value["bubble_measured"]
        ranks[slow] = value["ranks"]
    forward = [[b["end"] - b["start"] for b in r["blocks"] if b["kind"] == "F"] for r in ranks["1"]]
    ratio = (sum(forward[1]) / len(forward[1])) / (sum(forward[0]) / len(forward[0]))
    assert 2.4 < ratio < 3.6, ratio  # stage 1's blocks take 3 times the work
    idle = [1 - r["busy_seconds"] / r["span_seconds"] for r in ranks["1"]]
    assert idle[0] == pytest.approx(27 / 39, abs=0.1) and idle[1] == pytest.approx(3 / 39, abs=0.1), idle
    assert bubble["-1"] == pytest.approx(0.2, abs=0.08) and bubble["1"] == pytest.approx(30 / 78, abs=0.08)


def test_a_slow_stage_is_a_stage_and_needs_work_to_slow():
    with pytest.raises(ConfigError, match="a stage from 0 to 1, or -1 for none"):
        validate(replace(PP, slow_stage=2))
    with pytest.raises(ConfigError, match="needs --block-ms above 0"):
        validate(replace(PP, slow_stage=0))
    assert validate(replace(PP, slow_stage=0, block_ms=1.0)).slow_stage == 0
    assert layout.block_seconds(replace(PP, slow_stage=1, block_ms=2.0), "B", 1) == 3 * 2 * 2.0 / 1000


# ---------------------------------------------------------------------------------------------------------
# The lab and the rules.


def test_the_lab_has_a_pp_column_equal_to_one_device_and_none_for_unequal_microbatches():
    res = compare_run(validate(FitConfig(epochs=60)))
    (pp,) = [r for r in res["results"] if r["strategy"] == "pp"]
    assert pp["max_abs_diff"] <= 1e-5 and pp["first_divergent_step"] is None
    uneven = compare_run(validate(FitConfig(data_size=30, batch_size=30, epochs=3)))
    assert "pp" not in [r["strategy"] for r in uneven["results"]]
    assert "4 microbatches do not cut every batch of 30" in uneven["config"]["not_compared"]["pp"]


@pytest.mark.parametrize(
    "changes, field, allowed",
    [
        ({"schedule": "1f2b"}, "schedule", "gpipe or 1f1b or interleaved-1f1b or zbv"),
        ({"layers": 1}, "layers", "an integer from 2 to 32"),
        ({"layers": 3, "schedule": "zbv"}, "layers", "an integer from 4 to 32"),
        ({"batch_size": 30, "data_size": 30}, "microbatches", "equal microbatches (1 or 2 or 3 or 5 or 6"),
        ({"batch_size": 30, "data_size": 60, "microbatches": 4}, "microbatches", "equal microbatches"),
        ({"batch_size": 40, "data_size": 100}, "batch_size", "a batch size that divides the 100 rows"),
        ({"workers": 4, "layers": 4, "microbatches": 2}, "microbatches", "Schedule1F1B needs at least"),
        ({"width": -1}, "width", "an integer from 0 to 1024"),
        ({"block_ms": math.inf}, "block_ms", "a number of milliseconds from 0 to 1000"),
    ],
)
def test_a_config_a_pipeline_cannot_run_is_refused_naming_its_field(changes, field, allowed):
    with pytest.raises(ConfigError) as caught:
        validate(replace(PP, **changes))
    assert caught.value.field == field and allowed in str(caught.value.allowed)


def test_the_command_line_refuses_unequal_microbatches_in_one_line(capsys):
    code = cli_main(["--strategy", "pp", "--devices", "cpu", "--batch-size", "30", "--data-size", "30"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("fitcore: error: --microbatches: got 4")
    code = cli_main(["--strategy", "ddp", "--devices", "cpu", "--schedule", "zbv"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--schedule" in err[0] and "PP (pipelining)" in err[0]


def test_what_a_stage_held_is_counted_in_words_not_with_a_bracketed_plural():
    """The stage table's and the console's "held" say 1 microbatch and 2 microbatches, not microbatch(es)."""
    held = [{"microbatches": 1, "bytes": 800}, {"microbatches": 2, "bytes": 1600}]
    assert held_text(held) == "1 microbatch, 800 B; 2 microbatches, 1.6 kB"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_before_a_run_the_stages_panel_says_every_rank_takes_the_whole_batch(lang):
    """The planned stages' caption is the pipeline's own (every rank the whole batch, cut into m
    microbatches), not DDP's "ceil(batch size / ranks) rows of its shard"."""
    from fitcore.core.i18n import t, using
    from fitcore.strategies.pp import view
    from tests.view_helpers import plan_of

    cfg = validate(replace(PP, batch_size=100))
    rows = {"en": "100 rows", "zh": "100 行"}[lang]
    assert t("pp.stages.planned", lang, rows=rows, m=4) == {
        "en": "Step 1, planned: every rank takes the whole batch (100 rows), cut into 4 microbatches; each "
        "goes through every stage.",
        "zh": "第 1 步（计划）：每个 rank 都处理整个批次（100 行），切成 4 个微批次；"
        "每个微批次都流过每个 stage。",
    }[lang]
    with using(lang):
        stages = next(s for s in view.sections(None, cfg, plan_of(cfg)) if s.name == "pp_stages")
        assert stages.notes[0] == t("pp.stages.planned", lang, rows=rows, m=4)
        assert t("view.ranks.planned", lang) not in stages.notes


@pytest.mark.parametrize(("schedule", "held"), [("gpipe", [[4], [4]]), ("1f1b", [[2], [1]])])
def test_before_a_run_the_picture_holds_what_the_schedule_will_and_measures_no_bubble(schedule, held):
    """The planned picture (the page before Start) draws no blocks and says its bubble is not measured yet,
    beside the formula's; each stage's held microbatches are the schedule's own (GPipe m, 1F1B p − r), not
    the 0 of a step that has not run."""
    from fitcore.core.config import check
    from fitcore.kit import live

    cfg = replace(PP, schedule=schedule)
    value = live.planned_payload(check(cfg, gpus=[]))["picture"]["pipeline"]
    assert value["bubble_measured"] is None and value["bubble_formula"] == pytest.approx(1 / 5)
    assert [[h["microbatches"] for h in r["held"]] for r in value["ranks"]] == held
    assert [r["blocks"] for r in value["ranks"]] == [[], []] and value["bytes_between_stages"] == 0
