"""DDP's steps carry what happened in them: every rank's phases, their bytes, and each rank's row ids.

One spawned run per world size (2 and 3 ranks) and one torchrun launch are shared by the slow tests; the
communication hook and the message arithmetic are checked without spawning.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from fitcore.core.config import FitConfig, validate
from fitcore.core.events import Replica, Step
from fitcore.core.phases import BACKWARD, LOAD
from fitcore.core.shards import Layout, epoch_shards
from fitcore.engine.launcher import launch
from fitcore.engine.rank import ranks_phases, table_ids
from fitcore.strategies.ddp.phases import (
    ALLREDUCE,
    ALLREDUCE_END,
    ALLREDUCE_START,
    DDP_PHASES,
    DDP_SLOTS,
    allreduce_bytes,
    load_bytes,
)
from fitcore.strategies.ddp.rank import _AllreduceTimes, _timed_allreduce, ranks_specs
from tests.test_ddp import reference

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = FitConfig(devices="cpu", strategy="ddp", epochs=3)  # 200 rows, batch 200
TOLERANCE = 1e-6  # seconds: float rounding of times taken apart from one start


def check_steps(cfg: FitConfig, steps: list[Step]) -> None:
    """Every step's phases, bytes and row ids against the rule of a DDP step of cfg."""
    k, d = cfg.workers, cfg.n_features
    layout = Layout.of(cfg)
    labels = [f"rank {r} · cpu · gloo" for r in range(k)]
    assert len(steps) == cfg.total_steps and [s.step for s in steps] == list(range(1, cfg.total_steps + 1))
    for s in steps:
        assert s.phases is not None, f"step {s.step} has no phases"
        phases = s.phases.phases()
        assert [r.device for r in s.replicas] == labels
        assert {p.device for p in phases} == set(labels)  # the page matches phases to replicas by label
        for label in labels:
            mine = [p for p in phases if p.device == label]
            by_start = sorted(mine, key=lambda p: p.start)  # stable: a tie keeps the step's order
            assert [p.name for p in by_start] == list(DDP_PHASES), (s.step, label, by_start)
            named = {p.name: p for p in mine}
            assert named[LOAD].start == 0.0  # each rank's phases count from its own start
            assert all(p.duration >= 0 for p in mine), mine
            backward, allreduce = named[BACKWARD], named[ALLREDUCE]
            # DDP all-reduces while backward runs, not after it
            assert allreduce.start >= backward.start
            assert allreduce.start + allreduce.duration <= backward.start + backward.duration + TOLERANCE
            assert named[LOAD].bytes == load_bytes() == 0
            assert allreduce.bytes == allreduce_bytes(k, d, 4)
            assert sum(p.bytes for p in mine) == allreduce_bytes(k, d, 4)
        assert s.phases.bytes == k * allreduce_bytes(k, d, 4)

        # each rank's ids: the first rows of its slice of this epoch's shard
        shards = epoch_shards(cfg.data_size, k, cfg.shuffle, cfg.seed, s.epoch)
        first = (s.batch - 1) * layout.per_rank_batch
        for rank, replica in enumerate(s.replicas):
            assert replica.ids == tuple(shards[rank][first : first + min(layout.local_rows(s.batch), 8)])


def check_learned(cfg: FitConfig, steps: list[Step], weights, bias) -> None:
    """The same losses and parameters as one process on the rows the ranks took together."""
    losses, ref_weights, ref_bias = reference(cfg)
    assert [s.loss for s in steps] == pytest.approx(losses, rel=1e-5, abs=1e-6)
    assert list(weights) == pytest.approx(ref_weights, abs=1e-5) and bias == pytest.approx(ref_bias, abs=1e-5)


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def spawned(request):
    cfg = validate(replace(TUTORIAL, workers=request.param))
    events = []
    ended = launch(cfg, events.append)
    assert ended.status == "finished", ended.message
    return cfg, [e for e in events if isinstance(e, Step)], ended


@pytest.mark.slow  # spawns ranks
def test_spawned_steps_carry_every_ranks_phases_and_ids(spawned):
    cfg, steps, ended = spawned
    check_steps(cfg, steps)
    # 3 ranks: 67 rows each, 201 together; the last rank's shard repeats the epoch's first row
    assert steps[0].input_shape == (Layout.of(cfg).per_rank_batch * cfg.workers, 2)
    check_learned(cfg, steps, ended.weights, ended.bias)


