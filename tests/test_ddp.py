"""The ddp strategy: DistributedDataParallel on spawned ranks and under torchrun, against one process.

Spawning ranks costs seconds (each imports torch), so only a few tests start any; the rest check the
arithmetic, the shards and the validation without a process group.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from fitcore import cli
from fitcore.core.config import MAX_WORKERS, ConfigError, FitConfig, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.devices import GPU
from fitcore.core.events import Detail, RunEnded, RunStarted, Step
from fitcore.core.parallel import LinearModel, init_parameters
from fitcore.core.shards import Layout, epoch_shards, epoch_value, shards_value
from fitcore.core.train import make_optimizer
from fitcore.engine import warmstart
from fitcore.engine.launcher import launch
from fitcore.engine.torchrun import TorchrunEnv, config_for_torchrun, torchrun_env
from fitcore.protocols import registry
from fitcore.runs.runner import Run
from fitcore.view.ranks import row_owners, shard_table
from tests.helpers import PauseWatch, wait_for
from tests.view_helpers import plan_of

ROOT = Path(__file__).resolve().parents[1]

# 11 rows on 2 ranks: shards of 6 with one row repeated; 2 rows per rank and step, 3 steps per epoch
SMALL = FitConfig(
    weights=(1.5, -2.0), bias=0.5, noise=0.1, data_size=11, batch_size=4, epochs=4, lr=0.05,
    devices="cpu", strategy="ddp", workers=2,
)  # fmt: skip


def reference(cfg: FitConfig) -> tuple[list[float], tuple[float, ...], float]:
    """One process on the rows DDP's ranks take together at each step, in DistributedSampler's order."""
    X, y = make_data(cfg)
    model = LinearModel(cfg.n_features)
    init_parameters(model, cfg.seed + 1)
    optimizer = make_optimizer(cfg, model.parameters())
    b = math.ceil(cfg.batch_size / cfg.workers)
    losses = []
    for epoch in range(cfg.epochs):
        shards = []
        for rank in range(cfg.workers):
            s = DistributedSampler(range(cfg.data_size), cfg.workers, rank, cfg.shuffle, cfg.seed, False)
            s.set_epoch(epoch)
            shards.append(list(s))
        for start in range(0, len(shards[0]), b):
            rows = [i for shard in shards for i in shard[start : start + b]]  # rank 0's rows, then rank 1's
            loss = F.mse_loss(model(X[rows]), y[rows])
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return losses, tuple(model.fc.weight.detach().view(-1).tolist()), model.fc.bias.item()


def listening(port: int) -> bool:
    """True if some socket listens on `port` (state 0A in /proc/net/tcp and tcp6)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    return True
    return False


