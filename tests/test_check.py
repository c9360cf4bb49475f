"""`python -m fitcore check`: the CPU rows really run, the GPU rows are planned from a (fake) machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import fitcore.kit.check as check
import fitcore.strategies.dataparallel.check as dp_check
import fitcore.strategies.ddp.check as ddp_check
import fitcore.strategies.fsdp.check as fsdp_check
import fitcore.strategies.pp.check as pp_check
import fitcore.strategies.tp.check as tp_check
from fitcore.cli import main as cli_main
from fitcore.core.devices import GPU
from fitcore.kit.check import CheckFailed, Machine, Row, Verified, plan_rows, probe, run_row
from fitcore.protocols import registry

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = Machine("3.11", "2.13.0+cpu", None, None, (), nccl=False, gloo=True)
ONE_GPU = replace(NO_GPU, cuda_runtime="12.8", driver="570.1", gpus=(GPU(0, "H200", 141 << 30),), nccl=True)
TWO_GPUS = replace(ONE_GPU, gpus=(GPU(0, "H200", 141 << 30), GPU(1, "H200", 141 << 30)))
CPU_ROWS = ["dataparallel cpu", "dataparallel virtual:2", "dataparallel virtual:3", "dataparallel virtual:8"]


def names(rows) -> list[str]:
    return [r.name for r in rows]


def skips(rows) -> dict[str, str]:
    return {r.name: r.skip for r in rows if r.run is None}


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    """The real CPU rows, run once: name -> Result."""
    rows = [r for r in plan_rows(NO_GPU) if r.name in CPU_ROWS]
    return {r.name: run_row(r) for r in rows}


@pytest.mark.parametrize(
    "name, split",
    [
        ("dataparallel cpu", [200]),
        ("dataparallel virtual:2", [100, 100]),
        ("dataparallel virtual:3", [67, 67, 66]),
        ("dataparallel virtual:8", [25] * 8),
    ],
)
def test_cpu_rows_pass_with_their_figures(cpu_results, name, split):
    result = cpu_results[name]
    assert (result.status, result.reason) == ("passed", "")
    assert result.figures["split"] == split
    assert split == [len(c) for c in torch.arange(200).chunk(len(split))]
    assert result.figures["steps"] == 40
    assert result.figures["lstsq_diff"] <= 1e-4 and result.figures["lstsq_tol"] == 1e-4
    assert f"split {'/'.join(map(str, split))} = tensor.chunk on all 40 steps" in result.verified
    assert result.seconds > 0


@pytest.mark.parametrize("name", CPU_ROWS[1:])
def test_virtual_rows_match_one_device(cpu_results, name):
    figures = cpu_results[name].figures
    assert figures["reference_diff"] <= 1e-5 and figures["reference_tol"] == 1e-5
    assert "|W - W_1dev| = " in cpu_results[name].verified
    assert "reference_diff" not in cpu_results["dataparallel cpu"].figures  # the reference itself


@pytest.mark.parametrize(
    "name, busy", [("dataparallel virtual:2", [100, 100]), ("dataparallel virtual:3", [67, 67, 66])]
)
def test_virtual_rows_verify_the_phases_the_picture_draws(cpu_results, name, busy):
    # float32, 2 features: each other busy device gets its chunk of X (rows * 2 * 4 B) and W, b (3 * 4 B),
    # sends back its output (rows * 4 B), gets its output gradient (rows * 4 B) and sends its gradients
    others = busy[1:]
    want = sum(rows * 2 * 4 + 12 + rows * 4 + rows * 4 + 12 for rows in others)
    assert cpu_results[name].figures["phases_bytes"] == want  # 1,624 B and 2,176 B
    assert f"phases on all 40 steps, {want} B a step" in cpu_results[name].verified
    assert cpu_results[name].figures["phases_seconds_first_device"] > 0
    assert "phases" not in cpu_results["dataparallel cpu"].verified  # one device: no DataParallel


def test_a_step_without_phases_fails_the_row(monkeypatch):
    real = dp_check._steps
    monkeypatch.setattr(dp_check, "_steps", lambda events: [s._replace(phases=None) for s in real(events)])
    result = run_row(Row("dataparallel virtual:2", lambda: dp_check.check_dataparallel("virtual:2")))
    assert (result.status, result.reason) == ("failed", "step 1 recorded no phases")


def test_a_figure_out_of_tolerance_fails_the_row(monkeypatch):
    monkeypatch.setattr(check, "LSTSQ_TOL", 1e-12)  # float32 training ends about 1e-7 from lstsq
    result = run_row(Row("dataparallel virtual:3", lambda: dp_check.check_dataparallel("virtual:3")))
    assert result.status == "failed" and result.verified == ""
    assert result.reason.startswith("|W - W_lstsq| = ") and result.reason.endswith(" is not <= 1e-12")


def test_environment_row_reports_this_machine():
    result = run_row(plan_rows(probe(gpus=[]))[0])
    assert (result.name, result.status) == ("environment", "passed")
    assert result.figures["torch"] == torch.__version__ and result.figures["gpus"] == []
    assert result.figures["gloo"] == torch.distributed.is_gloo_available()
    assert f"torch {torch.__version__}; " in result.verified and "no CUDA GPU" in result.verified


def test_a_machine_that_cannot_be_read_fails_the_environment_row_only(monkeypatch):
    def broken():
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(check, "cuda_gpus", broken)
    machine = check.safe_probe()
    assert machine.gpus == () and machine.error == "RuntimeError: CUDA driver initialization failed"
    result = run_row(plan_rows(machine)[0])
    assert result.result == (
        "failed: reading the machine raised RuntimeError: CUDA driver initialization failed; "
        "the CUDA rows are skipped"
    )


# ---------------------------------------------------------------------------------------------------------
# Planning from the GPUs the machine reports (nothing below runs a CUDA row).

BASE_NAMES = ["environment", *CPU_ROWS, "dataparallel cuda:0", "dataparallel virtual:3@cuda:0"]
# each strategy's rows after those, by strategy: the table lists them in the registry's order
STRATEGY_ROWS = {
    "dataparallel": ["dataparallel cuda (2 GPUs, nn.DataParallel)"],
    "ddp": [
        "ddp gloo 2 ranks (CPU)",
        "ddp on a dp=2,tp=2 mesh, 4 gloo ranks (CPU)",
        "ddp nccl 2 ranks (1 per GPU)",
        "syncbatchnorm nccl 2 ranks (1 per GPU)",
        "ddp across 2 hosts (network namespaces)",
    ],
    "fsdp": [
        "fsdp gloo 2 ranks (CPU)",
        "fsdp on a dp=2,tp=2 mesh, 4 gloo ranks (CPU)",
        "fsdp nccl 2 ranks (1 per GPU)",
    ],
    "tp": ["tp gloo 2 ranks (CPU)", "tp nccl 2 ranks (1 per GPU)"],
    "pp": ["pp gloo 2 ranks (CPU)", "pp nccl 2 ranks (1 per GPU)"],
}
# the nccl rows, skipped for one reason on a machine: each strategy's own
NCCL_ROWS = {
    "dataparallel": [],
    "ddp": ["ddp nccl 2 ranks (1 per GPU)", "syncbatchnorm nccl 2 ranks (1 per GPU)"],
    "fsdp": ["fsdp nccl 2 ranks (1 per GPU)"],
    "tp": ["tp nccl 2 ranks (1 per GPU)"],
    "pp": ["pp nccl 2 ranks (1 per GPU)"],
}


def strategy_rows() -> list[str]:
    """Every registered strategy's rows, in the registry's order (a strategy with no entry here fails)."""
    assert set(STRATEGY_ROWS) == set(registry.NAMES) == set(NCCL_ROWS)
    return [row for name in registry.NAMES for row in STRATEGY_ROWS[name]]


def nccl_skips(reason: str) -> dict[str, str]:
    return {row: reason for name in registry.NAMES for row in NCCL_ROWS[name]}


def test_without_gpus_the_cuda_rows_are_skipped_with_their_reasons():
    rows = plan_rows(NO_GPU)
    assert names(rows) == BASE_NAMES + strategy_rows()
    assert skips(rows) == {
        "dataparallel cuda:0": "no CUDA GPU",
        "dataparallel virtual:3@cuda:0": "no CUDA GPU",
        "dataparallel cuda (2 GPUs, nn.DataParallel)": "needs 2 GPUs",
        **nccl_skips("nccl not available"),
    }
    assert run_row(rows[-1]).result == "skipped: nccl not available"


def test_without_gloo_the_gloo_row_is_skipped():
    assert skips(plan_rows(replace(NO_GPU, gloo=False)))["ddp gloo 2 ranks (CPU)"] == "gloo not available"


def test_without_root_the_hosts_row_is_skipped_with_its_reason():
    rows = plan_rows(replace(NO_GPU, no_hosts="needs root (ip netns)"))
    assert skips(rows)["ddp across 2 hosts (network namespaces)"] == "needs root (ip netns)"
    assert skips(plan_rows(replace(NO_GPU, gloo=False)))["ddp across 2 hosts (network namespaces)"] == (
        "gloo not available"
    )


def test_one_gpu_plans_the_single_gpu_rows():
    rows = plan_rows(ONE_GPU)
    assert names(rows)[:7] == BASE_NAMES
    assert skips(rows) == {
        "dataparallel cuda (2 GPUs, nn.DataParallel)": "needs 2 GPUs",
        **nccl_skips("needs 2 GPUs"),
    }


def test_two_gpus_plan_every_row():
    rows = plan_rows(TWO_GPUS)
    assert names(rows)[7:] == strategy_rows()
    assert skips(rows) == {}
    assert skips(plan_rows(replace(TWO_GPUS, nccl=False))) == nccl_skips("nccl not available")


def test_cuda_rows_call_the_cpu_rows_comparisons_with_a_cuda_spec(monkeypatch):
    calls = []
    monkeypatch.setattr(
        dp_check, "check_dataparallel", lambda spec, gpus, **kw: calls.append(("dp", spec, gpus))
    )
    monkeypatch.setattr(ddp_check, "check_ddp", lambda spec, k, gpus=(): calls.append(("ddp", spec, k, gpus)))
    monkeypatch.setattr(ddp_check, "check_sync_batchnorm", lambda k: calls.append(("syncbn", k)))
    monkeypatch.setattr(ddp_check, "check_mesh", lambda name, *a: calls.append(("mesh", name)))
    monkeypatch.setattr(fsdp_check, "check_mesh", lambda name, *a: calls.append(("mesh", name)))
    monkeypatch.setattr(
        fsdp_check, "check_fsdp", lambda spec, k, gpus=(): calls.append(("fsdp", spec, k, gpus))
    )
    monkeypatch.setattr(tp_check, "check_tp", lambda spec, k, gpus=(): calls.append(("tp", spec, k, gpus)))
    monkeypatch.setattr(pp_check, "check_pp", lambda spec, k, gpus=(): calls.append(("pp", spec, k, gpus)))
    for row in plan_rows(TWO_GPUS)[5:]:
        if row.name.startswith("ddp across"):
            continue  # the hosts row, which makes namespaces, is not faked
        row.run()
    gpus = TWO_GPUS.gpus
    assert calls == [
        ("dp", "cuda:0", gpus),
        ("dp", "virtual:3@cuda:0", gpus),
        ("dp", "cuda", gpus),
        ("ddp", "cpu", 2, ()),
        ("mesh", "ddp"),
        ("ddp", "cuda", 2, gpus),
        ("syncbn", 2),
        ("fsdp", "cpu", 2, ()),
        ("mesh", "fsdp"),
        ("fsdp", "cuda", 2, gpus),
        ("tp", "cpu", 2, ()),
        ("tp", "cuda", 2, gpus),
        ("pp", "cpu", 2, ()),
        ("pp", "cuda", 2, gpus),
    ]


# ---------------------------------------------------------------------------------------------------------
# The command: table, JSON, exit status.


def passing() -> Verified:
    return Verified("split 1/1 = tensor.chunk", {"split": [1, 1]})


def raising() -> Verified:
    raise ValueError("boom")


def out_of_tolerance() -> Verified:
    raise CheckFailed("|W - W_1dev| = 0.1 is not <= 1e-05")


def fake_rows(*rows: Row):
    return lambda machine: list(rows)


def cells(line: str) -> list[str]:
    """A table line's columns: they are separated by two spaces or more."""
    return re.split(r"\s{2,}", line.strip())