@pytest.mark.slow  # spawns ranks under torchrun
def test_torchrun_steps_carry_every_ranks_phases_and_ids(tmp_path):
    """Rank 0 holds each Step back until the next step's table brings every rank's times of it."""
    script = tmp_path / "run.py"
    script.write_text(
        "import json, sys\n"
        "from fitcore.core.config import FitConfig, validate\n"
        "import fitcore\n"
        "from fitcore.protocols import registry\n"
        "from fitcore.engine.torchrun import exit_rank\n"
        "from fitcore.core.events import Step\n"
        "cfg = validate(FitConfig(devices='cpu', strategy='ddp', epochs=3, workers=2))\n"
        "steps = []\n"
        "keep = lambda e: steps.append(e) if isinstance(e, Step) else None\n"
        "ended = registry.of(cfg).torchrun(cfg, keep)\n"
        "if steps:\n"
        "    print(json.dumps({'status': str(ended.status), 'weights': list(ended.weights),\n"
        "        'bias': ended.bias, 'steps': [[s.step, s.epoch, s.batch, s.loss,\n"
        "        [[r.device, list(r.ids)] for r in s.replicas],\n"
        "        [list(p) for p in s.phases.phases()] if s.phases else None] for s in steps]}))\n"
        "exit_rank(0)\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(script),
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]  # rank 0 alone
    result = json.loads(line)
    assert result["status"] == "finished"
    cfg = validate(replace(TUTORIAL, workers=2))
    specs = ranks_specs([f"rank {r} · cpu · gloo" for r in range(2)], 2, 4)
    steps = []
    for step, epoch, batch, loss, replicas, phases in result["steps"]:
        assert phases is not None, f"step {step} has no phases"
        # rebuild the Step's phases from the printed ones: the checks read StepPhases
        times = [0.0] * (2 * DDP_SLOTS)
        for spec, (name, device, start, duration, _) in zip(specs, phases):
            assert (spec.name, spec.device) == (name, device)
            times[spec.start], times[spec.stop] = start, start + duration
        reps = tuple(
            Replica(device, 0, 0, (), (), None, tuple(ids)) for device, ids in replicas
        )  # as checked
        steps.append(Step(step, epoch, batch, loss, (), (), reps, (), 0.0, 0.0, ranks_phases(specs, [times])))
        assert [list(p[:2]) + [p[4]] for p in phases] == [
            [p.name, p.device, p.bytes] for p in steps[-1].phases.phases()
        ]
    check_steps(cfg, steps)
    check_learned(cfg, steps, result["weights"], result["bias"])


# ---------------------------------------------------------------------------------------------------------
# Without spawning: the hook, the specs of K ranks, the ids in the gathered table.


def _hook_marks(store: str, out) -> None:
    """One rank of gloo in a process of its own, a tiny bucket cap giving the model several buckets: the marks
    of each step's all-reduces, and whether the gradients are one device's. It leaves without tearing gloo
    down, as fitcore's ranks do (fitcore.engine.torchrun.exit_rank): destroying a group whose comm hook
    returned Python futures can deadlock (its loop thread waits for the GIL its destructor holds)."""
    dist.init_process_group("gloo", store=dist.FileStore(store, 1), rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 300), torch.nn.Linear(300, 1))
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)
    marks = []
    times = _AllreduceTimes(marks.append)
    ddp.register_comm_hook(times, _timed_allreduce)
    reference = torch.nn.Sequential(torch.nn.Linear(2, 300), torch.nn.Linear(300, 1))
    reference.load_state_dict(model.state_dict())
    per_step = []
    for _ in range(3):
        x = torch.randn(4, 2)
        times.started = False
        ddp(x).sum().backward()
        reference(x).sum().backward()
        per_step.append(marks[:])
        marks.clear()
    same = all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), reference.parameters()))
    out.put((per_step, same))
    out.close()
    out.join_thread()
    os._exit(0)


def test_hook_marks_the_first_start_and_the_last_end_of_each_steps_all_reduce(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    rank = ctx.Process(target=_hook_marks, args=(str(tmp_path / "store"), out))
    rank.start()
    try:
        per_step, same = out.get(timeout=120)
    finally:
        rank.join(30)
        if rank.is_alive():
            rank.kill()
    # one start a step; DDP rebuilds its buckets after the first step, then each bucket ends once
    buckets = [len(step) - 1 for step in per_step]
    assert all(step[0] == ALLREDUCE_START and set(step[1:]) == {ALLREDUCE_END} for step in per_step)
    assert buckets[0] >= 1 and buckets[1] == buckets[2] > 1
    assert same  # torch's own all-reduce: one rank's average is its own gradient


def test_ranks_specs_offset_each_ranks_slots_and_keep_its_label():
    labels = ["rank 0 · cpu · gloo", "rank 1 · cpu · gloo", "rank 2 · cpu · gloo"]
    specs = ranks_specs(labels, 5, 4)
    assert len(specs) == 3 * len(DDP_PHASES)
    for r, label in enumerate(labels):
        mine = specs[r * len(DDP_PHASES) : (r + 1) * len(DDP_PHASES)]
        assert [s.name for s in mine] == list(DDP_PHASES) and {s.device for s in mine} == {label}
        assert all(
            r * DDP_SLOTS <= min(s.start, s.stop) and max(s.start, s.stop) < (r + 1) * DDP_SLOTS for s in mine
        )
    # 2(K-1)/K of the 6 gradients of 4 bytes, per rank: 32 bytes, three times
    assert sum(s.bytes for s in specs) == 3 * allreduce_bytes(3, 5, 4) == 3 * 32
    # slot order: START, LOSS_END, ..., ALLREDUCE_END, then a 2-D mesh's two (unused on a 1-D one)
    times = [[0.0, 3.0, 4.0, 4.5, 0.5, 2.0, 3.2, 3.8, 2.0, 2.0]] * 3
    phases = ranks_phases(specs, times).phases()
    assert [(p.name, p.start, p.duration) for p in phases[:6]] == [
        ("load", 0.0, 0.5), ("forward", 0.5, 1.5), ("loss", 2.0, 1.0), ("backward", 3.0, 1.0),
        ("allreduce", 3.2, pytest.approx(0.6)), ("optimizer", 4.0, 0.5),
    ]  # fmt: skip
    assert [p._replace(device="") for p in phases[6:12]] == [p._replace(device="") for p in phases[:6]]
    assert [p.device for p in phases[6:12]] == [labels[1]] * 6


def test_table_ids_drop_the_padding():
    assert table_ids([17.0, 3.0, 188.0, -1.0, -1.0]) == (17, 3, 188)
    assert table_ids([-1.0] * 8) == ()
