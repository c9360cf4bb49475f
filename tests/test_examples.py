"""The recordings shipped in examples/: each reads back, and each step's split is DataParallel's own rule.

Two of them were recorded on a real GPU (an NVIDIA H200, with `virtual:4@cuda:0` and `cuda:0`), so a machine
without one replays CUDA-event times: this checks that they are what the page will show, on any machine.
"""

from pathlib import Path

import pytest
import torch

from fitcore.core.events import Step
from fitcore.core.phases import step_bytes
from fitcore.runs.recording import read

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.fitrec"))


def test_the_examples_include_a_real_gpu_recording():
    gpus = {p.name: read(str(p)).header["machine"].get("gpus") for p in EXAMPLES}
    assert gpus["h200-virtual4-cuda.fitrec"] == ["NVIDIA H200"]
    assert gpus["h200-cuda0.fitrec"] == ["NVIDIA H200"]
    rec = read(str(EXAMPLES[0].parent / "h200-virtual4-cuda.fitrec"))
    assert rec.label == "recorded on 1 x NVIDIA H200 (CUDA 13.0, torch 2.11.0+cu130) on 2026-12-04"
    assert rec.short_label == "recorded on 1 x NVIDIA H200 on 2026-12-04"  # the page's status line


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_recorded_step_is_split_by_the_rule_and_ends_where_the_run_ended(path):
    rec = read(str(path))
    cfg, steps = rec.config, [e for e in rec.events if isinstance(e, Step)]
    assert len(steps) == cfg.total_steps == rec.ended.steps
    assert [s.step for s in steps] == list(range(1, len(steps) + 1))
    for s in steps:
        rows = s.input_shape[0]
        if cfg.strategy == "dataparallel":
            k = len(rec.started.devices)
            expected = [len(c) for c in torch.arange(rows).chunk(k)]
            assert [r.rows for r in s.replicas] == expected
            if s.phases is not None and k > 1:  # measured phases: no negative time, the formula's bytes
                assert all(p.duration >= 0 for p in s.phases.phases())
                assert s.phases.bytes == step_bytes(rows, k, cfg.n_features, 4)["dataparallel"]
        else:  # DDP: every rank takes ceil(B / K) of its shard
            assert sum(r.rows for r in s.replicas) == rows
    assert tuple(steps[-1].weights) == tuple(rec.ended.weights)