def run_check(capsys, monkeypatch, rows, *argv: str):
    monkeypatch.setattr(check, "plan_rows", fake_rows(*rows))
    try:
        code = cli_main(["check", *argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_all_passed_or_skipped_exits_0(capsys, monkeypatch):
    rows = (Row("a", passing), Row("b", None, "no CUDA GPU"))
    code, out, err = run_check(capsys, monkeypatch, rows)
    assert code == 0 and err == []
    assert out[0].split() == ["path", "result", "time"]
    assert cells(out[2])[:2] == ["a", "passed"] and cells(out[2])[2].endswith(" s")
    assert out[3] == "    split 1/1 = tensor.chunk"  # what it verified, under it
    assert cells(out[4]) == ["b", "skipped: no CUDA GPU", "-"]
    assert out[-1] == "check: OK (1 passed, 0 failed, 1 skipped)"
    assert max(len(line) for line in out) <= 104


def test_a_failed_row_exits_1_and_is_named_last(capsys, monkeypatch):
    rows = (Row("a", passing), Row("broken", raising), Row("off", out_of_tolerance))
    code, out, err = run_check(capsys, monkeypatch, rows)
    assert code == 1 and err == []
    assert "failed: ValueError: boom" in out[4] and "Traceback" not in "\n".join(out)
    assert "failed: |W - W_1dev| = 0.1 is not <= 1e-05" in out[5]
    assert out[-1] == "check: FAILED: broken, off (1 passed, 2 failed, 0 skipped)"


def test_json_has_one_object_per_row(capsys, monkeypatch):
    real = [r for r in plan_rows(NO_GPU) if r.name in ("environment", "dataparallel virtual:3")]
    rows = (*real, Row("skipped", None, "needs 2 GPUs"), Row("broken", raising))
    code, out, err = run_check(capsys, monkeypatch, rows, "--json")
    assert code == 1 and err == [] and len(out) == 1
    doc = json.loads(out[0])
    assert [r["name"] for r in doc["rows"]] == ["environment", "dataparallel virtual:3", "skipped", "broken"]
    assert [r["result"] for r in doc["rows"]] == [
        "passed",
        "passed",
        "skipped: needs 2 GPUs",
        "failed: ValueError: boom",
    ]
    assert doc["rows"][1]["figures"]["split"] == [67, 67, 66]
    assert doc["exit_code"] == 1 and doc["summary"] == "check: FAILED: broken (2 passed, 1 failed, 1 skipped)"


@pytest.mark.parametrize("argv", [["--bogus"], ["--json", "extra"], ["--epochs", "3"]])
def test_bad_arguments_exit_2_with_one_line(capsys, monkeypatch, argv):
    code, out, err = run_check(capsys, monkeypatch, (Row("a", raising),), *argv)
    assert code == 2 and out == [] and len(err) == 1
    assert err[0].startswith("fitcore check: error: ") and err[0].endswith(
        "(see python -m fitcore check --help)"
    )


def test_help_exits_0(capsys, monkeypatch):
    code, out, _ = run_check(capsys, monkeypatch, (), "--help")
    assert code == 0 and out[0] == "usage: python -m fitcore check [-h] [--lang LANG] [--json]"


@pytest.mark.slow
def test_the_real_check_passes_every_row_this_machine_runs():
    """`python -m fitcore check --json`, as a user runs it: the ddp gloo row spawns its two ranks."""
    done = subprocess.run(
        [sys.executable, "-m", "fitcore", "check", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)["rows"]}
    assert list(rows) == names(plan_rows(probe()))
    assert {r["status"] for r in rows.values()} <= {"passed", "skipped"}
    gloo = rows["ddp gloo 2 ranks (CPU)"]
    assert gloo["status"] == "passed" and gloo["figures"]["split"] == [100, 100]
    assert gloo["figures"]["ranks_identical"] and gloo["figures"]["reference_diff"] <= 1e-5
    assert gloo["figures"]["lstsq_diff"] <= 1e-4
    # DDP over dp on a dp=2 x tp=2 mesh: rank r at (dp, tp) = divmod(r, 2) takes rows [100 dp, +100) and
    # column tp of the 2 features; one process on the same rows gives the very same parameters
    mesh = rows["ddp on a dp=2,tp=2 mesh, 4 gloo ranks (CPU)"]
    assert mesh["status"] == "passed" and mesh["figures"]["reference_diff"] <= 1e-5
    blocks = [[0, 100, [0, 1]], [0, 100, [1, 2]], [100, 200, [0, 1]], [100, 200, [1, 2]]]
    assert mesh["figures"]["blocks"] == blocks
    assert mesh["figures"]["lstsq_diff"] <= 1e-4
    fsdp_mesh = rows["fsdp on a dp=2,tp=2 mesh, 4 gloo ranks (CPU)"]  # fully_shard over dp, the same blocks
    assert fsdp_mesh["status"] == "passed" and fsdp_mesh["figures"]["blocks"] == blocks
    assert fsdp_mesh["figures"]["reference_diff"] <= 1e-5 and fsdp_mesh["figures"]["lstsq_diff"] <= 1e-4
    fsdp = rows["fsdp gloo 2 ranks (CPU)"]  # 3 weights on 2 ranks: rank 0 holds w1, w2 and b, rank 1 w3
    assert fsdp["status"] == "passed" and fsdp["figures"]["shards"] == ["W[0:2] + b", "W[2:3]"]
    assert fsdp["figures"]["padded_numel"] == 3 and fsdp["figures"]["reference_diff"] <= 1e-5
    assert fsdp["figures"]["ranks_identical"] and fsdp["figures"]["lstsq_diff"] <= 1e-4
    if not torch.cuda.is_available():
        assert rows["dataparallel cuda:0"]["result"] == "skipped: no CUDA GPU"
