"""The fsdp engine on gloo ranks: its shards, collectives, memory and events, against one process and DDP.

The unit tests check the layout, bytes and memory formulas and the model's arithmetic without a process
group; the slow ones spawn ranks three times (ZeRO-3 on 2 ranks, ZeRO-2 on 3, and DDP on the same config as
the first) and check everything on those runs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from fitcore.core.config import FitConfig
from fitcore.core.data import least_squares, make_data
from fitcore.core.events import Detail, RunEnded, RunStarted, Step
from fitcore.core.memory import held, held_bytes
from fitcore.core.parallel import LinearModel, init_parameters
from fitcore.core.train import make_optimizer
from fitcore.engine.launcher import launch
from fitcore.strategies.dataparallel.memory import dataparallel_memory
from fitcore.strategies.ddp.memory import ddp_memory
from fitcore.strategies.ddp.phases import allreduce_bytes  # FSDP's ring counts as DDP's
from fitcore.strategies.fsdp.layout import (
    ALL_GATHER,
    REDUCE_SCATTER,
    all_gather_bytes,
    fsdp_specs,
    fsdp_step_bytes,
    planned_memory,
    reduce_scatter_bytes,
    shard_numel,
    shard_rows,
)
from fitcore.strategies.fsdp.rank import ColumnLinear
from tests.test_ddp import reference

# 3 features, 16 rows: 8 rows a rank on 2 ranks, 2 a step, 4 steps an epoch; no padding: even shards
CFG = FitConfig(
    weights=(5.2, 9.6, -1.0), bias=3.4, data_size=16, batch_size=4, epochs=60, lr=0.5, devices="cpu",
    strategy="ddp", workers=2,
)  # fmt: skip
ITEM = 4  # float32


@pytest.mark.parametrize("n,k", [(3, 2), (3, 3), (1, 2), (5, 4), (16, 3), (2, 8)])
def test_shard_rows_are_torch_chunk_padded_with_empty_shards(n, k):
    chunks = [c.shape[0] for c in torch.arange(n).chunk(k)]
    chunks += [0] * (k - len(chunks))
    assert [stop - start for start, stop in shard_rows(n, k)] == chunks
    assert shard_rows(n, k)[0][0] == 0 and shard_rows(n, k)[-1][1] == n


def test_bytes_formulas():
    # 3 features on 2 ranks: W padded to 2 rows, b to 1: each rank all-gathers 3 numbers, 12 bytes
    assert shard_numel(3, 2) == 3 and shard_numel(3, 3) == 2 and shard_numel(16, 8) == 3
    assert all_gather_bytes(2, 12) == 12 and reduce_scatter_bytes(3, 8) == 16
    # ZeRO-3: two all-gathers and a reduce-scatter per rank; ZeRO-2: one all-gather
    assert fsdp_step_bytes(2, 3, ITEM, True) == 2 * (2 * 12 + 12)
    assert fsdp_step_bytes(3, 3, ITEM, False) == 3 * (2 * 8 + 2 * 8)
    # ZeRO-2's traffic is DDP's all-reduce of the k * shard_numel padded numbers (d + 1 in DDP)
    for k, d in [(2, 3), (4, 7), (3, 2), (1, 5)]:
        padded = k * shard_numel(d, k)
        assert fsdp_step_bytes(k, d, ITEM, False) == k * allreduce_bytes(k, padded - 1, ITEM)


def test_specs_have_a_backward_all_gather_under_zero3_only():
    zero3 = fsdp_specs("r0", (12, 12, 12))
    zero2 = fsdp_specs("r0", (12, 12))
    assert [s.name for s in zero3].count(ALL_GATHER) == 2 and [s.name for s in zero2].count(ALL_GATHER) == 1
    assert [s.name for s in zero2] == [
        "load",
        ALL_GATHER,
        "forward",
        "loss",
        "backward",
        REDUCE_SCATTER,
        "optimizer",
    ]
    assert sum(s.bytes for s in zero3) == 36


@pytest.mark.parametrize("d,n", [(1, 7), (3, 67), (16, 200)])
def test_column_model_is_nn_linear_bit_for_bit(d, n):
    """The (d, 1) layout changes no number: outputs and gradients equal LinearModel's exactly."""
    g = torch.Generator().manual_seed(d)
    x, y = torch.randn(n, d, generator=g), torch.randn(n, 1, generator=g)
    linear = LinearModel(d)
    init_parameters(linear, 5)
    column = ColumnLinear(linear)
    assert column.weight.shape == (d, 1) and torch.equal(column.weight.view(-1), linear.fc.weight.view(-1))
    out_l, out_c = linear(x), column(x)
    assert torch.equal(out_l, out_c)
    F.mse_loss(out_l, y).backward()
    F.mse_loss(out_c, y).backward()
    assert torch.equal(column.weight.grad.view(-1), linear.fc.weight.grad.view(-1))
    assert torch.equal(column.bias.grad, linear.fc.bias.grad)