def stat_of(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return fields[0], int(fields[1])


def children_of(pid: int) -> list[str]:
    """The process ids of pid's children, from /proc (every thread's list)."""
    return [c for path in Path(f"/proc/{pid}/task").glob("*/children") for c in path.read_text().split()]


def assert_all_gone(details: dict) -> None:
    """No rank process left (not even a zombie), no child of ours, and the store's port free again."""
    for pid in details["group"]["pids"]:
        assert not Path(f"/proc/{pid}").exists(), f"rank process {pid} is still there"
    assert multiprocessing.active_children() == []
    # the ranks are the forkserver's children (fitcore.engine.warmstart), which waits for the next run with
    # none
    server = warmstart.server_pid()
    assert server is not None and Path(f"/proc/{server}").exists()
    assert children_of(server) == []
    port = details["group"]["master_port"]
    assert not listening(port)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


# ---------------------------------------------------------------------------------------------------------
# Arithmetic, shards and validation: no processes.


@pytest.mark.parametrize(
    "n, batch, k, per_rank, steps",
    [
        (200, 200, 2, 100, 1),  # the tutorial: 100 rows per rank, one step per epoch
        (11, 4, 2, 2, 3),  # shards of 6, 2 rows per step
        (10, 3, 3, 1, 4),  # shards of 4, 1 row per step: global batch 3
        (10, 4, 3, 2, 2),  # ceil(4 / 3) = 2: global batch 6, not 4
        (7, 7, 7, 1, 1),  # one row per rank and step
    ],
)
def test_layout_rows_and_steps(n, batch, k, per_rank, steps):
    layout = Layout(n, k, batch)
    assert layout.per_rank_batch == per_rank
    assert layout.steps_per_epoch == steps
    assert layout.rows_per_rank == len(list(DistributedSampler(range(n), k, 0, False, 0, False)))
    # every step gives every rank the same rows, and the steps cover the shard exactly
    assert sum(layout.local_rows(j) for j in range(1, steps + 1)) == layout.rows_per_rank
    cfg = FitConfig(data_size=n, batch_size=batch, strategy="ddp", workers=k, epochs=3)
    assert cfg.batches_per_epoch == steps and cfg.total_steps == 3 * steps


def test_ten_rows_on_three_ranks_pad_from_the_start():
    shards = epoch_shards(10, 3, shuffle=False, seed=0, epoch=1)
    assert shards == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]  # 12 slots: rows 0 and 1 twice
    value = epoch_value(Layout(10, 3, 3), ("a", "b", "c"), 1, shards)
    assert [r["count"] for r in value["ranks"]] == [4, 4, 4]
    assert [r["padded"] for r in value["ranks"]] == [[], [0], [1]]
    assert value["repeated"] == [0, 1]


@pytest.mark.parametrize("n, k", [(10, 3), (11, 2), (200, 2), (7, 4), (5, 5), (9, 8)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_follow_the_sampler_rule(n, k, shuffle):
    seed, epoch = 7, 3
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch - 1)).tolist()
    if not shuffle:
        order = list(range(n))
    size = math.ceil(n / k)
    padded = order + order[: size * k - n]  # the first rows of the order pad the end
    expected = [padded[r::k] for r in range(k)]
    shards = epoch_shards(n, k, shuffle, seed, epoch)
    assert shards == expected
    layout = Layout(n, k, n)
    value = epoch_value(layout, tuple(f"rank {r}" for r in range(k)), epoch, shards)
    assert value["repeated"] == order[: layout.padding]
    assert sorted(i for r in value["ranks"] for i in r["padded"]) == sorted(order[: layout.padding])
    owners = row_owners(shards_value(FitConfig(data_size=n), layout, ["x"] * k, value, value))
    assert all(len(o) == (2 if i in order[: layout.padding] else 1) for i, o in enumerate(owners))


def test_shard_table_reads_a_snapshots_extra():
    layout = Layout(10, 3, 3)
    labels = tuple(f"rank {r} · cpu · gloo" for r in range(3))
    first = epoch_value(layout, labels, 1, epoch_shards(10, 3, False, 0, 1))
    extra = {"shards": shards_value(FitConfig(data_size=10, shuffle=False), layout, labels, first, first)}
    table = shard_table(extra, "first")
    assert [(t["rank"], t["rows"], t["first"], t["last"], t["padded"]) for t in table] == [
        (0, 4, 0, 9, []),
        (1, 4, 1, 0, [0]),
        (2, 4, 2, 1, [1]),
    ]
    assert table[1]["device"] == labels[1] and table[1]["indices"] == [1, 4, 7, 0]
    assert shard_table({}) == [] and row_owners({}) is None


def test_explanation_contrasts_the_two_wrappers():
    text = registry.strategy("ddp").markdown()
    for words in ("one process", "one process per device", "scatter", "gather", "all-reduce", "shard"):
        assert words in text.lower().replace("**", "")


TWO_GPUS = [GPU(0, "test GPU", 2**34), GPU(1, "test GPU", 2**34)]


