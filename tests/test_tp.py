"""Tensor parallelism (fitcore.strategies.tp): X split by columns on PyTorch's own RowwiseParallel.

Each rank holds torch.chunk's rows of W (the features), takes every row of the batch and only its columns,
and one all-reduce of the partial outputs a step: the same batches and parameters as one device, and bytes
that grow with the batch where DDP's do not.
"""

from __future__ import annotations

import json

import pytest
import torch

from fitcore.core.chunks import columns, ranks_allowed
from fitcore.core.config import ConfigError, FitConfig, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.devices import parse_devices
from fitcore.core.events import Detail, Step
from fitcore.core.memory import optimizer_state
from fitcore.protocols import registry
from fitcore.runs.recording import Recorder, read
from fitcore.strategies.tp.layout import allreduce_bytes, planned_memory, tp_step_bytes
from tests.test_cli import run_cli

CFG = FitConfig(
    weights=(5.2, 9.6, -1.0), bias=3.4, data_size=100, batch_size=30, epochs=20, lr=0.5, devices="cpu",
    strategy="tp", workers=2,
)  # fmt: skip


def _train(cfg):
    events = []
    ended = registry.of(cfg).train(cfg, events.append)
    return events, ended


@pytest.fixture(scope="module")
def run():
    """CFG on 2 ranks (3 features: rank 0 w1, w2; rank 1 w3), and the same config on one device."""
    cfg = validate(CFG)
    events, ended = _train(cfg)
    one = validate(FitConfig(**{**CFG.__dict__, "strategy": registry.DEFAULT, "workers": 1}))
    one_events = []
    one_ended = registry.of(one).train(one, one_events.append, plan=parse_devices("cpu"))
    return cfg, events, ended, one_events, one_ended


@pytest.mark.parametrize("d,k", [(3, 2), (4, 2), (4, 4), (5, 3), (16, 8), (1, 1)])
def test_columns_are_torch_chunk(d, k):
    assert [hi - lo for lo, hi in columns(d, k)] == [c.shape[0] for c in torch.arange(d).chunk(k)]
    assert columns(d, k)[0][0] == 0 and columns(d, k)[-1][1] == d


def test_ranks_allowed_give_every_rank_some_features():
    assert ranks_allowed(3, 8) == [1, 2, 3]
    assert ranks_allowed(4, 8) == [1, 2, 4]  # 3 ranks: torch.chunk gives 2 and 2, the third none
    assert ranks_allowed(16, 8) == [1, 2, 3, 4, 6, 8]  # 5 ranks: chunks of 4, four of them
    for k in ranks_allowed(7, 8):
        assert len(torch.arange(7).chunk(k)) == k


def test_more_ranks_than_features_is_refused_with_one_line(capsys):
    with pytest.raises(ConfigError) as refused:
        validate(FitConfig(strategy="tp", devices="cpu", workers=3))  # 2 features
    assert refused.value.field == "workers"
    code, out, err = run_cli(
        capsys, "--strategy", "tp", "--devices", "cpu", "--workers", "3", "--epochs", "1"
    )
    assert (code, out) == (2, [])
    assert err == [
        "fitcore: error: --workers: got 3; allowed: a number of ranks that torch.chunk gives some of the 2 "
        "features each: 1 or 2"
    ]


def test_a_rank_per_feature_needs_no_row_per_rank():
    """Every TP rank takes every row: one row is data enough for two ranks (DDP needs a row a rank)."""
    one_row = dict(devices="cpu", workers=2, data_size=1, batch_size=1)
    assert validate(FitConfig(strategy="tp", **one_row)).workers == 2
    with pytest.raises(ConfigError) as refused:
        validate(FitConfig(strategy="ddp", **one_row))
    assert refused.value.field == "workers" and "at most the data size" in refused.value.allowed


def test_bytes_grow_with_the_batch_and_not_the_model():
    # each rank all-reduces its (B, 1) partial output, B*4 bytes: 2(K-1)/K of it
    assert allreduce_bytes(2, 200, 4) == 800 and tp_step_bytes(200, 2, 4) == 1600
    assert tp_step_bytes(400, 2, 4) == 2 * tp_step_bytes(200, 2, 4)
    ddp = registry.strategy("ddp")
    assert ddp.bytes_of_step(400, 2, 3, 4) == ddp.bytes_of_step(200, 2, 3, 4)
    assert registry.strategy("tp").bytes_of_step(200, 2, 3, 4) == tp_step_bytes(200, 2, 4)


