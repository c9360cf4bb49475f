"""`python -m fitcore`, called in-process through fitcore.cli.main, plus two real subprocesses."""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fitcore.cli import main
from fitcore.core.config import FitConfig
from fitcore.core.devices import parse_devices
from fitcore.core.events import Step

cli_mod = importlib.import_module("fitcore.cli")
ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    """(exit status, stdout lines, stderr lines), as `python -m fitcore` would give them."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits (bad flags, --help)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def learned(lines: list[str]) -> list[float]:
    """The numbers of the `Learned:` line: W then b."""
    (line,) = [x for x in lines if x.startswith("Learned:")]
    w_text = line.split("W = [")[1].split("]")[0]
    return [float(v) for v in w_text.split(",")] + [float(line.split("b = ")[1])]


def test_tutorial_output_for_three_emulated_devices(capsys):
    code, out, err = run_cli(capsys, "--devices", "virtual:3", "--epochs", "1")
    assert code == 0 and err == []
    assert out[0] == parse_devices("virtual:3", gpus=[]).describe()
    assert out[0].startswith("Emulating 3 devices on the CPU") and "no GPU is used" in out[0]
    assert out[1:4] == [
        f"\tIn Model: input size torch.Size([{n}, 2]) output size torch.Size([{n}, 1])"
        f"  [virtual:{i} (emulated on CPU)]"
        for i, n in enumerate((67, 67, 66))
    ]
    assert out[4].startswith(
        "Outside: input size torch.Size([200, 2]) output_size torch.Size([200, 1]) loss: "
    )
    assert out[4].endswith("(epoch 1, step 1)")
    assert [line.split(":")[0] for line in out[5:]] == ["Learned", "True", "Least squares", "Status"]
    assert out[8].startswith("Status: finished (finished 1 step in ")


def test_default_run_prints_every_step_and_learns_the_parameters(capsys):
    code, out, err = run_cli(capsys)
    assert code == 0 and err == []
    assert out[0].startswith("Emulating 2 devices on the CPU (virtual:2)")
    in_model = [x for x in out if x.startswith("\tIn Model:")]
    outside = [x for x in out if x.startswith("Outside:")]
    assert len(in_model) == 400 and len(outside) == 200 and len(out) == 1 + 600 + 4
    assert all("torch.Size([100, 2]) output size torch.Size([100, 1])" in x for x in in_model)
    assert outside[-1].endswith("(epoch 200, step 200)")
    w1, w2, b = learned(out)
    assert abs(w1 - 5.2) < 1e-3 and abs(w2 - 9.6) < 1e-3 and abs(b - 3.4) < 1e-3
    assert out[-3] == "True:           W = [5.2000, 9.6000]  b = 3.4000"


def outside_steps(out: list[str]) -> list[int]:
    """The step numbers of the `Outside:` lines printed."""
    return [int(x.split("step ")[-1].rstrip(")")) for x in out if x.startswith("Outside:")]


def test_print_every(capsys):
    code, out, _ = run_cli(capsys, "--epochs", "10", "--print-every", "4")
    assert code == 0 and outside_steps(out) == [1, 5, 9, 10]  # the last step too


def test_print_every_that_does_not_divide_the_steps_still_prints_the_last(capsys):
    code, out, _ = run_cli(capsys, "--devices", "cpu", "--print-every", "7")
    assert code == 0 and outside_steps(out) == list(range(1, 200, 7)) + [200]  # 1, 8, ..., 197, 200
    assert out[-1].startswith("Status: finished (finished 200 steps in ")


def test_print_every_prints_the_last_step_of_a_run_stopped_early(capsys, monkeypatch):
    stop_at_step(monkeypatch, 9)
    code, out, _ = run_cli(capsys, "--devices", "cpu", "--print-every", "4")
    assert code == 130 and outside_steps(out) == [1, 5, 9]
    code, out, _ = run_cli(capsys, "--devices", "cpu", "--print-every", "5")
    assert code == 130 and outside_steps(out) == [1, 6, 9]
    assert out[-1].startswith("Status: stopped (interrupted (Ctrl-C)); final loss ")


def test_quiet_prints_only_the_summary(capsys):
    code, out, err = run_cli(capsys, "--quiet", "--devices", "cpu")
    assert code == 0 and err == []
    assert [line.split(":")[0] for line in out] == ["Learned", "True", "Least squares", "Status"]
    assert out[3].startswith("Status: finished (finished 200 steps in ")


def test_json_for_the_default_run(capsys):
    code, out, err = run_cli(capsys, "--json")
    assert code == 0 and err == [] and len(out) == 1
    result = json.loads(out[0])
    for key in (
        "config",
        "status",
        "weights",
        "bias",
        "lstsq_weights",
        "lstsq_bias",
        "first_step",
        "steps_per_second",
        "final_loss",
    ):
        assert key in result
    assert result["config"] == FitConfig().to_dict()
    assert (result["status"], result["steps"], result["strategy"], result["emulated"]) == (
        "finished",
        200,
        "dataparallel",
        True,
    )
    assert result["parallelism"] == "DataParallel emulated on the CPU (virtual:2)"
    assert "data_parallel" not in result  # it said false for this DataParallel run: parallelism says it all
    # device 0 holds Adam's state (W's and b's two moments, 24 B, and a 4-byte step count each) and, during a
    # step, the 200 gathered outputs and the loss (201 x 4 B); device 1 a replica's copy
    assert result["per_rank_memory"] == [
        {"rank": 0, "parameters": 12, "gradients": 12, "optimizer_state": 32, "gathered": 804},
        {"rank": 1, "parameters": 12, "gradients": 12, "optimizer_state": 0},
    ]
    assert result["devices"] == ["virtual:0 (emulated on CPU)", "virtual:1 (emulated on CPU)"]
    assert len(result["weights"]) == 2 == len(result["lstsq_weights"])
    assert max(abs(w - r) for w, r in zip(result["weights"], result["lstsq_weights"])) < 1e-3
    assert abs(result["bias"] - result["lstsq_bias"]) < 1e-3
    assert max(abs(w - t) for w, t in zip(result["lstsq_weights"], (5.2, 9.6))) < 1e-5
    assert (result["true_weights"], result["true_bias"]) == ([5.2, 9.6], 3.4)
    assert 0 <= result["final_loss"] < 1e-4
    assert result["steps_per_second"] > 0
    assert (result["total_steps"], result["latest_step"]["step"]) == (200, 200)
    assert result["first_step"] == {
        "step": 1,
        "input_shape": [200, 2],
        "output_shape": [200, 1],
        "replicas": [
            {
                "device": f"virtual:{i} (emulated on CPU)",
                "batch_rows": rows,
                "input_shape": [100, 2],
                "output_shape": [100, 1],
            }
            for i, rows in enumerate(
                (
                    {"first_position": 0, "last_position": 99, "rows": 100},
                    {"first_position": 100, "last_position": 199, "rows": 100},
                )
            )
        ],
        # each phase's bytes, as the picture lists them: 100 rows of 2 features scattered to device 1 (800),
        # W and b replicated (12), its 100 outputs gathered (400), their gradients sent back (400), its
        # gradients reduced (12)
        "step_bytes": {
            "scatter": 800,
            "replicate": 12,
            "parallel_apply": 0,
            "gather": 400,
            "loss": 0,
            "backward": 400,
            "reduce": 12,
            "optimizer": 0,
        },
        # the same bytes, device by device, exact: device 0 sends the outputs' gradients back (400), device 1
        # receives its rows, the replica, and sends its outputs and gradients (800 + 12 + 400 + 12)
        "step_bytes_per_device": [
            {"device": "virtual:0 (emulated on CPU)", "total": 400,
             "bytes": {"scatter": 0, "replicate": 0, "parallel_apply": 0, "gather": 0, "loss": 0,
                       "backward": 400, "reduce": 0, "optimizer": 0}},
            {"device": "virtual:1 (emulated on CPU)", "total": 1224,
             "bytes": {"scatter": 800, "replicate": 12, "parallel_apply": 0, "gather": 400, "reduce": 12}},
        ],  # fmt: skip
        "step_bytes_total": 1624,
    }


def test_json_uneven_split_without_shuffle(capsys):
    code, out, _ = run_cli(
        capsys,
        "--json",
        "--devices",
        "virtual:3",
        "--data-size",
        "250",
        "--batch-size",
        "100",
        "--epochs",
        "2",
    )
    assert code == 0
    result = json.loads(out[0])
    assert result["steps"] == 6 and result["config"]["batch_size"] == 100
    assert [r["batch_rows"] for r in result["first_step"]["replicas"]] == [
        {"first_position": 0, "last_position": 33, "rows": 34},
        {"first_position": 34, "last_position": 67, "rows": 34},
        {"first_position": 68, "last_position": 99, "rows": 32},
    ]
    assert result["parallelism"] == "DataParallel emulated on the CPU (virtual:3)"


def test_no_shuffle_flag(capsys):
    code, out, _ = run_cli(capsys, "--json", "--no-shuffle", "--epochs", "2")
    assert code == 0 and json.loads(out[0])["config"]["shuffle"] is False


# (arguments, text the single stderr line must contain)
BAD_INPUT = [
    (["--batch-size", "300"], "--batch-size: got 300; allowed: an integer from 1 to 200 (the data size)"),
    (["--batch-size", "abc"], "--batch-size: got 'abc'; allowed: an integer"),
    (["--batch-size", ""], "--batch-size: got ''; allowed: an integer"),
    (["--data-size", "0"], "--data-size: got 0"),
    (["--data-size", "1.5"], "--data-size: got '1.5'"),
    (["--epochs", "0"], "--epochs: got 0"),
    (["--lr", "0"], "--lr: got 0.0; allowed: a finite number greater than 0"),
    (["--lr", "nan"], "--lr: got nan"),
    (["--lr", "inf"], "--lr: got inf"),
    (["--lr", "fast"], "--lr: got 'fast'; allowed: a number"),
    (["--noise", "-1"], "--noise: got -1.0"),
    (["--bias", "inf"], "--bias: got inf"),
    (["--weights", "1", "x"], "--weights: got ['1', 'x']; allowed: 1 to 16 numbers"),
    (["--weights", *["1"] * 17], "--weights: got [1.0, 1.0"),
    (["--seed", "-1"], "--seed: got -1"),
    (["--optimizer", "rmsprop"], "--optimizer: got 'rmsprop'; allowed: adam or sgd"),
    (["--strategy", "horovod"], "--strategy: got 'horovod'; allowed: dataparallel or ddp"),
    (["--devices", "gpu"], "--devices: got 'gpu'; allowed: cpu, virtual:K (K from 1 to 8)"),
    (["--devices", "virtual:9"], "--devices: got 'virtual:9'"),
    (["--devices", "cuda:99"], "--devices: got 'cuda:99'"),
    (
        ["--data-size", "3", "--batch-size", "3", "--devices", "virtual:4"],
        "at most as many devices as data rows",
    ),
    (["--data-size", "10000000000000"], "--data-size: got 10000000000000; allowed: at most"),
    (["--print-every", "0"], "--print-every: got 0; allowed: an integer 1 or more"),
    (["--print-every", "x"], "argument --print-every: got 'x'; allowed: an integer 1 or more"),
    (["--print-every", "١"], "argument --print-every: got '١'; allowed: an integer 1 or more"),
    (["--epochs", "١٢"], "--epochs: got '١٢'; allowed: an integer"),  # int() reads it as 12
    (["--lr", "１"], "--lr: got '１'; allowed: a number"),  # full-width: float() reads it as 1.0
    (["--seed", "1_000"], "--seed: got '1_000'; allowed: an integer"),
    (["--devices", "virtual:²"], "--devices: got 'virtual:²'; allowed: cpu, virtual:K"),  # was a traceback
    (["--weights"], "argument --weights: expected at least one argument"),
    (["--foo"], "unrecognized arguments: --foo"),
    (["--shuffle"], "unrecognized arguments: --shuffle"),
    (["--epochs"], "argument --epochs: expected one argument"),
    (["--quiet", "--json"], "argument --json: not allowed with argument --quiet"),
]


@pytest.mark.parametrize("argv, expected", BAD_INPUT)
def test_bad_input_exits_2_with_one_line(capsys, argv, expected):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == []
    assert len(err) == 1, err
    assert err[0].startswith("fitcore: error: ") and expected in err[0]
    assert "Traceback" not in err[0]


def test_help_exits_0(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and out[0].startswith("usage: python -m fitcore")


def test_divergence_exits_1(capsys):
    code, out, _ = run_cli(capsys, "--quiet", "--optimizer", "sgd", "--lr", "1e6")
    assert code == 1
    assert out[-1].startswith("Status: diverged (the loss became ")
    assert "the learning rate 1e+06 is too high" in out[-1]


def stop_at_step(monkeypatch, n: int) -> None:
    """Make the CLI's runs press Ctrl-C right after step n."""
    real_trainer_for = cli_mod.trainer_for

    def trainer_for(cfg):
        train = real_trainer_for(cfg)

        def interrupted(cfg, on_event, control):
            def on_step(event):
                on_event(event)
                if isinstance(event, Step) and event.step == n:
                    signal.raise_signal(signal.SIGINT)  # the handler main() installed

            return train(cfg, on_step, control)

        return interrupted

    monkeypatch.setattr(cli_mod, "trainer_for", trainer_for)