@pytest.mark.parametrize(
    "changes, gpus, field, allowed",
    [
        ({"workers": 0}, [], "workers", "an integer from 1 to 8"),
        ({"workers": MAX_WORKERS + 1}, [], "workers", "an integer from 1 to 8"),
        ({"workers": 4, "data_size": 3, "batch_size": 3}, [], "workers", "an integer from 1 to 3"),
        ({"devices": "cuda:0,1"}, [], "devices", "this machine has 0 CUDA GPUs"),
        ({"devices": "cuda:0,1", "workers": 3}, TWO_GPUS, "workers", "2: one process per GPU"),
    ],
)
def test_bad_worker_counts_are_config_errors(changes, gpus, field, allowed):
    with pytest.raises(ConfigError) as info:
        validate(replace(SMALL, **changes), gpus=gpus)
    assert info.value.field == field and allowed in str(info.value)


def test_cuda_with_one_rank_per_gpu_is_valid():
    assert validate(replace(SMALL, devices="cuda:0,1", workers=2), gpus=TWO_GPUS).workers == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "0"], "fitcore: error: --workers: got 0; allowed: an integer from 1 to 8"),
        (["--workers", "9"], "fitcore: error: --workers: got 9; allowed: an integer from 1 to 8"),
        (["--workers", "5", "--data-size", "4", "--batch-size", "4"], "5; allowed: an integer from 1 to 4"),
        (["--devices", "cuda:0,1"], "fitcore: error: --devices: got 'cuda:0,1'; allowed: cpu, virtual:K"),
    ],
)  # fmt: skip
def test_cli_bad_workers_exit_2_with_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.setattr("fitcore.core.devices.cuda_gpus", lambda: [])  # a machine without GPUs
    assert cli.main(["--strategy", "ddp", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


def test_torchrun_environment_and_its_config():
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert torchrun_env(env) is None  # no master: not under torchrun
    env.update(MASTER_ADDR="10.0.0.1", MASTER_PORT="29500")
    tr = torchrun_env(env)
    assert tr == TorchrunEnv(1, 4, 1, 2, "10.0.0.1", 29500)
    assert config_for_torchrun(replace(SMALL, workers=2), tr).workers == 4  # the world size
    with pytest.raises(ConfigError, match="workers: got 3; allowed: 4 .torchrun's WORLD_SIZE."):
        config_for_torchrun(replace(SMALL, workers=3), tr, workers_given=True)
    with pytest.raises(ConfigError, match="at most the data size"):
        config_for_torchrun(replace(SMALL, data_size=3, batch_size=3), tr)


# ---------------------------------------------------------------------------------------------------------
# Spawned ranks.


@pytest.mark.slow  # spawns ranks
def test_two_ranks_match_one_process_and_each_other():
    cfg = validate(SMALL)
    events = []
    ended = launch(cfg, events.append)
    assert ended.status == "finished", ended.message
    kinds = [type(e).__name__ for e in events]
    steps = [e for e in events if isinstance(e, Step)]
    details = {e.key: e.value for e in events if isinstance(e, Detail)}
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunEnded"
    assert kinds.count("RunStarted") == 1 and kinds.count("RunEnded") == 1 and events[-1] is ended
    assert len(steps) == cfg.total_steps == 12 and [s.step for s in steps] == list(range(1, 13))
    assert [(s.epoch, s.batch) for s in steps[:4]] == [(1, 1), (1, 2), (1, 3), (2, 1)]
    started = events[0]
    assert isinstance(started, RunStarted) and started.total_steps == 12
    assert started.devices == ("rank 0 · cpu · gloo", "rank 1 · cpu · gloo")

    # each step: two ranks of 2 rows each, side by side in the global step's 4 rows
    for s in steps:
        assert [(r.device, r.start, r.stop) for r in s.replicas] == [
            ("rank 0 · cpu · gloo", 0, 2),
            ("rank 1 · cpu · gloo", 2, 4),
        ]
        assert [r.input_shape for r in s.replicas] == [(2, 2), (2, 2)]
        assert [r.output_shape for r in s.replicas] == [(2, 1), (2, 1)]
        assert s.input_shape == (4, 2) and s.output_shape == (4, 1)
        # each rank's own loss on its rows; the step's loss is their mean
        assert sum(r.loss for r in s.replicas) / 2 == pytest.approx(s.loss, rel=1e-12)
    assert any(s.replicas[0].loss != s.replicas[1].loss for s in steps)  # their own, not a copy of the mean

    # the same losses and parameters as one process on the same rows
    losses, weights, bias = reference(cfg)
    assert [s.loss for s in steps] == pytest.approx(losses, rel=1e-5, abs=1e-6)
    assert ended.weights == pytest.approx(weights, abs=1e-5) and ended.bias == pytest.approx(bias, abs=1e-5)
    assert steps[-1].weights == ended.weights

    # every rank ends with the very same parameters
    final = details["final"]
    assert final["identical"] and final["max_abs_diff"] == 0.0
    assert [r["weights"] for r in final["ranks"]] == [list(ended.weights)] * 2

    # the shards are the sampler's, for the first and the last epoch
    shards = details["shards"]
    assert (shards["rows_per_rank"], shards["padding"], shards["per_rank_batch"]) == (6, 1, 2)
    for key, epoch in (("first", 1), ("latest", cfg.epochs)):
        assert shards[key]["epoch"] == epoch
        expected = epoch_shards(11, 2, True, cfg.seed, epoch)
        assert [r["indices"] for r in shards[key]["ranks"]] == expected
        assert shards[key]["ranks"][1]["padded"] == [expected[0][0]]  # the order's first row, again
    assert details["group"]["backend"] == "gloo" and details["group"]["world_size"] == 2
    # what each rank measured it holds: the whole model (W 2 floats, b 1), its gradients (views into DDP's one
    # bucket, gradient_as_bucket_view: the bucket's 3 floats, once, not a second copy beside them), and
    # Adam's two moments of each plus a 4-byte step count per parameter (a generator read twice once gave 0 B)
    d, itemsize = cfg.n_features, 4
    whole = (d + 1) * itemsize
    assert details["memory"] == [
        {"rank": r, "parameters": whole, "gradients": whole, "optimizer_state": 2 * whole + 2 * 4}
        for r in range(2)
    ]
    # measured after step 1 already (the picture's chips from the first step on), and again at the end
    memory = [i for i, e in enumerate(events) if isinstance(e, Detail) and e.key == "memory"]
    assert len(memory) == 2 and events[memory[0] - 1] is steps[0]
    assert events[memory[0]].value == details["memory"]
    assert_all_gone(details)


@pytest.mark.slow  # spawns ranks
def test_pause_resume_and_stop_through_run(no_leftover_threads):
    cfg = validate(replace(SMALL, epochs=10_000))
    run = Run(cfg, pace=25).start()
    try:
        wait_for(lambda: run.snapshot().step >= 2, timeout=90, interval=0.02)
        # each rank a process of its own, forked from the warm server
        pids = run.snapshot().extra["group"]["pids"]
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert [stat_of(pid)[1] for pid in pids] == [warmstart.server_pid()] * 2
        watch = PauseWatch(run.control)
        run.pause()
        # the step already allowed may still finish: once the granter polls the pause, it has been reported
        assert watch.held(1), "the paused run did not poll its pause"
        paused = run.snapshot()
        assert watch.held(2)  # two more polls (0.1 s) without a step
        assert run.snapshot().step == paused.step and paused.status == "paused"
        run.resume()
        wait_for(lambda: run.snapshot().step > paused.step + 2, timeout=30, interval=0.02)
    finally:
        run.stop()
        assert run.wait(30)
    snap = run.snapshot()
    assert snap.status == "stopped" and str(snap.message) == "stopped by the user"
    assert snap.total_steps == 30_000 and snap.devices == ("rank 0 · cpu · gloo", "rank 1 · cpu · gloo")
    table = shard_table(snap, "first")
    assert [(t["rank"], t["rows"]) for t in table] == [(0, 6), (1, 6)]
    assert snap.extra["final"]["identical"]
    assert snap.weights == tuple(snap.extra["final"]["ranks"][0]["weights"])
    assert_all_gone(snap.extra)


@pytest.mark.slow  # spawns ranks
def test_a_killed_rank_fails_the_run_without_hanging(no_leftover_threads):
    run = Run(validate(replace(SMALL, epochs=10_000)), pace=25).start()
    try:
        wait_for(lambda: run.snapshot().step >= 1, timeout=90, interval=0.02)
        victim = run.snapshot().extra["group"]["pids"][1]
        os.kill(victim, signal.SIGKILL)
        assert run.wait(30), "the run did not notice its dead rank"
    finally:
        run.stop()
        run.wait(30)
    snap = run.snapshot()
    assert snap.status == "failed"
    assert str(snap.message).startswith(f"rank 1 (pid {victim}) ended with signal SIGKILL")
    assert_all_gone(snap.extra)


KILLED_CALLER = """
import json, time
from fitcore.engine import warmstart
from fitcore.core.config import FitConfig, validate
from fitcore.runs.runner import Run

run = Run(validate(FitConfig(strategy="ddp", devices="cpu", workers=2, epochs=10_000)), pace=25).start()
while run.snapshot().step < 1:
    time.sleep(0.02)
ranks = run.snapshot().extra["group"]["pids"]
print(json.dumps({"server": warmstart.server_pid(), "ranks": ranks}), flush=True)
time.sleep(120)
"""


@pytest.mark.slow  # a process of its own, which starts its own forkserver
def test_a_killed_caller_leaves_neither_its_forkserver_nor_a_rank():
    caller = subprocess.Popen(
        [sys.executable, "-c", KILLED_CALLER], cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        line = caller.stdout.readline()
        assert line, "the caller ended before its first step"
        pids = json.loads(line)
        assert [stat_of(pid)[1] for pid in pids["ranks"]] == [pids["server"]] * 2
    finally:
        caller.kill()  # SIGKILL: no handler of the caller runs
        caller.wait(10)
        caller.stdout.close()
    # gone, or a zombie left for init to reap: not running
    wait_for(lambda: all((stat_of(p) or ("Z",))[0] == "Z" for p in [pids["server"], *pids["ranks"]]), 20)


@pytest.mark.slow  # spawns ranks
def test_divergence_ends_every_rank_as_diverged():
    cfg = validate(replace(SMALL, optimizer="sgd", lr=1000.0, epochs=50))
    events = []
    ended = launch(cfg, events.append)
    assert ended.status == "diverged" and "learning rate 1000 is too high" in str(ended.message)
    steps = [e for e in events if isinstance(e, Step)]
    assert 0 < ended.steps == len(steps) < cfg.total_steps and f"step {ended.steps + 1}" in str(ended.message)
    assert all(math.isfinite(s.loss) for s in steps)
    details = {e.key: e.value for e in events if isinstance(e, Detail)}
    assert details["final"]["identical"]
    assert_all_gone(details)


# ---------------------------------------------------------------------------------------------------------
# The command line, spawned and under torchrun.


def _env() -> dict:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.mark.slow  # spawns ranks
def test_cli_prints_each_ranks_lines_and_parameters():
    # the tutorial's defaults: 200 rows, batch 200, so 100 rows per rank
    cmd = [sys.executable, "-m", "fitcore", "--strategy", "ddp", "--workers", "2", "--print-every", "100"]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for rank in (0, 1):
        line = (
            f"\t[rank {rank} · cpu · gloo] In Model: "
            "input size torch.Size([100, 2]) output size torch.Size([100, 1])"
        )
        assert out.count(line + "\n") == 3  # steps 1 and 101, and the last one, 200
    assert "Parameters per rank after the last step: identical on every rank" in out
    learned = next(line for line in out.splitlines() if line.startswith("Learned:"))
    assert [float(x) for x in re.findall(r"-?\d+\.\d+", learned)] == pytest.approx([5.2, 9.6, 3.4], abs=1e-2)


@pytest.mark.slow  # spawns ranks
def test_torchrun_single_machine_matches_one_process():
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "fitcore", "--strategy", "ddp", "--devices", "cpu", "--json",
        "--weights", "1.5", "-2.0", "--bias", "0.5", "--noise", "0.1", "--data-size", "11",
        "--batch-size", "4", "--epochs", "4", "--lr", "0.05",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1  # rank 0 alone prints
    result = json.loads(lines[0])
    assert result["status"] == "finished" and result["steps"] == 12
    assert result["config"]["workers"] == 2
    _, weights, bias = reference(validate(SMALL))
    assert result["weights"] == pytest.approx(weights, abs=1e-5) and result["bias"] == pytest.approx(
        bias, abs=1e-5
    )
    final = result["details"]["final"]
    assert final["identical"] and len(final["ranks"]) == 2
    shards = result["details"]["shards"]
    assert [r["indices"] for r in shards["first"]["ranks"]] == epoch_shards(11, 2, True, 0, 1)
    assert result["details"]["group"]["launcher"] == "launched by torchrun"
    assert result["first_step"]["replicas"][1]["batch_rows"] == {
        "first_position": 2,
        "last_position": 3,
        "rows": 2,
    }


def test_reference_is_least_squares_at_convergence():
    """The reference itself is trustworthy: run long enough, it reaches torch.linalg.lstsq."""
    cfg = replace(SMALL, data_size=12, batch_size=12, epochs=500, lr=0.05)  # no padding, full batches
    _, weights, bias = reference(cfg)
    lw, lb = least_squares(*make_data(cfg))
    assert weights == pytest.approx(lw, abs=1e-3) and bias == pytest.approx(lb, abs=1e-3)


@pytest.mark.slow  # spawns ranks
def test_a_rank_that_raises_fails_the_run_with_its_message():
    """A plan naming a GPU this machine lacks: the rank raises, and its message ends the run."""
    from fitcore.core.devices import DevicePlan

    plan = DevicePlan("cuda", "cuda:7", ("cuda:7",), (7,))
    cfg = validate(replace(SMALL, workers=1))
    events = []
    ended = launch(cfg, events.append, plan=plan)
    assert isinstance(events[-1], RunEnded) and ended.status == "failed"
    assert str(ended.message).startswith("rank 0 failed: ") and ended.steps == 0
    assert multiprocessing.active_children() == []


def test_a_paused_steps_tables_show_that_steps_epoch_not_epoch_1():
    """DDP, 3 ranks, paused at step 20 (epoch 20): the run has reported epoch 1's shards only, yet the
    panel's rows are epoch 20's, DistributedSampler's own, and its title names epoch 20."""
    from fitcore.strategies.ddp import view as ddp_view
    from tests.view_helpers import snapshot

    cfg = validate(FitConfig(strategy="ddp", workers=3, devices="cpu", data_size=200, batch_size=200))
    labels = tuple(f"rank {r} · cpu · gloo" for r in range(3))
    layout = Layout(200, 3, 200)
    first = epoch_value(layout, labels, 1, epoch_shards(200, 3, True, 0, 1))
    extra = {"shards": shards_value(cfg, layout, labels, first, first)}
    paused = Step(20, 20, 1, 0.5, (201, 2), (201, 1), (), (1.0, 2.0), 3.0, 1.0)
    snap = snapshot(config=cfg, latest=paused, devices=labels, extra=extra, status="paused")
    shards, ranks, _ = ddp_view.sections(snap, cfg, plan_of(cfg))
    (rows, _) = ranks.tables
    twentieth = epoch_shards(200, 3, True, 0, 20)
    assert [r["Dataset rows"] for r in rows] == [67, 67, 67]
    assert [r["Rows, in the rank's order"].split(",")[0] for r in rows] == [str(s[0]) for s in twentieth]
    assert twentieth[0][:3] != epoch_shards(200, 3, True, 0, 1)[0][:3]  # epoch 1's rows would differ
    assert shards.heading.startswith("Each rank's shard of the dataset. Epoch 20: DistributedSampler")