@pytest.mark.slow
def test_tp_learns_what_one_device_learns_on_the_same_batches(run):
    cfg, events, ended, one_events, one_ended = run
    steps = [e for e in events if isinstance(e, Step)]
    one = [e for e in one_events if isinstance(e, Step)]
    assert ended.status == "finished" and len(steps) == len(one) == cfg.total_steps == 20 * 4
    assert [s.loss for s in steps] == pytest.approx([s.loss for s in one], rel=1e-5, abs=1e-6)
    assert ended.weights == pytest.approx(one_ended.weights, abs=1e-5)
    assert ended.bias == pytest.approx(one_ended.bias, abs=1e-5)
    # the same dataset rows in each step as one device: every rank the whole batch
    for s, o in zip(steps, one):
        assert all(r.ids == o.replicas[0].ids for r in s.replicas)


@pytest.mark.slow
def test_each_rank_covers_every_row_and_its_columns_and_holds_its_rows_of_w(run):
    cfg, events, ended, _, _ = run
    steps = [e for e in events if isinstance(e, Step)]
    sizes = [30, 30, 30, 10]  # the epoch's batches: 100 rows, 30 a batch
    for s in steps:
        b = sizes[s.batch - 1]
        assert s.input_shape == (b, 3) and s.output_shape == (b, 1)
        assert [(r.start, r.stop, r.columns, r.input_shape) for r in s.replicas] == [
            (0, b, (0, 2), (b, 2)), (0, b, (2, 3), (b, 1)),
        ]  # fmt: skip
        # the all-reduce's bytes, from each rank's buffer: 2(K-1)/K of its (b, 1) output, b*4 bytes
        sent = [p.bytes for p in s.phases.phases() if p.name == "allreduce"]
        assert sent == [allreduce_bytes(2, b, 4)] * 2
        assert [p.name for p in s.phases.phases()][:6] == list(registry.strategy("tp").phases())
    value = [e.value for e in events if isinstance(e, Detail) and e.key == "tp"][-1]
    shards = [r["shard"] for r in value["ranks"]]
    assert [len(s["weights"]) for s in shards] == [2, 1]  # torch.chunk's rows of W, and no more
    assert shards[0]["weights"] + shards[1]["weights"] == pytest.approx(list(ended.weights), abs=0)
    for r, memory in enumerate(value["per_rank_memory"]):
        numbers = (2, 1)[r] + 1  # its rows of W and b
        # DTensor keeps rank 1's one row of W in a buffer of ceil(3 / 2) = 2, padded; gradients and Adam's
        # moments are its own size
        assert memory == planned_memory(cfg, r, 2)
        assert memory == {"rank": r, "parameters": 4 * (2 + 1), "gradients": 4 * numbers,
                          "optimizer_state": optimizer_state(cfg, numbers)}  # fmt: skip
    final = [e.value for e in events if isinstance(e, Detail) and e.key == "final"][-1]
    assert final["identical"]  # every rank gathers the same whole W


@pytest.mark.slow
def test_the_all_reduce_bytes_double_when_the_batch_doubles_and_ddps_do_not():
    def first_step_bytes(strategy: str, batch: int) -> int:
        cfg = validate(FitConfig(strategy=strategy, devices="cpu", workers=2, data_size=400, batch_size=batch,
                                 epochs=1))  # fmt: skip
        events, _ = _train(cfg)
        step = next(e for e in events if isinstance(e, Step))
        return sum(p.bytes for p in step.phases.phases() if p.name == "allreduce")

    assert first_step_bytes("tp", 200) == 2 * first_step_bytes("tp", 100) == 2 * 800
    assert first_step_bytes("ddp", 200) == first_step_bytes("ddp", 100)


@pytest.mark.slow
def test_the_command_line_reaches_least_squares_and_each_rank_holds_only_its_rows(capsys, tmp_path):
    record = str(tmp_path / "tp.fitrec")
    args = ["--strategy", "tp", "--devices", "cpu", "--workers", "2", "--weights", "5.2", "9.6", "-1", "2.5"]
    code, out, _ = run_cli(capsys, *args, "--json", "--record", record)
    assert code == 0
    result = json.loads(out[-1])
    cfg = validate(FitConfig(weights=(5.2, 9.6, -1.0, 2.5), strategy="tp", devices="cpu", workers=2))
    w, b = least_squares(*make_data(cfg))
    assert result["status"] == "finished"
    assert result["weights"] == pytest.approx(list(w), abs=1e-3) and result["bias"] == pytest.approx(
        b, abs=1e-3
    )
    # each phase's bytes as the picture shows them: the all-reduce of the (200, 1) partial outputs alone
    bytes_ = {"load": 0, "forward": 0, "allreduce": 2 * allreduce_bytes(2, 200, 4), "loss": 0, "backward": 0,
              "optimizer": 0}  # fmt: skip
    assert result["first_step"]["step_bytes"] == bytes_ and bytes_["allreduce"] == 1600
    # per rank and in all, exact: each rank sends 800 B of the 1,600
    per = result["first_step"]["step_bytes_per_device"]
    assert [(d["bytes"]["allreduce"], d["total"]) for d in per] == [(800, 800), (800, 800)]
    assert result["first_step"]["step_bytes_total"] == 1600
    assert [r["columns"] for r in result["first_step"]["replicas"]] == [[0, 2], [2, 4]]
    ranks = result["details"]["tp"]["ranks"]
    assert [r["columns"] for r in ranks] == [[0, 2], [2, 4]]
    assert [len(r["shard"]["weights"]) for r in ranks] == [2, 2]
    # the recording gives back every step with its columns, and replays to the same result
    rec = read(record)
    steps = [e for e in rec.events if isinstance(e, Step)]
    assert len(steps) == cfg.total_steps and steps[0].replicas[1].columns == (2, 4)
    code, replayed, _ = run_cli(capsys, "replay", record, "--json")
    assert code == 0 and json.loads(replayed[-1]) == result
    assert Recorder  # the recording module wrote it (fitcore.runs.recording)


