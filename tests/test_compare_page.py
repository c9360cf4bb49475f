"""The page's equivalence lab and what-if table, driven through Streamlit's AppTest."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from fitcore.protocols import registry
from fitcore.runs.pool import close_server_pool

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture
def at(monkeypatch):
    """The page of the tutorial, opened once; afterwards its pool is shut down and forgotten."""
    for name in list(os.environ):
        if name.startswith("FITCORE_"):
            monkeypatch.delenv(name)
    close_server_pool()
    st.cache_resource.clear()
    page = AppTest.from_file(APP, default_timeout=60)
    page.run()
    assert not page.exception
    yield page
    try:
        page.session_state["pool"].shutdown()
    except KeyError:
        pass
    close_server_pool()
    st.cache_resource.clear()


def table(page: AppTest, column: str):
    (found,) = [d.value for d in page.dataframe if column in d.value.columns]
    return found


def test_compare_shows_dataparallel_equal_and_a_summed_sgd_loss_apart(at):
    assert "Does DDP give the same model?" in [t.label for t in at.tabs]
    assert any("without DistributedSampler's padding duplicates" in c.value for c in at.caption)
    at.button(key="cmp_run").click().run()
    assert not at.exception
    rows = table(at, "max |diff|")
    k = len(registry.NAMES)
    assert list(rows["strategy"]) == list(registry.NAMES) and list(rows["devices"]) == [2] * k
    assert all(float(v) <= 1e-5 for v in rows["max |diff|"])  # the tutorial: all match one device
    assert list(rows["first step > 1e-5"]) == ["-"] * k
    assert "simulated" in rows["engine"][1]

    at.selectbox(key="cmp_reduction").select("sum")
    at.checkbox(key="cmp_no_set_epoch").check()
    at.button(key="cmp_run").click().run()
    assert not at.exception
    causes = [m.value for m in at.markdown if m.value.startswith("- **")]
    assert any("set_epoch" in c for c in causes)
    rows = table(at, "max |diff|")
    assert float(rows["max |diff|"][1]) < 1e-4  # Adam (the tutorial's) hides the sum's 1/K


def test_whatif_measures_then_projects_with_the_label(at):
    at.button(key="wi_run").click().run()
    assert not at.exception
    assert any(c.value == "projected, not measured" for c in at.caption)
    assert at.metric[0].label == "Measured here: compute per step"
    rows = table(at, "memory")
    from fitcore.lab import whatif

    assert len(rows) == 5 * len(whatif.STRATEGIES)  # every projection x 2, 8, 64, 256, 1024 devices
    zero3 = rows[(rows["strategy"] == "ZeRO-3 / FSDP") & (rows["devices"] == 8)]
    assert zero3["memory"].iloc[0] == "14 GB"  # 16 B x 7e9 / 8
    ddp = rows[(rows["strategy"] == "DDP (ring all-reduce)") & (rows["devices"] == 8)]
    assert ddp["note"].iloc[0] == "out of memory"  # 112 GB on an 80 GB device
    assert ddp["memory"].iloc[0] == "112 GB"
    # DataParallel's device 0 holds 12 B a parameter of Adam's state beyond the others, 84 GB at 7e9, and
    # the outputs it gathers (2 B of each of K x 100 rows: too few bytes to move the 3 digits)
    dp = rows[rows["strategy"] == rows["strategy"].iloc[0]]
    assert list(dp["note"][dp["devices"] <= 8]) == ["out of memory, device 0 +84 GB"] * 2
    # human units with 3 significant digits, a dash and its reason where a row has no figure, never None
    cells = [str(v) for column in rows.columns for v in rows[column]]
    assert "None" not in cells and "nan" not in cells
    assert all(re.fullmatch(r"-|[0-9.]+ (µs|ms|s|min|h|d)", v) for v in rows["step"])
    assert all(re.fullmatch(r"-|[0-9.]+ [kMGTPE]?B", v) for v in rows["sent"])
    dp64 = rows[(rows["strategy"] == rows["strategy"].iloc[0]) & (rows["devices"] == 64)]
    assert dp64["step"].iloc[0] == "-" and dp64["note"].iloc[0] == "one machine"
    # each tag the table shows is explained once below it, in the order of whatif.NOTE_TAGS
    legend = [c.value for c in at.caption if c.value.startswith("**")]
    assert [c.split("**")[1] for c in legend] == [
        "one machine",
        "out of memory",
        "comm. bound",
        "device 0 +…",
        "bubble",
    ]
    assert "about 8" in legend[0] and "more than its 80 GB" in legend[1]


def test_whatif_on_a_measured_link_says_what_its_repeats_spanned(at):
    from fitcore.core import links
    from fitcore.lab import whatif

    link = links.LINKS["measured-tbf100"]
    at.selectbox(key="wi_link").select("measured-tbf100").run()
    at.button(key="wi_run").click().run()
    assert not at.exception
    (spread,) = [c.value for c in at.caption if c.value.startswith("This link was measured")]
    lo, hi = link.latency_range
    assert spread.startswith(f"This link was measured {link.repeats} times: {whatif.seconds_text(lo)} – ")
    assert whatif.seconds_text(hi) in spread and lo < link.latency < hi  # the median inside its spread
    at.selectbox(key="wi_link").select("nvlink").run()  # a preset: one figure, no spread said
    assert not [c for c in at.caption if c.value.startswith("This link was measured")]


@pytest.mark.slow  # spawns FSDP's ranks
def test_whatif_under_fsdp_shows_its_measured_calibration(at):
    at.radio(key="strategy").set_value("fsdp").run()
    at.button(key="wi_run").click().run()
    assert not at.exception
    captions = [c.value for c in at.caption]
    assert "Calibration of ZeRO-3 / FSDP (measured, not projected):" in captions
    # the tutorial's 2 weights and b on its 2 ranks: shards of 1 + 1 numbers, 3 collectives of 1 shard each
    sent = "measured at K = 2 on this machine: fully_shard's collectives sent 24 B"
    assert any(c.startswith(sent) for c in captions)
