"""fitcore.view.status: the status line and its colour, the controls' differences, the console panel."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fitcore.core.config import FitConfig
from fitcore.runs import console as ddp
from fitcore.view import controls, status
from fitcore.view.common import escape_markdown
from tests.view_helpers import ddp_snapshot, ddp_step, run_to_end, snapshot


def test_config_differences_name_each_changed_control():
    running = FitConfig()
    values = {**controls.config_values(running), "batch_size": 100, "weights": (5.2, 1.0)}
    assert status.config_differences(values, running) == [
        "True weights: [5.2, 9.6] in the run, [5.2, 1] in the controls",
        "Batch size: 200 in the run, 100 in the controls",
    ]
    assert status.config_differences(controls.config_values(running), running) == []


@pytest.mark.parametrize(
    "kw, line",
    [
        (
            dict(step=12, epoch=12, total_steps=200, steps_per_second=95.2),
            "Running · epoch 12 / 200 · step 12 / 200 · 95 steps/s",
        ),
        (dict(status="paused", step=3, epoch=3, total_steps=200), "Paused · epoch 3 / 200 · step 3 / 200"),
        (
            dict(step=12, epoch=12, total_steps=200, steps_per_second=1.2),
            "Running · epoch 12 / 200 · step 12 / 200 · 1 step/s",
        ),
        (
            dict(status="queued", queue_position=2, total_steps=200, message="waiting: 2 runs ahead"),
            "Queued · position 2 in the queue · step 0 / 200 · waiting: 2 runs ahead",
        ),
        (
            dict(
                status="finished", step=200, epoch=200, total_steps=200, steps_per_second=1000, message="done"
            ),
            "Finished · epoch 200 / 200 · step 200 / 200 · 1000 steps/s · done",
        ),
        (
            dict(status="diverged", step=42, epoch=43, total_steps=200, message="the loss became inf"),
            "Diverged · epoch 43 / 200 · step 42 / 200 · the loss became inf",
        ),
        (
            dict(status="failed", total_steps=200, message="RuntimeError: boom"),
            "Failed · step 0 / 200 · RuntimeError: boom",
        ),
    ],
)
def test_status_line(kw, line):
    text = status.status_line(snapshot(**kw))
    assert text == line
    n, total = map(int, re.search(r"step (\d+) / (\d+)", text).groups())
    assert (n, total) == (kw.get("step", 0), 200)


def test_a_csv_run_says_what_it_fits_in_the_status_line_and_the_legend_stays_short():
    # the file's target and features, beside the sidebar's choice: the line the class reads above the picture
    from fitcore.kit import live

    cfg = FitConfig(data="/srv/uploads/3f9/houses.csv", target="price", features=("area", "rooms", "age"))
    snap = snapshot(config=cfg, step=3, epoch=2, total_steps=200)
    assert status.status_line(snap) == (
        "Running · houses.csv: price from area, rooms, age · epoch 2 / 200 · step 3 / 200"
    )
    words = "houses.csv: price from area, rooms, age"
    assert live.run_title(snap, 1) == f"Run 1 · DataParallel · virtual:2 · {words}"
    assert live.legend_title(snap, 1) == "Run 1 · DataParallel · virtual:2"  # the loss legend's whole line
    replay = dataclasses.replace(snap, source_label="recorded on a CPU on 2026-12-04", config=FitConfig())
    assert live.legend_title(replay, 2) == "Run 2 · DataParallel · virtual:2"
    assert status.status_line(replay).startswith("Running · recorded on a CPU on 2026-12-04 · epoch 2")


def test_status_kind_and_markdown_escape():
    assert [status.status_kind(snapshot(status=s)) for s in ("running", "finished", "stopped", "failed")] == [
        "info",
        "success",
        "warning",
        "error",
    ]
    assert escape_markdown("a*b_[c](d) `e` <b>") == "a\\*b\\_\\[c\\](d) \\`e\\` \\<b\\>"


def test_console_text_is_the_tutorials_lines_for_the_latest_steps():
    snap = run_to_end(FitConfig(epochs=10, devices="virtual:2"))
    lines = status.console_text(snap, max_lines=10).splitlines()
    assert lines[0] == snap.header
    assert len(lines) == 1 + 3 * 3  # three steps of two In Model lines and one Outside line fit in 10
    assert lines[1] == (
        "\tIn Model: input size torch.Size([100, 2]) output size torch.Size([100, 1])"
        "  [virtual:0 (emulated on CPU)]"
    )
    assert lines[-1].startswith(
        "Outside: input size torch.Size([200, 2]) output_size torch.Size([200, 1]) loss:"
    )
    assert lines[-1].endswith("(epoch 10, step 10)")


def test_console_text_of_a_ddp_run_prints_each_rank():
    group = {
        "world_size": 2, "backend": "gloo", "master_addr": "127.0.0.1", "master_port": 29500,
        "launcher": "spawned with torch.multiprocessing", "per_rank_batch": 3, "rows_per_rank": 100,
        "steps_per_epoch": 34, "global_batch": 6,
    }  # fmt: skip
    finals = [("rank 0 · cpu · gloo", (5.2, 9.6), 3.4), ("rank 1 · cpu · gloo", (5.2, 9.6), 3.4)]
    steps = tuple(ddp_step([1.0, 3.0])._replace(step=s) for s in range(1, 6))
    snap = ddp_snapshot(finals, status="finished", header="DDP header", recent=steps)
    snap = dataclasses.replace(snap, extra={**snap.extra, "group": group})
    lines = status.console_text(snap, max_lines=12).splitlines()
    tail = ddp.final_lines(snap.extra["final"])
    assert lines[:2] == ["DDP header", ddp.group_line(group)]
    assert lines[-len(tail) :] == tail and len(tail) == 3
    body = lines[2 : -len(tail)]
    assert len(body) == 2 * 3  # 12 lines: header, group, final (3) leave room for two steps of 3 lines
    assert (
        body[0]
        == "\t[rank 0 · cpu · gloo] In Model: input size torch.Size([3, 2]) output size torch.Size([3, 1])"
    )
    assert body[2].startswith(
        "All ranks: input size torch.Size([6, 2]) over 2 ranks, no gather; mean loss: 2"
    )
    assert body[2].endswith("(epoch 4, step 4)") and body[5].endswith("(epoch 4, step 5)")
    # while the run is active the ranks have not reported their final parameters yet
    running = dataclasses.replace(snap, status="running")
    assert "Parameters per rank" not in status.console_text(running, max_lines=12)
