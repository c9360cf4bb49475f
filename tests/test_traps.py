"""The lab's next traps: BatchNorm, gradient accumulation with and without no_sync, uneven inputs and Join."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore.cli import main
from fitcore.core.config import FitConfig, validate
from fitcore.core.data import make_data
from fitcore.lab.compare import TOL, Toggles, run
from fitcore.lab.traps import Traps
from fitcore.lab.traps.uneven import step_counts
from fitcore.strategies.ddp.syncbn import sync_batchnorm

# 24 rows in batches of 8: 4 rows a rank on 2 ranks, 3 steps an epoch
SMALL = FitConfig(data_size=24, batch_size=8, epochs=4, optimizer="sgd", lr=0.05, devices="virtual:2")


def lab(traps: Traps, toggles: Toggles = Toggles(), **changes) -> dict:
    result = run(validate(FitConfig(**{**SMALL.__dict__, **changes})), toggles, traps=traps)
    return {r["strategy"]: r for r in result["results"]} | {"config": result["config"]}


def exact(row: dict) -> bool:
    return row["first_divergent_step"] is None and row["max_abs_diff"] <= TOL


def test_batchnorm_splits_dataparallel_and_ddp_and_syncbatchnorm_brings_ddp_back():
    plain = lab(Traps(batchnorm=True))
    assert not exact(plain["dataparallel"]) and not exact(plain["ddp"])
    assert plain["dataparallel"]["first_divergent_step"] == 1  # SGD: the first step already differs
    # BatchNorm's normalisation amplifies float32 rounding about twice a step on this data (6e-8 at step 1,
    # 1.4e-6 at step 9, 2e-5 at step 12 on one CPU; the partial sums' order differs by CPU): 3 epochs
    # keep the synchronised statistics' rounding below the lab's tolerance on every CPU
    synced = lab(Traps(sync_batchnorm=True), epochs=3)
    assert exact(synced["ddp"]) and not exact(synced["dataparallel"])
    assert max(synced["ddp"]["per_step"]) < 1e-4 * max(plain["ddp"]["per_step"])  # rounding, not statistics
    assert synced["ddp"]["running_mean"] == pytest.approx(synced["ddp"]["reference_running_mean"], abs=1e-6)
    assert "SyncBatchNorm" in synced["ddp"]["causes"][0] and "one process" in synced["ddp"]["causes"][0]
    # one device: nothing to split, and every strategy is exact
    one = lab(Traps(batchnorm=True), devices="cpu")
    assert exact(one["dataparallel"]) and exact(one["ddp"])


def test_dataparallels_running_mean_is_device_0s_chunk_only():
    res = lab(Traps(batchnorm=True), epochs=1, batch_size=24, shuffle=False)  # one step of every row
    X, _ = make_data(validate(SMALL), torch.device("cpu"))
    # the step's batch is the ranks' rows in rank order, 0, 2, ..., 22, then 1, 3, ..., 23; tensor.chunk(2)
    # gives device 0 the even rows
    chunk0, batch = X[0::2], X
    momentum = 0.1  # BatchNorm1d's default: running = 0.9 * 0 + 0.1 * mean
    assert res["dataparallel"]["running_mean"] == pytest.approx(
        (momentum * chunk0.mean(0)).tolist(), abs=1e-6
    )
    assert res["dataparallel"]["reference_running_mean"] == pytest.approx(
        (momentum * batch.mean(0)).tolist(), abs=1e-6
    )
    assert "device-0 replica" in res["dataparallel"]["causes"][-1]


def test_sync_batchnorm_arithmetic_is_batch_norm_over_the_whole_batch():
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(n, 3, generator=g, dtype=torch.float64) for n in (5, 7, 4)]
    weight = torch.randn(3, generator=g, dtype=torch.float64)
    bias = torch.randn(3, generator=g, dtype=torch.float64)
    bn = torch.nn.BatchNorm1d(3).double()
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
    ours = torch.cat(sync_batchnorm(xs, bn))
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    running_mean, running_var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    theirs = F.batch_norm(torch.cat(xs), running_mean, running_var, w, b, training=True, momentum=0.1)
    assert torch.allclose(ours, theirs, atol=1e-12)
    assert torch.allclose(bn.running_mean, running_mean, atol=1e-12)
    assert torch.allclose(bn.running_var, running_var, atol=1e-12)  # unbiased over all 16 rows
    # and the backward: SyncBatchNorm's all-reduced sums are autograd through the global statistics
    probe = torch.randn(16, 3, generator=g, dtype=torch.float64)
    ours_grads = torch.autograd.grad((ours * probe).sum(), [bn.weight, bn.bias])
    theirs_grads = torch.autograd.grad((theirs * probe).sum(), [w, b])
    for a, c in zip(ours_grads, theirs_grads):
        assert torch.allclose(a, c, atol=1e-12)


@pytest.mark.parametrize("sync", [False, True])
def test_the_checks_ddp_column_is_the_questions_to_the_last_bit(sync):
    # `fitcore check` holds torch's SyncBatchNorm to fitcore.strategies.ddp.syncbn.ddp_column, which trains
    # DDP's column alone (no DataParallel emulation): it ends with the question's DDP parameters and running
    # means
    from fitcore.core.devices import parse_devices
    from fitcore.kit.equivalence import Toggles
    from fitcore.lab.traps import batchnorm
    from fitcore.strategies.ddp import syncbn

    cfg = validate(replace(SMALL, data_size=30, batch_size=30, lr=0.1, devices="virtual:3"))
    _, means, steps, finals = batchnorm.train(cfg, parse_devices(cfg.devices), Toggles(), sync=sync)
    column, alone = syncbn.ddp_column(cfg, 3, Toggles(), sync=sync)
    assert [s.ranks for s in alone] == [s.ranks for s in steps] and len(alone) == 4
    assert column.flat().tolist() == finals["ddp"]
    assert column.running_mean() == means["ddp"]
    assert means["ddp"] != [0.0] * cfg.n_features  # the statistics moved


def test_every_ddp_result_has_its_all_reduces():
    plain = lab(Traps())
    assert (plain["ddp"]["allreduce_calls"], plain["ddp"]["allreduce_bytes"]) == (1, 4 * 3)  # W (2), b
    assert plain["ddp"]["allreduce_measured"] is False
    bn = lab(Traps(batchnorm=True))
    assert bn["ddp"]["allreduce_bytes"] == 4 * (3 * 2 + 1)  # BatchNorm's weight and bias, W and b


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--accumulate", "0"], "--accumulate: got 0; allowed: an integer from 1 to 64"),
        (["--accumulate", "9"], "--accumulate: got 9; allowed: at most 4 micro-batches"),
        (["--batchnorm", "--uneven"], "--uneven: got True; allowed: one question at a time"),
        (["--batchnorm", "--batch-size", "2"], "--batch-size: got 2; allowed: at least 2 rows on each"),
        (["--uneven", "--devices", "cpu"], "--devices: got 'cpu'; allowed: at least 2 ranks"),
    ],
)
def test_bad_traps_exit_2_with_one_line(argv, message, capsys):
    small = ["--data-size", "24", "--batch-size", "8", "--epochs", "2"]
    assert main(["compare", *small, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_uneven_step_counts():
    assert step_counts(200, 2) == [199, 200]
    assert step_counts(5, 3) == [3, 4, 5]


# ---------------------------------------------------------------------------------------------------------
# Real runs on gloo: each spawns its ranks.


@pytest.mark.slow
@pytest.mark.parametrize(("no_sync", "calls"), [(True, 1), (False, 4)])
def test_accumulation_matches_one_device_and_counts_its_all_reduces(no_sync, calls):
    res = lab(Traps(accumulate=4, no_sync=no_sync), epochs=2)
    ddp = res["ddp"]
    assert ddp["engine"] == "torch DDP on gloo" and ddp["status"] == "finished"
    assert len(ddp["per_step"]) == res["config"]["steps"] == 6
    assert exact(ddp) and exact(res["dataparallel"])
    # one bucket of W (2) and b, float32, per all-reduce
    assert (ddp["allreduce_calls"], ddp["allreduce_bytes"]) == (calls, calls * 3 * 4)
    assert ddp["allreduce_calls_total"] == 6 * calls
    assert ddp["seconds"] > 0
    # both byte figures named, one sentence: the buckets the hook measured, and what the ring sends of them
    # on K = 2 ranks (2(K-1)/K of a bucket), the figure the picture's all-reduce shows
    k = ddp["devices"]
    ring = round(2 * (k - 1) * calls * 3 * 4 / k)
    assert f"of {calls * 3 * 4} B of gradient buckets" in ddp["causes"][0]
    assert f"the ring sends 2(K−1)/K: {ring} B (the picture's figure)" in ddp["causes"][0]


@pytest.mark.slow
def test_accumulation_without_dividing_the_loss_differs_on_both_with_sgd():
    res = lab(Traps(accumulate=2, loss_scaling=False), epochs=1)
    for name in ("dataparallel", "ddp"):
        assert res[name]["first_divergent_step"] == 1
        assert any("not divided by 2" in c for c in res[name]["causes"])


@pytest.mark.slow
def test_uneven_without_join_fails_within_its_bound_and_names_the_waiting_rank(capsys):
    argv = ["compare", "--data-size", "24", "--batch-size", "8", "--epochs", "1", "--uneven"]
    assert main([*argv, "--json"]) == 1  # a failed run fails the command
    result = json.loads(capsys.readouterr().out)
    (row,) = result["results"]
    assert sorted(result["config"]["final_parameters"]) == sorted(result["config"]["engines"]) == [
        "ddp", "reference",
    ]  # the rows shown, and no strategy without one (FSDP's engine was described under no FSDP row)
    assert row["status"] == "failed" and row["engine"] == "torch DDP on gloo"
    assert row["steps_per_rank"] == [2, 3]
    assert [(w["rank"], w["step"]) for w in row["waiting"]] == [(1, 3)]
    assert row["seconds"] < row["bound_s"]
    assert row["waiting"][0]["waited_s"] < 5.0 + 2.0  # the group's timeout, or the closed connection sooner
    assert "rank 1 left waiting in the all-reduce of step 3" in row["reason"]
    waited_ms = round(row["waiting"][0]["waited_s"] * 1000)
    assert f"it ended after {waited_ms} ms (the group's timeout is 5 s)" in row["reason"]
    assert len(row["per_step"]) == 2 and max(row["per_step"]) <= TOL  # both ranks there: exact
    assert main(argv) == 1
    lines = capsys.readouterr().out.splitlines()
    (ddp,) = [line for line in lines if line.startswith("ddp ")]
    assert ddp.split()[:3] == ["ddp", "2", "failed"]  # in the table, not only in the bullet below it
    assert lines[4].split()[:3] == ["strategy", "devices", "result"]
    assert lines[1].startswith("Not the same: ddp failed, because rank 1 left waiting in the all-reduce")


@pytest.mark.slow
def test_uneven_with_join_finishes_and_its_shadow_all_reduce_changes_the_last_step():
    res = lab(Traps(join=True), epochs=1)
    row = res["ddp"]
    assert row["status"] == "finished" and row["waiting"] == []
    assert row["shadow_allreduces"] == {0: 1, 1: 0}  # rank 0 shadowed step 3's one all-reduce
    assert row["first_divergent_step"] == 3 and len(row["per_step"]) == 3
    assert row["seconds"] < row["bound_s"]
    # one truth: the final parameters reported are the real run's and its reference's, whose difference is
    # the row's final difference (they were one process's simulation of an even run, 0.0064 apart)
    finals = res["config"]["final_parameters"]
    gap = max(abs(a - b) for a, b in zip(finals["ddp"], finals["reference"]))
    assert gap == pytest.approx(row["final_abs_diff"], rel=1e-6) and gap > TOL


def test_the_tab_asks_the_batchnorm_question_and_draws_every_result():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from fitcore.runs.pool import close_server_pool

    page = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=60)
    try:
        page.run()
        page.checkbox(key="cmp_sync_bn").check()
        page.button(key="cmp_run").click().run()
        assert not page.exception
        (rows,) = [d.value for d in page.dataframe if "max |diff|" in d.value.columns]
        assert list(rows["strategy"]) == ["dataparallel", "ddp"]
        assert float(rows["max |diff|"][0]) > 1e-3 and float(rows["max |diff|"][1]) <= TOL
        assert "SyncBatchNorm" in rows["engine"][1] and list(rows["real run"]) == ["-", "-"]
        assert list(rows["result"]) == ["finished", "finished"]
        causes = [m.value for m in page.markdown if m.value.startswith("- **")]
        assert any("device-0 replica" in c for c in causes)
        chart = page.get("plotly_chart")[0].proto.spec
        assert json.loads(chart)["data"][1]["name"] == "ddp"  # one trace per result
        page.checkbox(key="cmp_uneven").check()
        page.button(key="cmp_run").click().run()
        assert "one question at a time" in page.error[0].value  # BatchNorm and uneven inputs together
    finally:
        try:
            page.session_state["pool"].shutdown()
        except KeyError:
            pass
        close_server_pool()


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    st.one_of(
        st.integers().filter(lambda n: not 1 <= n <= 64).map(str),
        st.text(min_size=1, max_size=8).filter(lambda s: not s.strip().lstrip("+-").isdigit()),
    ),
    st.sets(st.sampled_from(["--batchnorm", "--sync-batchnorm", "--uneven", "--join"]), max_size=2),
)
def test_fuzzed_trap_flags_exit_2_with_one_line_before_training(value, flags):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["compare", f"--accumulate={value}", *sorted(flags)])
        except SystemExit as exc:  # argparse's own refusal of a value that is not an integer
            code = exc.code
    assert code == 2
    (line,) = err.getvalue().strip().splitlines()
    assert "--accumulate" in line
