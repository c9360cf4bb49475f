"""One truth on the page: the status line, the charts' markers, the picture, the compare table and its causes
name the same steps, for every preset and for a replay of every shipped recording.

The charts draw their red line at the payload's `run.diverged_at` and nothing else (frontend/series.js
`divergenceStep`, tested by frontend/tests/series.test.js), so checking that value against the status line
and the picture checks every marker on the page.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from fitcore.core import i18n
from fitcore.core.config import ConfigError, validate
from fitcore.kit import live
from fitcore.lab import compare
from fitcore.runs.recording import read, replayer
from fitcore.runs.runner import Run
from fitcore.view.controls import PRESETS

EXAMPLES = sorted(Path(__file__).resolve().parents[1].glob("examples/*.fitrec"))
DDP_PRESETS = {p.key for p in PRESETS if p.config.strategy == "ddp"}


def ended(run: Run):
    run.start()
    assert run.wait(120)
    return run.snapshot()


def check_one_truth(snap) -> dict:
    """Every number the page shows about where the run is and where it diverged, cross-checked."""
    body = live.payload(snap)
    run, pic = body["run"], body["picture"]
    shown = int(re.search(r"step (\d+) / (\d+)", run["status_line"])[1])
    last_point = body["loss"][-1][0] if body["loss"] else 0
    assert shown == run["step"] == snap.step == last_point == (pic["step"] if pic else 0)
    became = re.search(r"the loss became \S+ at step (\d+)", run["status_line"])
    if run["status"] == "diverged":
        # the charts' line, the status line, the picture's note: one step, the one after the last drawn
        assert became and int(became[1]) == run["diverged_at"] == pic["step"] + 1
        with i18n.using("zh"):
            zh = live.payload(snap)["run"]["status_line"]
        assert f"损失在第 {run['diverged_at']} 步" in zh
    else:
        assert run["diverged_at"] is None and became is None
    return body


@pytest.mark.parametrize(
    "preset", [pytest.param(p, marks=pytest.mark.slow) if p.key in DDP_PRESETS else p for p in PRESETS],
    ids=lambda p: p.key,
)
def test_every_preset_says_one_step(preset, no_leftover_threads):
    body = check_one_truth(ended(Run(validate(preset.config))))
    if preset.key == "high_lr":
        assert body["run"]["status"] == "diverged" and body["run"]["diverged_at"] == 43
        # compare trains the same data the same way: its refusal names the very same step
        with pytest.raises(ConfigError) as refused:
            compare.run(validate(preset.config))
        assert f"diverged at step {body['run']['diverged_at']} " in str(refused.value)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_a_replay_of_every_recording_says_one_step(path, no_leftover_threads):
    rec = read(str(path))
    snap = ended(Run(rec.config, trainer=replayer(rec), source_label=rec.short_label, plan=rec.plan))
    body = check_one_truth(snap)
    assert body["run"]["strategy"] == rec.config.strategy  # the words follow the recording, not the sidebar
    assert snap.step == rec.ended.steps


@pytest.mark.parametrize("rows", [10, 11])
def test_the_compare_table_and_its_cause_name_the_same_first_step(rows):
    cfg = validate(replace(PRESETS[0].config, data_size=rows, batch_size=rows, epochs=5, devices="virtual:3"))
    ddp = compare.run(cfg)["results"][1]
    (padding,) = [c for c in ddp["causes"] if c.startswith("padding")]
    first = int(re.search(r"first exceeds 1e-05 at step (\d+)", padding)[1])
    repeat = int(re.search(r"first repeat is in step (\d+)", padding)[1])
    assert first == ddp["first_divergent_step"] >= repeat
    assert "(s)" not in padding and "--" not in padding  # words for a student, not a command line's