def test_memory_of_ddp_and_dataparallel_from_their_tensors():
    linear = LinearModel(3)
    params = list(linear.parameters())
    optimizer = make_optimizer(replace(CFG, optimizer="adam"), params)
    F.mse_loss(linear(torch.ones(4, 3)), torch.zeros(4, 1)).backward()
    optimizer.step()
    # 4 numbers of parameters and of gradients; Adam: two moments of each and a 4-byte step per parameter
    one = {"parameters": 16, "gradients": 16, "optimizer_state": 2 * 16 + 2 * 4}
    assert held(params, optimizer) == one
    assert ddp_memory(params, optimizer, 3) == [{"rank": r, **one} for r in range(3)]
    dp = dataparallel_memory(params, optimizer, 2)
    assert dp[0] == {"rank": 0, **one} and dp[1] == {
        "rank": 1,
        "parameters": 16,
        "gradients": 16,
        "optimizer_state": 0,
    }
    flat = torch.zeros(6)
    assert held_bytes([flat[:2], flat[2:], None]) == 24  # views of one storage count once


# ---------------------------------------------------------------------------------------------------------
# Real runs: fully_shard on gloo ranks.


def _run(train, cfg, **kwargs):
    events = []
    ended = train(cfg, events.append, **kwargs)
    return events, ended


RUNS = {  # every run is the engine's launcher with its strategy's Engine (its record's `ranks`)
    "zero3": (launch, replace(CFG, strategy="fsdp", reshard_after_forward=True), {}),
    "zero2": (
        launch,
        replace(CFG, strategy="fsdp", workers=3, data_size=18, batch_size=6, reshard_after_forward=False),
        {},
    ),
    "ddp": (launch, CFG, {}),
}


@pytest.fixture(scope="module")
def runs():
    """Each run's (events, RunEnded), made once, when a test first asks: spawning ranks costs seconds."""
    done = {}

    def get(name):
        if name not in done:
            train, cfg, kwargs = RUNS[name]
            done[name] = _run(train, cfg, **kwargs)
        return done[name]

    return get


def _detail(events, key):
    """The run's last Detail(key): FSDP's after step 1 has the layout and memory, its last the shards too."""
    return [e.value for e in events if isinstance(e, Detail) and e.key == key][-1]