@pytest.mark.slow  # spawns ranks
def test_the_labs_tp_column_is_torchs_rowwise_parallel_on_gloo():
    """The lab's TP arithmetic in one process against the real RowwiseParallel run on 2 gloo ranks: with one
    batch an epoch both step on every row, so they meet to 1e-5; and the lab's column meets one device."""
    from fitcore.kit.equivalence import TOL, Toggles
    from fitcore.kit.labmath import train_all
    from fitcore.lab.compare import run as lab

    cfg = validate(FitConfig(weights=(5.2, 9.6, -1.0), data_size=12, batch_size=12, epochs=6, strategy="tp",
                             workers=2, devices="cpu"))  # fmt: skip
    _, ended = _train(cfg)
    assert ended.status == "finished", ended.message
    trained = train_all(cfg, parse_devices("virtual:2"), Toggles(), ("tp",))
    assert len(trained.steps) == ended.steps == 6
    assert max(abs(a - b) for a, b in zip(trained.finals["tp"], [*ended.weights, ended.bias])) <= 1e-5
    result = lab(validate(FitConfig(weights=(5.2, 9.6, -1.0), data_size=12, batch_size=4, epochs=4,
                                    devices="virtual:2")))  # fmt: skip
    tp = next(r for r in result["results"] if r["strategy"] == "tp")
    assert tp["max_abs_diff"] <= TOL and tp["first_divergent_step"] is None and tp["causes"] == []


@pytest.mark.slow
def test_tps_questions_are_answered_from_the_steps_own_events(run):
    from fitcore.view import quiz

    cfg, events, _, _, _ = run
    steps = [e for e in events if isinstance(e, Step)]
    labels = tuple(r.device for r in steps[0].replicas)
    asked = [registry.strategy("tp").questions(s, cfg, labels) for s in steps[:4]]
    for step, found in zip(steps, asked):
        kinds = [q.kind for q in found]
        assert kinds == ["tp_columns", "tp_bytes"]
        columns, sent = found
        replica = step.replicas[step.step % 2]
        assert columns.value == replica.columns == columns_of(cfg.n_features, 2)[step.step % 2]
        assert columns.choices[columns.answer].say("en") == f"X[:, {replica.columns[0]}:{replica.columns[1]}]"
        assert sent.value == allreduce_bytes(2, step.input_shape[0], 4)  # the phase's bytes, a rank
        assert len(set(c.say("en") for c in sent.choices)) == len(sent.choices) >= 3
        for lang in ("en", "zh"):  # the reveal's why quotes the right choice's number as the choice writes it
            assert f"{sent.value:,}" in sent.explanation.say(lang) and f"{sent.value:,}" in sent.choices[
                sent.answer
            ].say(lang)
        assert quiz.question_for(step, cfg, labels) in found  # the page asks one of them, in turn


columns_of = columns


def test_the_bytes_reveal_writes_its_number_as_the_choices_do():
    # a 3-rank ring of a 200-row batch: 1,067 bytes a rank, "1,067 bytes" among the choices and in the why
    from fitcore.core.i18n import count, t

    assert "1,067 bytes" in count("classroom.c.bytes", 1067, "en")
    assert "2(K−1)/K: 1,067 bytes." in t("tp.why.bytes", "en", batch=200, k=3, bytes=1067)
    assert "2(K−1)/K：1,067 字节。" in t("tp.why.bytes", "zh", batch=200, k=3, bytes=1067)


def test_before_a_run_the_columns_panel_says_every_rank_takes_the_whole_batch():
    from fitcore.core.i18n import t
    from fitcore.strategies.tp import view
    from tests.view_helpers import plan_of

    cfg = validate(FitConfig(strategy="tp", devices="cpu", workers=2, batch_size=50))
    columns = next(s for s in view.sections(None, cfg, plan_of(cfg)) if s.name == "tp_columns")
    planned = "Step 1, planned: every rank takes the whole batch (50 rows) and its own columns of X."
    assert columns.notes == (planned,)
    assert t("view.ranks.planned") not in columns.notes
