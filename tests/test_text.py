"""Counts in what people read: one noun for one, its plural otherwise, in the console and on the page."""

from __future__ import annotations

import pytest

from fitcore.core.events import Replica, RunEnded, Step
from fitcore.core.text import plural, rate
from fitcore.runs import console


@pytest.mark.parametrize(
    "n, word, many, text",
    [
        (1, "step", None, "1 step"),
        (0, "step", None, "0 steps"),
        (2, "device", None, "2 devices"),
        (1, "process", "processes", "1 process"),
        (3, "process", "processes", "3 processes"),
        (1, "batch", "batches", "1 batch"),
        (200, "batch", "batches", "200 batches"),
    ],
)
def test_plural(n, word, many, text):
    assert plural(n, word, many) == text


@pytest.mark.parametrize(
    "per_second, text",
    [(1.0, "1 step/s"), (1.4, "1 step/s"), (0.6, "1 step/s"), (1.5, "2 steps/s"), (0.2, "0 steps/s")],
)
def test_rate_matches_its_noun_to_the_number_shown(per_second, text):
    assert rate(per_second) == text


def _step(ranks: int) -> Step:
    replicas = tuple(Replica(f"rank {r} · cpu · gloo", r, r + 1, (1, 2), (1, 1)) for r in range(ranks))
    return Step(1, 1, 1, 0.5, (ranks, 2), (ranks, 1), replicas, (1.0, 2.0), 3.0, 0.1)


def test_ddp_console_lines_of_one_rank_say_1_rank_1_row_1_step():
    group = {
        "world_size": 1, "backend": "gloo", "master_addr": "127.0.0.1", "master_port": 29500,
        "launcher": "spawned with torch.multiprocessing", "per_rank_batch": 1, "rows_per_rank": 1,
        "steps_per_epoch": 1, "global_batch": 1,
    }  # fmt: skip
    assert console.group_line(group) == (
        "Process group: 1 rank, backend gloo, 127.0.0.1:29500 (spawned with torch.multiprocessing); "
        "each rank takes 1 of its 1 row per step, 1 step per epoch, global batch 1"
    )
    assert console.global_line(_step(1)) == (
        "All ranks: input size torch.Size([1, 2]) over 1 rank, no gather; mean loss: 0.5, "
        "gradients all-reduced  (epoch 1, step 1)"
    )
    assert console.global_line(_step(2)).startswith("All ranks: input size torch.Size([2, 2]) over 2 ranks, ")
    shards = {
        "shuffle": False, "data_size": 1, "rows_per_rank": 1, "padding": 0,
        "first": {"epoch": 1, "set_epoch": 0, "repeated": [], "ranks": [
            {"device": "rank 0 · cpu · gloo", "indices": [0], "padded": []},
        ]},
    }  # fmt: skip
    assert console.shard_lines(shards) == [
        "Epoch 1 shards (DistributedSampler, set_epoch(0), shuffle=False): 1 row, 1 per rank",
        "\t[rank 0 · cpu · gloo] rows [0]",
    ]


def test_summary_line_at_one_step_a_second():
    ended = RunEnded("finished", "finished 3 steps in 3.00 s (5.0 s of it paused)", 3, (1.0,), 2.0, 0.25, 8.0)
    lines = console.summary_lines(ended, (1.0,), 2.0, None, None, 1.0)
    assert lines[-1] == (
        "Status: finished (finished 3 steps in 3.00 s (5.0 s of it paused)); final loss 0.25; 1 step/s"
    )