@pytest.mark.slow
@pytest.mark.parametrize("name,k,gathers", [("zero3", 2, 2), ("zero2", 3, 1)])
def test_fsdp_run_shards_memory_events(runs, name, k, gathers):
    events, ended = runs(name)
    cfg = events[0].config
    d = cfg.n_features
    assert (
        isinstance(events[0], RunStarted) and isinstance(events[-1], RunEnded) and ended.status == "finished"
    )
    steps = [e for e in events if isinstance(e, Step)]
    assert (
        len(steps) == ended.steps == cfg.epochs * math.ceil(cfg.data_size / k / math.ceil(cfg.batch_size / k))
    )
    # every rank holds its rows of W (torch.chunk's), b on rank 0 only; all ranks hold padded shards
    fsdp = _detail(events, "fsdp")
    s = shard_numel(d, k)
    for r, row in enumerate(fsdp["ranks"]):
        start, stop = shard_rows(d, k)[r]
        assert row["weight_rows"] == [start, stop] and len(row["shard"]["weights"]) == stop - start
        assert len(row["shard"]["bias"]) == (1 if r == 0 else 0)
        ops = [(c["op"], c["input_bytes"], c["output_bytes"]) for c in row["collectives"]]
        assert ops == [("all_gather", s * ITEM, k * s * ITEM)] * gathers + [
            ("reduce_scatter", k * s * ITEM, s * ITEM)
        ]
    # the shards joined are the gathered parameters, identical on every rank
    joined = [w for row in fsdp["ranks"] for w in row["shard"]["weights"]]
    final = _detail(events, "final")
    assert final["identical"] and all(tuple(r["weights"]) == tuple(joined) for r in final["ranks"])
    assert (
        tuple(joined) == ended.weights
        and final["ranks"][0]["bias"] == ended.bias == fsdp["ranks"][0]["shard"]["bias"][0]
    )
    # memory, measured: padded shards of parameters and of gradients; Adam's two moments of the real shard
    # and one 4-byte step per parameter
    for r, mem in enumerate(fsdp["per_rank_memory"]):
        real = shard_rows(d, k)[r][1] - shard_rows(d, k)[r][0] + (1 if r == 0 else 0)
        assert mem == {
            "rank": r,
            "parameters": s * ITEM,
            "gradients": s * ITEM,
            "optimizer_state": 2 * real * ITEM + 2 * 4,
        } == planned_memory(cfg, r, k)  # the page's planned bytes before a run are these
    # the same memory reported after step 1 (for the page, while the run trains) and as Detail('memory')
    early = [e.value for e in events if isinstance(e, Detail) and e.key == "fsdp"]
    assert len(early) == 2 and early[0]["per_rank_memory"] == fsdp["per_rank_memory"] == _detail(
        events, "memory"
    )
    assert "shard" not in early[0]["ranks"][0]  # the shards' values come at the end
    # phases: exact counts, and each collective's bytes as the ring formula says
    for step in steps:
        phases = step.phases.phases()
        assert len(phases) == k * (7 + (gathers - 1))
        assert sum(p.name == ALL_GATHER for p in phases) == k * gathers
        assert sum(p.name == REDUCE_SCATTER for p in phases) == k
        assert all(p.bytes == (k - 1) * s * ITEM for p in phases if p.name in (ALL_GATHER, REDUCE_SCATTER))
        assert step.phases.bytes == fsdp_step_bytes(k, d, ITEM, gathers == 2)
        assert all(p.duration >= 0 for p in phases)
    # against one process on the same rows, and against least squares
    losses, w_ref, b_ref = reference(cfg)
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip([st.loss for st in steps], losses))
    assert max(abs(a - b) for a, b in zip(ended.weights + (ended.bias,), w_ref + (b_ref,))) < 1e-5
    X, y = make_data(cfg)
    w_ls, b_ls = least_squares(X, y)
    assert max(abs(a - b) for a, b in zip(ended.weights + (ended.bias,), w_ls + (b_ls,))) < 1e-3


@pytest.mark.slow
def test_fsdp_matches_ddp_on_even_shards(runs):
    """What compare's fsdp column relies on: the real fully_shard run gives DDP's model, step by step."""
    (f_events, _), (d_events, _) = runs("zero3"), runs("ddp")
    f_steps = [e for e in f_events if isinstance(e, Step)]
    d_steps = [e for e in d_events if isinstance(e, Step)]
    assert len(f_steps) == len(d_steps) > 0
    for a, b in zip(f_steps, d_steps):
        assert abs(a.loss - b.loss) <= 1e-5 * max(1.0, abs(b.loss))  # float32 losses of up to ~100
        assert max(abs(x - y) for x, y in zip(a.weights + (a.bias,), b.weights + (b.bias,))) < 1e-5
        assert [r.ids for r in a.replicas] == [r.ids for r in b.replicas]  # the same rows on every rank


@pytest.mark.slow
def test_fsdp_diverged_run_ends_on_its_shards():
    """ZeRO-2 holds the gathered parameters when the shared loss says stop: the ranks reshard and report."""
    cfg = replace(CFG, lr=1e30, optimizer="sgd", epochs=3)
    events, ended = _run(launch, replace(cfg, strategy="fsdp", reshard_after_forward=False))
    assert ended.status == "diverged" and ended.steps < 3 * 4
    assert len(_detail(events, "final")["ranks"]) == 2 and len(ended.weights) == 3
    assert len(_detail(events, "fsdp")["per_rank_memory"]) == 2