def test_ctrl_c_stops_between_steps_and_still_prints_the_summary(capsys, monkeypatch):
    stop_at_step(monkeypatch, 3)
    before = signal.getsignal(signal.SIGINT)
    code, out, _ = run_cli(capsys, "--quiet")
    assert code == 130
    assert out[-1].startswith("Status: stopped (interrupted (Ctrl-C)); final loss ")
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_python_m_fitcore_in_a_subprocess():
    ok = subprocess.run(
        [sys.executable, "-m", "fitcore", "--devices", "virtual:3", "--epochs", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0].startswith("Emulating 3 devices on the CPU (virtual:3)")
    assert [line.split("  [")[0] for line in lines[1:4]] == [
        "\tIn Model: input size torch.Size([67, 2]) output size torch.Size([67, 1])",
        "\tIn Model: input size torch.Size([67, 2]) output size torch.Size([67, 1])",
        "\tIn Model: input size torch.Size([66, 2]) output size torch.Size([66, 1])",
    ]
    assert lines[4].startswith(
        "Outside: input size torch.Size([200, 2]) output_size torch.Size([200, 1]) loss:"
    )

    bad = subprocess.run(
        [sys.executable, "-m", "fitcore", "--batch-size", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == [
        "fitcore: error: --batch-size: got 300; allowed: an integer from 1 to 200 (the data size)"
    ]


def test_a_reader_that_goes_away_ends_the_run_without_a_traceback():
    """`python -m fitcore | head -3`: the run stops at the closed pipe and exits 141 (SIGPIPE)."""
    command = [sys.executable, "-m", "fitcore", "--devices", "virtual:2", "--epochs", "100000"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()  # what head does once it has its lines
    code = proc.wait(timeout=120)  # 100,000 steps would take minutes: the run must stop at the pipe
    err = proc.stderr.read()
    proc.stderr.close()
    assert first[0].startswith("Emulating 2 devices on the CPU")
    assert code == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err and err == ""


def test_a_ranked_strategy_without_torchrun_is_refused_under_torchrun_with_one_line(capsys, monkeypatch):
    """Every built-in ranked strategy runs under torchrun (fitcore.engine.torchrun); one an outside package
    registers without a torchrun trainer is refused with one line, never run as another strategy."""
    import dataclasses

    from fitcore.protocols import registry

    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ranked = [s for s in registry.STRATEGIES.values() if s.processes]
    assert ranked and all(s.torchrun is not None for s in ranked)
    from tests import solo_strategy  # its catalog: a second copy of a package's own would clash

    solo = solo_strategy.STRATEGY
    spawned = dataclasses.replace(ranked[0], name="spawned_only", torchrun=None, options=(), words=solo.words,
                                  locale=solo.locale)  # fmt: skip
    registry.register(spawned)
    try:
        code, out, err = run_cli(capsys, "--strategy", "spawned_only", "--devices", "cpu", "--epochs", "1")
    finally:
        registry.unregister("spawned_only")
    names = ", ".join(s.name for s in ranked)
    assert (code, out) == (2, [])
    assert err == [
        f"fitcore: error: --strategy: got 'spawned_only'; allowed: under torchrun: {names} (this strategy "
        "runs on its own spawned ranks, not yet under torchrun)"
    ]


def test_the_main_help_lists_every_command_and_serve_has_its_own_usage(capsys):
    code, out, _ = run_cli(capsys, "--help")
    listed = [line.split()[0] for line in out[out.index("commands (each has its own --help):") + 1 :]]
    assert code == 0 and listed == ["(none)", "check", "compare", "whatif", "replay", "examples", "serve"]
    for command in listed[1:-1]:  # each has its own usage
        code, usage, _ = run_cli(capsys, command, "--help")
        assert code == 0 and usage[0].startswith(f"usage: python -m fitcore {command}")
    code, usage, _ = run_cli(capsys, "serve", "--help")  # its own words, not Streamlit's
    assert code == 0 and usage[0] == "usage: python -m fitcore serve [streamlit run's flags]"
