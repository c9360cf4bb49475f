"""The dashboard driven through Streamlit's AppTest: controls, errors, runs, presets and the link.

AppTest does not rerun `run_every` fragments on a timer, so each test calls `at.run()` again after waiting
for the run through the server's pool, which the page keeps in its session state.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest
from torch.utils.data import DistributedSampler

from fitcore.core.config import FitConfig
from fitcore.core.data import make_data
from fitcore.core.i18n import t
from fitcore.protocols import registry
from fitcore.runs.pool import RunNotFound, close_server_pool
from fitcore.view import controls
from fitcore.view.common import WORD_JOINER
from tests.helpers import wait_for

APP = str(Path(__file__).resolve().parents[1] / "app.py")
STEP = re.compile(r"step (\d+) / (\d+)")


@pytest.fixture
def page(monkeypatch, no_leftover_threads):
    """Open the page in fresh sessions; afterwards stop every run and drop the cached server-wide pool."""
    for name in list(os.environ):
        if name.startswith("FITCORE_"):
            monkeypatch.delenv(name)  # the page's limits are the classroom defaults
    close_server_pool()  # a pool built from these settings, not an earlier test's
    st.cache_resource.clear()
    opened: list[AppTest] = []

    def open_page(query: dict | None = None) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=30)
        at.query_params.update(query or {})
        opened.append(at)
        at.run()
        assert not at.exception
        return at

    yield open_page
    pools = {}
    for at in opened:
        try:
            pool = at.session_state["pool"]
        except KeyError:
            continue
        pools[id(pool)] = pool
    for pool in pools.values():
        pool.shutdown()
    close_server_pool()
    st.cache_resource.clear()


def shown(element) -> str:
    """The text an element's Markdown shows: its body with the escaping backslashes taken out."""
    return re.sub(r"\\(.)", r"\1", element.value)


def _pool(at: AppTest):
    return at.session_state["pool"], at.session_state["owner"]


def started(page, pace: str) -> AppTest:
    """A fresh page at `pace` whose Start was pressed: its run is submitted."""
    at = page()
    at.selectbox(key="pace").set_value(pace)
    at.run()
    at.button(key="start").click()
    return at.run()


def wait_for_run(at: AppTest, done, timeout: float = 30.0) -> AppTest:
    """Poll the run's snapshot through the pool until done(snapshot), then rerun the page."""
    pool, owner = _pool(at)
    run_id = at.session_state["run_id"]
    wait_for(lambda: done(pool.snapshot(owner, run_id)), timeout, interval=0.02, what="the run to get there")
    return at.run()


def wait_until_ended(at: AppTest) -> AppTest:
    return wait_for_run(at, lambda snap: not snap.active)


def live_view(at: AppTest) -> dict:
    """What the page gave its live view (the browser component) on its last run: fitcore.kit.live's payload
    and the settings the browser polls with."""
    found = [e for e in at.get("bidi_component") if e.proto.component_name == "fitcore_live"]
    assert len(found) == 1
    return json.loads(found[0].proto.json)


def status_text(at: AppTest) -> str:
    """The status line the live view shows."""
    line = live_view(at)["payload"]["run"]["status_line"]
    assert STEP.search(line), line
    return line


def table(at: AppTest, column: str):
    tables = [t.value for t in at.table if column in t.value.columns]
    assert len(tables) == 1
    return tables[0]


def control_values(at: AppTest) -> dict:
    """What the sidebar's widgets hold, in FitConfig's terms (workers is drawn for ddp only)."""
    n = at.number_input(key="n_features").value
    strategy = at.radio(key="strategy").value
    ddp = registry.strategy(strategy).processes  # ddp and fsdp: processes on the CPU
    return {
        "weights": tuple(at.number_input(key=f"weight_{i}").value for i in range(n)),
        "bias": at.number_input(key="bias").value,
        "noise": at.number_input(key="noise").value,
        "data_size": at.number_input(key="data_size").value,
        "batch_size": at.number_input(key="batch_size").value,
        "epochs": at.number_input(key="epochs").value,
        "lr": at.number_input(key="lr").value,
        "optimizer": at.selectbox(key="optimizer").value,
        "shuffle": at.checkbox(key="shuffle").value,
        "seed": at.number_input(key="seed").value,
        "devices": "cpu" if ddp else f"virtual:{at.slider(key='virtual_devices').value}",
        "strategy": strategy,
        "workers": at.number_input(key="workers").value if ddp else at.session_state["workers"],
        "mesh": at.text_input(key="mesh").value if ddp else at.session_state["mesh"],  # ranked strategies'
        # a strategy's own options (FSDP's switch, the pipeline's layers and schedule), drawn under it only;
        # elsewhere the config keeps their defaults
        **{option: option_widget(at, option) if option in registry.strategy(strategy).options
           else getattr(FitConfig, option) for option in registry.OPTIONS},
    }


def option_widget(at: AppTest, option: str):
    """A strategy's option's widget value: a switch, a number or a choice, by the default's type."""
    default = getattr(FitConfig, option)
    if isinstance(default, bool):
        return at.toggle(key=option).value
    if isinstance(default, str):
        return at.selectbox(key=option).value
    return at.number_input(key=option).value


def chart(at: AppTest, key: str) -> dict:
    """The plotly figure the page gives its figure component (frontend/figure.js) under this key."""
    figures = [e for e in at.get("bidi_component") if e.proto.component_name == "fitcore_figure"]
    found = [e for e in figures if e.proto.id.endswith(f"-{key}")]
    assert len(found) == 1, [e.proto.id for e in figures]
    return json.loads(found[0].proto.json)["figure"]


def cells(z) -> list[list[int]]:
    """The columns each row of a heatmap's z fills (None is a gap)."""
    return [[i for i, v in enumerate(row) if v is not None] for row in z]


def values_of(array) -> list:
    """A trace's x or y: plotly sends numpy arrays as base64 typed arrays, lists as they are."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


# ---------------------------------------------------------------------------------------------------------


def test_page_loads_idle_with_the_tutorial(page):
    at = page()
    assert at.header[0].value == "How DataParallel splits a batch"
    assert at.selectbox(key="preset").value == "The tutorial"
    assert control_values(at) == controls.config_values(FitConfig())
    assert status_text(at) == "Ready · step 0 / 200 · press Start training"
    planned_picture = live_view(at)["payload"]["picture"]
    assert [d["rows"] for d in planned_picture["devices"]] == [100, 100]
    # tests/test_phases.py: TP's all-reduce of the (200, 1) partial outputs on 2 ranks, 2 x 800 bytes; PP's
    # 200 rows of 2 activations down one link and their gradients back, 2 x 1600 bytes
    assert planned_picture["bytes"] == {"dataparallel": 1624, "ddp": 24, "fsdp": 48, "tp": 1600, "pp": 3200}
    assert not at.button(key="start").disabled
    assert at.button(key="stop").disabled and at.button(key="pause").disabled
    planned = table(at, "Batch rows")  # before any run: the split the first batch will get
    assert list(planned["Rows"]) == [100, 100, 200]
    assert list(planned["Input shape"]) == ["[100, 2]", "[100, 2]", "[200, 2]"]
    assert at.session_state["run_id"] is None
    assert at.error == []


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"batch_size": 300},
            "Batch size: got 300; allowed: an integer from 1 to 200 (the data size)",
        ),
        (
            {"n_features": 17},
            f"True weights: got {str([5.2, 9.6] + [1.0] * 15)[:72]}… (17 in all); allowed: 1 to 16 numbers",
        ),
        (
            {"lr": 0.0},
            "Learning rate: got 0.0; allowed: a finite number greater than 0 and at most 1e+30",
        ),
        ({"noise": -1.0}, "Noise: got -1.0; allowed: a finite number from 0 to 1000000"),
        (
            {"data_size": 2_000_000, "batch_size": 100},
            "Data size: got 2000000; allowed: an integer from 1 to 1000000",
        ),
        ({"epochs": 20_000}, "Epochs: got 20000; allowed: an integer from 1 to 10000"),
        (
            {"data_size": 5, "batch_size": 5, "virtual_devices": 8},
            "Devices: got 'virtual:8'; allowed: at most as many devices as data rows (5)",
        ),
        ({"seed": -1}, f"Seed: got -1; allowed: an integer from 0 to {2**63 - 1}"),
    ],
)
def test_bad_input_shows_its_error_and_starts_nothing(page, changes, message):
    at = page()
    for key, value in changes.items():
        widget = at.slider(key=key) if key == "virtual_devices" else at.number_input(key=key)
        widget.set_value(value)
    at.run()
    assert [shown(e) for e in at.error] == [message]
    assert at.button(key="start").disabled  # AppTest, like a browser, cannot click it
    pool, _ = _pool(at)
    assert at.session_state["run_id"] is None and pool.counts()["kept"] == 0


def test_an_edited_app_py_keeps_the_one_server_pool(page, tmp_path):
    """Streamlit keys st.cache_resource on a function's source: a pool cached there would be built again
    when the teacher edits app.py under a running server, and two pools would each allow the cap."""
    first = page()
    edited = tmp_path / "app.py"
    edited.write_text(Path(APP).read_text() + "\n# edited while the server runs\n")
    second = AppTest.from_file(str(edited), default_timeout=30)
    second.run()
    assert not second.exception
    assert _pool(second)[0] is _pool(first)[0]
    assert _pool(second)[1] != _pool(first)[1]  # still two sessions, each its own owner


def test_a_start_checks_the_controls_once_and_its_run_gets_that_plan(page, monkeypatch):
    # the settings are read once: the render's check of unchanged controls is the one a Start submits, the
    # pool takes it as it is, and the run's trainer gets the very plan that check made
    from fitcore.core import config
    from fitcore.runs import pool as pool_module

    checks = []

    def counted(*args, **kwargs):
        checks.append(config.check(*args, **kwargs))
        return checks[-1]

    monkeypatch.setattr(controls, "check", counted)
    monkeypatch.setattr(pool_module, "check", counted)
    at = page()
    assert len(checks) == 1  # the first render's
    checks.clear()
    at.slider(key="virtual_devices").set_value(3)
    at.selectbox(key="pace").set_value("max")
    at.run()
    assert len(checks) == 1 and len(checks[0].plan.labels) == 3  # the devices changed: checked once
    at.button(key="start").click()
    at.run()
    wait_until_ended(at)
    assert len(checks) == 1  # no check at Start, none by the pool, none in the reruns after it
    pool, owner = _pool(at)
    (run,) = [r for o, r in pool._runs.values() if o == owner]
    assert run.plan is checks[0].plan and run.config is checks[0].config


def test_start_trains_and_shows_the_split_and_the_results(page):
    at = page()
    at.slider(key="virtual_devices").set_value(3)
    at.selectbox(key="pace").set_value("max")
    at.run()
    assert at.selectbox(key="preset").value == "Uneven split"
    at.button(key="start").click()
    at.run()
    assert at.session_state["run_id"] is not None
    wait_until_ended(at)
    assert not at.exception

    line = status_text(at)
    assert line.startswith("Finished · epoch 200 / 200 · step 200 / 200 · ")
    assert live_view(at)["payload"]["run"]["kind"] == "success"
    split = table(at, "Batch rows")
    assert list(split["Device"]) == [
        "virtual:0 (emulated on CPU)",
        "virtual:1 (emulated on CPU)",
        "virtual:2 (emulated on CPU)",
        "Outside (gathered)",
    ]
    assert list(split["Rows"]) == [67, 67, 66, 200]
    assert list(split["Batch rows"]) == ["0–66", "67–133", "134–199", "0–199"]
    assert list(split["Input shape"]) == ["[67, 2]", "[67, 2]", "[66, 2]", "[200, 2]"]
    assert list(split["Output shape"]) == ["[67, 1]", "[67, 1]", "[66, 1]", "[200, 1]"]

    # final parameters: near the true ones, and exactly the least-squares reference of this data
    snap = at.session_state["snap"]
    results = table(at, "Parameter")
    assert list(results["Parameter"]) == ["w1", "w2", "b"]
    assert list(results["Learned"]) == [f"{v:.4f}" for v in (*snap.weights, snap.bias)]
    assert [float(v) for v in results["Learned"]] == pytest.approx([5.2, 9.6, 3.4], abs=1e-2)
    X, y = make_data(snap.config)
    A = torch.cat([X.double(), torch.ones(len(X), 1, dtype=torch.float64)], 1)
    lstsq = torch.linalg.lstsq(A, y.double()).solution.view(-1).tolist()
    assert list(results["Least squares"]) == [f"{v:.4f}" for v in lstsq]
    assert list(results["True"]) == ["5.2000", "9.6000", "3.4000"]

    console = at.code[0].value
    assert "In Model: input size torch.Size([67, 2]) output size torch.Size([67, 1])" in console
    assert "In Model: input size torch.Size([66, 2]) output size torch.Size([66, 1])" in console
    assert "Outside: input size torch.Size([200, 2]) output_size torch.Size([200, 1])" in console
    downloads = [b.key for b in at.get("download_button")]
    assert downloads == ["download_csv", "download_json", "download_record", "download_trace"]
    assert not at.button(key="start").disabled  # ready for the next run
    check_the_charts(at, snap)


def check_the_charts(at: AppTest, snap) -> None:
    """The live view holds the run's whole history; smoothing, and earlier runs only when asked."""
    data = live_view(at)
    body = data["payload"]
    assert body["loss"] == [[s, v] for s, v in snap.loss_history]
    assert body["params"] == [[s, list(v)] for s, v in snap.param_history]
    assert body["names"] == ["w1", "w2", "b"] and body["true"] == [5.2, 9.6, 3.4]
    assert body["lstsq"] == [*snap.lstsq_weights, snap.lstsq_bias]
    assert body["run"]["total_steps"] == 200 and body["run"]["label"] == "Run 1 · DataParallel · virtual:3"
    assert data["smoothing"] == 0.0 and data["overlay"] == []

    at.slider(key="smoothing").set_value(0.5)  # the browser smooths (its own smoothing)
    at.run()
    assert live_view(at)["smoothing"] == 0.5

    # a second run: the first one is overlaid only when asked, and Clear forgets it
    at.slider(key="smoothing").set_value(0.0)
    at.number_input(key="epochs").set_value(5)
    at.run()
    at.button(key="start").click()
    at.run()
    wait_until_ended(at)
    data = live_view(at)
    assert data["overlay"] == [] and data["payload"]["run"]["label"] == "Run 2 · DataParallel · virtual:3"
    assert data["payload"]["run"]["total_steps"] == 5
    at.toggle(key="overlay").set_value(True)
    at.run()
    overlay = live_view(at)["overlay"]
    assert [o["label"] for o in overlay] == ["Run 1 · DataParallel · virtual:3"]
    assert overlay[0]["loss"] == [[s, v] for s, v in snap.loss_history]
    at.button(key="clear_overlay").click()
    at.run()
    assert live_view(at)["overlay"] == [] and at.button(key="clear_overlay").disabled


def test_the_page_never_reruns_on_a_timer_the_browser_polls_instead(page, monkeypatch):
    """While a run trains the live view asks /fitcore/live for news: no fragment reruns the script."""
    fragments = []
    real = st.fragment

    def spy(func=None, *, run_every=None, **kw):
        fragments.append(run_every)
        return real(func, run_every=run_every, **kw)

    monkeypatch.setattr(st, "fragment", spy)
    at = started(page, "20")
    data = live_view(at)
    assert (data["endpoint"], data["bye"]) == ("/fitcore/live", "/fitcore/bye")
    assert (data["poll_ms"], data["queued_poll_ms"]) == (400, 1000)
    at.selectbox(key="refresh_ms").set_value(100)  # a projected page: ten answers a second
    at.run()
    assert live_view(at)["poll_ms"] == 100
    assert data["owner"] == at.session_state["owner"] and re.fullmatch("[0-9a-f]{32}", data["owner"])
    assert data["payload"]["run"]["id"] == at.session_state["run_id"]
    assert data["payload"]["run"]["active"] is True
    wait_for_run(at, lambda snap: snap.step >= 3)
    steps = [s for s, _ in live_view(at)["payload"]["loss"]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3  # every step so far
    at.button(key="stop").click()
    at.run()
    wait_until_ended(at)
    assert live_view(at)["payload"]["run"]["active"] is False
    assert fragments == []


def test_pause_and_step_during_a_long_step_draw_a_paused_runs_buttons(page, monkeypatch):
    # each step takes 0.3 s, so Pause comes while one is under way; the run holds once it has ended, and the
    # rerun that the click makes waits for the hold: it draws Resume and Step, not the running run's Pause
    # (a browser would keep those until the next rerun), and after Step it shows the step that Step ran
    from fitcore.core.events import Step
    from fitcore.runs import pool as pool_module

    real = pool_module.trainer_for

    def slow_trainer_for(cfg):
        def train(cfg, on_event, control, **kwargs):
            def slow(event):
                on_event(event)
                if isinstance(event, Step):
                    time.sleep(0.3)  # the step is under way until its loop comes back to the gate

            return real(cfg)(cfg, slow, control, **kwargs)

        return train

    monkeypatch.setattr(pool_module, "trainer_for", slow_trainer_for)
    at = started(page, "max")
    wait_for_run(at, lambda snap: snap.step >= 1)
    at.button(key="pause").click()
    at.run()
    paused_at = at.session_state["snap"].step
    assert at.session_state["snap"].status == "paused" and status_text(at).startswith("Paused · ")
    assert [b.key for b in at.button if b.key in ("pause", "resume")] == ["resume"]
    assert not at.button(key="step").disabled
    at.button(key="step").click()
    at.run()
    snap = at.session_state["snap"]
    assert (snap.status, snap.step) == ("paused", paused_at + 1)
    assert [b.key for b in at.button if b.key in ("pause", "resume")] == ["resume"]
    at.button(key="stop").click()
    at.run()
    wait_until_ended(at)


def test_pause_resume_stop_and_reset(page):
    at = started(page, "1")  # slow motion: one step a second
    run_id = at.session_state["run_id"]
    wait_for_run(at, lambda snap: snap.step >= 1)
    assert status_text(at).startswith("Running · epoch ")
    assert not at.button(key="stop").disabled and at.button(key="start").disabled

    assert at.button(key="step").disabled  # Step runs one step of a paused run only
    at.button(key="pause").click()
    at.run()
    assert status_text(at).startswith("Paused · ")
    pool, owner = _pool(at)
    paused_at = wait_for(lambda: pool.snapshot(owner, run_id).step, what="the run's first step")
    assert not at.button(key="step").disabled
    at.button(key="step").click()
    at.run()
    wait_for(lambda: pool.snapshot(owner, run_id).step == paused_at + 1, what="exactly one more step")
    # running while its one step is under way, paused again once it has ended, at that step
    wait_for(lambda: pool.snapshot(owner, run_id).status == "paused", what="the run held after its step")
    assert pool.snapshot(owner, run_id).step == paused_at + 1
    at.button(key="resume").click()
    at.run()
    pool, owner = _pool(at)
    assert pool.snapshot(owner, run_id).status == "running"

    at.button(key="stop").click()
    at.run()
    wait_until_ended(at)
    line = status_text(at)
    assert line.startswith("Stopped · ") and line.endswith("stopped by the user")
    assert live_view(at)["payload"]["run"]["kind"] == "warning"
    steps = int(STEP.search(line).group(1))
    assert 1 <= steps < 200

    at.button(key="reset").click()
    at.run()
    assert at.session_state["run_id"] is None and at.session_state["snap"] is None
    assert status_text(at) == "Ready · step 0 / 200 · press Start training"
    with pytest.raises(RunNotFound):
        pool.snapshot(owner, run_id)  # reset forgets the run in the pool too


def test_changing_controls_during_a_run_does_not_alter_it(page):
    at = started(page, "1")
    at.number_input(key="batch_size").set_value(100)
    at.run()
    warning = at.warning[0].value
    assert "The controls differ from" in warning and "the run keeps its own" in warning
    assert "Batch size: 200 in the run, 100 in the controls" in warning
    pool, owner = _pool(at)
    assert pool.snapshot(owner, at.session_state["run_id"]).config.batch_size == 200
    at.button(key="stop").click()
    at.run()
    wait_until_ended(at)


def test_pace_changes_live(page):
    at = started(page, "1")
    pool, owner = _pool(at)
    run_id = at.session_state["run_id"]
    assert pool.snapshot(owner, run_id).pace == 1.0
    at.selectbox(key="pace").set_value("max")
    at.run()
    assert pool.snapshot(owner, run_id).pace is None
    wait_until_ended(at)
    assert status_text(at).startswith("Finished · epoch 200 / 200 · step 200 / 200")


def test_a_dropped_run_keeps_what_the_page_last_read(page):
    at = started(page, "max")
    wait_until_ended(at)
    pool, owner = _pool(at)
    pool.forget(owner, at.session_state["run_id"])  # what the reaper does to a run nobody reads
    at.run()
    assert not at.exception and at.session_state["run_id"] is None
    assert status_text(at).startswith("Finished · epoch 200 / 200 · step 200 / 200")
    assert list(table(at, "Parameter")["Parameter"]) == ["w1", "w2", "b"]

    # an active run dropped by the server: the page says so instead of showing it running forever
    at.selectbox(key="pace").set_value("1")
    at.run()
    at.button(key="start").click()
    at.run()
    pool.forget(owner, at.session_state["run_id"])
    at.run()
    line = status_text(at)
    assert line.startswith("Stopped · ") and "the server dropped this run" in line


def test_pause_on_a_run_the_server_dropped_says_so_and_offers_start(page):
    """Pause pressed on a page that still showed the run live: the pool had dropped it, and the page
    showed it running on, Pause and Stop enabled, with nothing said."""
    at = page({"pace": "1"})
    at.button(key="start").click().run()
    pool, owner = _pool(at)
    pool.forget(owner, at.session_state["run_id"])  # the page has not rerun since
    assert not at.button(key="pause").disabled
    at.button(key="pause").click().run()
    assert not at.exception and at.session_state["run_id"] is None
    line = status_text(at)
    # its epoch is said once a step has come in: at 1 step a second, the first one may or may not have
    assert re.match(r"Stopped · (epoch 1 / 200 · )?step [01] / 200 · the server dropped this run", line), line
    assert [at.button(key=k).disabled for k in ("start", "pause", "stop")] == [False, True, True]


def test_a_page_whose_run_the_server_no_longer_has_says_so_once(page, monkeypatch):
    """A restarted server: the browser's live view had run-7 live (its cookie), the new server has no run.
    The page says so once, offers Start with the link's settings, and Pause and Stop do nothing."""
    from fitcore import api

    monkeypatch.setattr(api, "live_run_of", lambda cookies: "run-7")
    at = page({"epochs": "10000", "pace": "20"})
    gone = "The server no longer has the run this page was showing: it restarted, or dropped the run"
    assert [w.value[: len(gone)] for w in at.warning] == [gone] and not at.error
    assert status_text(at) == "Ready · step 0 / 10000 · press Start training"
    assert [at.button(key=k).disabled for k in ("start", "pause", "stop")] == [False, True, True]
    at.run()
    assert len(at.warning) == 1  # said once, not once more per rerun
    at.button(key="start").click().run()
    assert not at.warning and live_view(at)["payload"]["run"]["status"] in ("queued", "running")
    pool, owner = _pool(at)
    assert pool.snapshot(owner, at.session_state["run_id"]).config.epochs == 10000
    at.button(key="stop").click().run()


PRESET_VALUES = {
    "The tutorial": dict(
        weights=(5.2, 9.6), bias=3.4, noise=0.0, data_size=200, batch_size=200, epochs=200, lr=0.5,
        optimizer="adam", devices="virtual:2", strategy="dataparallel",
    ),
    "Uneven split": dict(data_size=200, batch_size=200, devices="virtual:3", optimizer="adam", lr=0.5),
    "Fewer rows than devices": dict(data_size=40, batch_size=5, epochs=25, devices="virtual:8"),
    "Too high a learning rate": dict(optimizer="sgd", lr=1.5, epochs=200, devices="virtual:2"),
    "Noisy data": dict(noise=3.0, data_size=40, batch_size=40, epochs=200, devices="virtual:2"),
    "DistributedDataParallel": dict(strategy="ddp", workers=2, devices="cpu", data_size=200, batch_size=200),
    "Uneven shards": dict(strategy="ddp", workers=3, devices="cpu", data_size=10, batch_size=10),
    "DDP × TP: a 2-D mesh": dict(strategy="ddp", workers=4, mesh="dp=2,tp=2", weights=(5.2, 9.6, -1.0, 2.5)),
}  # fmt: skip


def test_a_lesson_script_plays_its_presets_in_order_with_next(page):
    at = page({"script": "lesson"})
    by_key = {p.key: p.name for p in controls.PRESETS}
    order = [by_key[key] for key in controls.SCRIPTS["lesson"]]  # DataParallel's, then each strategy's
    assert order[:7] == [
        "The tutorial", "Uneven split", "Fewer rows than devices", "DistributedDataParallel", "Uneven shards",
        "DDP × TP: a 2-D mesh", "FSDP (ZeRO-3)",
    ]  # fmt: skip
    for i, name in enumerate(order):
        assert at.selectbox(key="preset").value == name
        assert control_values(at) == controls.config_values(controls.preset(name).config)
        title = f"**Lesson {i + 1} / {len(order)}:** {controls.preset(name).title}"
        assert any(m.value == title for m in at.markdown)
        assert at.button(key="script_next").disabled == (i == len(order) - 1)
        if i < len(order) - 1:
            at.button(key="script_next").click().run()
    at.button(key="script_back").click().run()
    assert at.selectbox(key="preset").value == order[-2]
    bad = page({"script": "tutorial,nope"})
    assert [e.value for e in bad.error if "script" in e.value.lower()], [e.value for e in bad.error]
    assert bad.selectbox(key="preset").value == "The tutorial"  # the defaults kept


@pytest.mark.parametrize("name", list(PRESET_VALUES))
def test_presets_set_the_controls(page, name):
    at = page()
    at.number_input(key="seed").set_value(5)
    at.number_input(key="n_features").set_value(3)
    at.run()
    assert at.selectbox(key="preset").value == "Custom"
    at.selectbox(key="preset").set_value(name)
    at.run()
    values = control_values(at)
    for field, value in PRESET_VALUES[name].items():
        assert values[field] == value, field
    assert values == controls.config_values(controls.preset(name).config)
    assert values["seed"] == 0 and len(values["weights"]) == len(controls.preset(name).config.weights)
    assert at.selectbox(key="preset").value == name
    assert [e.value for e in at.info if e.value.startswith(f"**{name}.**")]
    assert at.error == []


def test_the_link_sets_the_controls_and_follows_them(page):
    query = {
        "weights": "1.5,-2,0.25",
        "bias": "0.5",
        "noise": "0.1",
        "data_size": "100",
        "batch_size": "50",
        "epochs": "3",
        "lr": "0.1",
        "optimizer": "sgd",
        "shuffle": "false",
        "seed": "4",
        "devices": "virtual:4",
        "strategy": "dataparallel",
        "workers": "2",
        "mesh": "",
        "reshard_after_forward": "true",
        "layers": "4",
        "width": "0",
        "microbatches": "4",
        "schedule": "1f1b",
        "block_ms": "0",
        "slow_stage": "-1",
        "pace": "5",
    }
    at = page(query)
    assert control_values(at) == {
        "weights": (1.5, -2.0, 0.25),
        "bias": 0.5,
        "noise": 0.1,
        "data_size": 100,
        "batch_size": 50,
        "epochs": 3,
        "lr": 0.1,
        "optimizer": "sgd",
        "shuffle": False,
        "seed": 4,
        "devices": "virtual:4",
        "strategy": "dataparallel",
        "workers": 2,
        "mesh": "",
        "reshard_after_forward": True,
        "layers": 4,  # the pipeline's options, which the link left at their defaults
        "width": 0,
        "microbatches": 4,
        "schedule": "1f1b",
        "block_ms": 0.0,
        "slow_stage": -1,
    }
    assert at.selectbox(key="pace").value == "5"
    assert at.query_params == query  # already in the page's own spelling
    # a control changed on the page is written to the link ...
    at.number_input(key="seed").set_value(7)
    at.slider(key="virtual_devices").set_value(2)
    at.run()
    assert at.query_params == {**query, "seed": "7", "devices": "virtual:2"}
    # ... and the link reproduces the setup in a new session
    again = page(dict(at.query_params))
    assert control_values(again) == control_values(at)
    assert again.selectbox(key="pace").value == "5"


def test_a_value_written_as_markdown_shows_as_written_not_as_a_link(page):
    value = "[click me](http://example.com) **bold** <b>x</b>"
    at = page({"devices": value})
    (error,) = at.error
    assert (
        shown(error)
        .replace(WORD_JOINER, "")
        .startswith(f"The link had a bad value, so the default is used. Devices: got {value!r}")
    )
    for special in "[]*<>":  # each Markdown character of the value reaches the page escaped
        assert "\\" + special in error.value
    assert "](" not in error.value.replace("\\]", "")  # no link left to render
    # nor an autolink, which GitHub's Markdown makes after parsing whatever the escapes (seen in Chromium)
    assert "://" not in error.value


@pytest.mark.parametrize("value", ["www.example.org", "me@example.com", "http://example.com/x"])
def test_a_bare_address_in_a_value_is_no_link(page, value):
    (error,) = page({"seed": value}).error
    assert error.value.replace(WORD_JOINER, "").endswith(f"Seed: got '{value}'; allowed: an integer")
    assert not re.search(r"://|www\.|\w@", error.value)  # each mark broken by the invisible joiner


def test_bad_values_in_the_link_show_errors_not_a_traceback(page):
    at = page({"data_size": "abc", "devices": "virtual:99", "lr": "-1", "pace": "fast"})
    errors = [shown(e) for e in at.error]
    assert len(errors) == 4
    link = "The link had a bad value, so the default is used. "
    assert errors[0] == link + "Data size: got 'abc'; allowed: an integer"
    # what else is allowed depends on this machine's GPUs
    assert errors[1].startswith(link + "Devices: got 'virtual:99'; allowed: cpu, virtual:K (K from 1 to 8)")
    assert errors[2] == link + (
        "Pace: got 'fast'; allowed: one of lesson1, lesson2, lesson3, lesson5, 1, 2, 5, 10, 20, 50, 100, "
        "200, max (steps per second; lessonN: N seconds a phase)"
    )
    assert errors[3] == "Learning rate: got -1.0; allowed: a finite number greater than 0 and at most 1e+30"
    assert at.number_input(key="data_size").value == 200
    assert at.query_params["data_size"] == "200" and at.query_params["lr"] == "-1"
    assert at.button(key="start").disabled


LINK = "The link had a bad value, so the default is used. "
WORKERS_ALLOWED = "allowed: an integer from 1 to 8 (and at most the data size)"


@pytest.mark.parametrize(
    "query, errors, workers",
    [
        # DDP's control shows the link's count as given: validation refuses it, and Start waits
        ({"strategy": "ddp", "workers": "-1"}, [f"Workers: got -1; {WORKERS_ALLOWED}"], -1),
        ({"strategy": "ddp", "workers": "0", "hide": "workers"}, [f"Workers: got 0; {WORKERS_ALLOWED}"], 0),
        # no control shows DataParallel's count: one that no run takes is refused, not kept out of sight
        ({"workers": "-1"}, [f"{LINK}Workers: got '-1'; {WORKERS_ALLOWED}"], 2),
        ({"strategy": "dataparallel", "workers": "9"}, [f"{LINK}Workers: got '9'; {WORKERS_ALLOWED}"], 2),
        ({"strategy": "dataparallel", "workers": "3"}, [], 3),  # kept for a switch to DDP
    ],
)
def test_a_links_worker_count_is_used_as_given_or_refused(page, query, errors, workers):
    at = page(query)
    assert [shown(e) for e in at.error] == errors
    assert at.session_state["workers"] == workers and at.query_params["workers"] == str(workers)
    assert at.button(key="start").disabled == (query.get("strategy") == "ddp")


@pytest.mark.parametrize(
    "raw, ask, errors",
    [
        ("yes", True, []),
        ("no", False, []),
        ("maybe", False, [LINK + "ask: got 'maybe'; allowed: 1 or 0 (or true/false, on/off, yes/no)"]),
        ("", False, [LINK + "ask: got ''; allowed: 1 or 0 (or true/false, on/off, yes/no)"]),
    ],
)
def test_a_links_ask_switch_is_used_as_given_or_refused(page, raw, ask, errors):
    at = page({"ask": raw})
    assert [shown(e) for e in at.error] == errors
    assert at.toggle(key="ask").value is ask
    assert at.query_params.get("ask") == ("1" if ask else None)  # the page's own spelling, or none when off


# ---------------------------------------------------------------------------------------------------------
# DistributedDataParallel.


@pytest.mark.parametrize("strategy", sorted(registry.NAMES))
def test_before_a_run_the_console_says_what_the_controls_strategy_will_print(page, strategy):
    """The Console's caption before a run is the chosen strategy's (a pipeline's stages and bubble), not the
    default strategy's In Model / Outside lines."""
    at = page({"strategy": strategy, **({} if strategy == registry.DEFAULT else {"devices": "cpu"})})
    hint = t(registry.strategy(strategy).view_module.CONSOLE_HINT)
    caption = next(c.value for c in at.caption if t("page.console.hint", hint=hint) == c.value)
    assert hint in caption
    others = {t(s.view_module.CONSOLE_HINT) for s in registry.STRATEGIES.values()} - {hint}
    assert not any(t("page.console.hint", hint=o) == c.value for o in others for c in at.caption)


def test_the_ddp_choice_plans_each_ranks_shard_and_goes_into_the_link(page):
    at = page()
    at.radio(key="strategy").set_value("ddp")
    at.run()
    assert at.header[0].value == "How DistributedDataParallel shards the data"
    assert at.number_input(key="workers").value == 2
    assert [w.key for w in at.slider] == ["smoothing"]  # no virtual devices for ddp: one process per rank
    assert at.query_params["strategy"] == "ddp" and at.query_params["devices"] == "cpu"
    assert at.query_params["workers"] == "2"
    assert at.selectbox(key="preset").value == "DistributedDataParallel"
    shards = table(at, "Dataset rows")
    assert list(shards["Dataset rows"]) == [100, 100]
    assert list(shards["Padded (repeated)"]) == ["none", "none"]
    shapes = table(at, "Input shape")  # before any run: each rank's first step
    assert list(shapes["Device"]) == [
        "rank 0 · cpu · gloo",
        "rank 1 · cpu · gloo",
        "All ranks together (never gathered)",
    ]
    assert list(shapes["Input shape"]) == ["[100, 2]", "[100, 2]", "[200, 2]"]

    # 10 rows on 3 ranks: 4 each, 12 in all, the first 2 rows of the epoch's order repeated
    at.selectbox(key="preset").set_value("Uneven shards")
    at.run()
    assert at.number_input(key="workers").value == 3
    shards = table(at, "Dataset rows")
    assert list(shards["Dataset rows"]) == [4, 4, 4]
    order = torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist()  # the sampler's epoch 1
    padded = order[:2]
    expected = [(order + padded)[rank::3] for rank in range(3)]
    assert list(shards["Rows, in the rank's order"]) == [", ".join(map(str, e)) for e in expected]
    assert list(shards["Padded (repeated)"]) == ["none", str(padded[0]), str(padded[1])]
    own, pad = (trace["z"] for trace in chart(at, "shards_chart")["data"])  # (ranks, rows) each
    assert chart(at, "shards_chart")["data"][0]["y"] == [f"rank {r} (4 rows)" for r in range(3)]
    assert cells(own) == [sorted(e) for e in expected[:1]] + [sorted(e[:-1]) for e in expected[1:]]
    assert cells(pad) == [[], [padded[0]], [padded[1]]]  # drawn pale, in the ranks they pad
    assert f"2 rows ({padded[0]}, {padded[1]}) repeated" in at.markdown[0].value
    explain = [e for e in at.expander if e.label == "DataParallel versus DistributedDataParallel"]
    assert len(explain) == 1 and "all-reduces" in explain[0].markdown[0].value


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"workers": 9},
            "Workers: got 9; allowed: an integer from 1 to 8 (and at most the data size)",
        ),
        (
            {"workers": 0},
            "Workers: got 0; allowed: an integer from 1 to 8 (and at most the data size)",
        ),
        (
            {"data_size": 3, "batch_size": 3, "workers": 4},
            "Workers: got 4; allowed: an integer from 1 to 3 (and at most the data size)",
        ),
    ],
)
def test_bad_worker_count_shows_its_error_and_starts_nothing(page, changes, message):
    at = page()
    at.radio(key="strategy").set_value("ddp")
    at.run()
    for key, value in changes.items():
        at.number_input(key=key).set_value(value)
    at.run()
    assert [shown(e) for e in at.error] == [message]
    assert at.button(key="start").disabled
    pool, _ = _pool(at)
    assert at.session_state["run_id"] is None and pool.counts()["kept"] == 0


@pytest.mark.slow  # spawns ranks
def test_a_two_rank_ddp_run_shows_each_ranks_rows_and_identical_parameters(page):
    at = page()
    at.radio(key="strategy").set_value("ddp")
    at.run()
    for key, value in dict(data_size=40, batch_size=20, epochs=30, lr=0.5).items():
        at.number_input(key=key).set_value(value)
    at.selectbox(key="optimizer").set_value("sgd")
    at.selectbox(key="pace").set_value("max")
    at.run()
    at.button(key="start").click()
    at.run()
    wait_for_run(at, lambda snap: not snap.active, timeout=120)  # each rank's process imports torch first
    assert not at.exception
    # 40 rows on 2 ranks: 20 each; each takes 10 per step, so 2 steps per epoch
    assert status_text(at).startswith("Finished · epoch 30 / 30 · step 60 / 60 · ")
    assert multiprocessing.active_children() == []  # every rank's process has ended

    shards = table(at, "Dataset rows")  # the sampler's shards of the last epoch, from DistributedSampler
    assert list(shards["Dataset rows"]) == [20, 20]
    for rank, shown in enumerate(shards["Rows, in the rank's order"]):
        sampler = DistributedSampler(range(40), num_replicas=2, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(29)
        rows = list(sampler)
        assert shown == ", ".join(map(str, rows[:12])) + ", … (8 more)"
    assert list(shards["Padded (repeated)"]) == ["none", "none"]
    shapes = table(at, "Input shape")
    assert list(shapes["Rows"]) == [10, 10, 20]
    assert list(shapes["Input shape"]) == ["[10, 2]", "[10, 2]", "[20, 2]"]
    assert list(shapes["Output shape"]) == ["[10, 1]", "[10, 1]", "[20, 1]"]

    # every rank ended with the same parameters, and they are the least-squares answer
    ranks = table(at, "w1")
    assert list(ranks["Device"]) == ["rank 0 · cpu · gloo", "rank 1 · cpu · gloo"]
    assert ranks.iloc[0, 2:].tolist() == ranks.iloc[1, 2:].tolist()
    X, y = make_data(at.session_state["snap"].config)
    A = torch.cat([X.double(), torch.ones(len(X), 1, dtype=torch.float64)], 1)
    lstsq = torch.linalg.lstsq(A, y.double()).solution.view(-1).tolist()
    assert [float(v) for v in ranks.iloc[0, 2:]] == pytest.approx(lstsq, abs=1e-4)
    agreement = [e.value for e in at.success if "ranks ended" in e.value]
    assert len(agreement) == 1 and "All 2 ranks ended with identical parameters" in agreement[0]

    console = at.code[0].value
    assert (
        "[rank 1 · cpu · gloo] In Model: input size torch.Size([10, 2]) output size torch.Size([10, 1])"
        in console
    )
    assert "All ranks: input size torch.Size([20, 2]) over 2 ranks, no gather" in console
    assert "Parameters per rank after the last step: identical on every rank" in console
    assert "Outside:" not in console  # nothing is gathered


def test_a_preset_chosen_after_a_diverged_run_shows_its_planned_step_and_calls_the_old_one_previous(page):
    at = page()
    at.selectbox(key="preset").set_value("Too high a learning rate").run()
    at.selectbox(key="pace").set_value("max").run()
    at.button(key="start").click().run()
    wait_until_ended(at)
    run = live_view(at)["payload"]["run"]
    assert run["status"] == "diverged" and run["diverged_at"] == 43 and "at step 43" in run["status_line"]
    assert at.header[0].value == "How DataParallel splits a batch"
    at.selectbox(key="preset").set_value("DistributedDataParallel").run()
    body = live_view(at)["payload"]
    # the new settings' first step, planned, with nothing of the diverged run on it
    assert body["run"]["status"] == "ready" and body["run"]["diverged_at"] is None and body["loss"] == []
    assert body["picture"]["planned"] and body["picture"]["strategy"] == "ddp"
    assert at.header[0].value == "How DistributedDataParallel shards the data"
    (note,) = [c.value for c in at.caption if "previous run" in c.value]
    assert "(Run 1)" in note and "run-" not in note
    assert "Learning rate: 1.5 in the run, 0.5 in the controls" in note


def test_fsdps_switch_comes_from_the_link_under_fsdp_and_is_refused_elsewhere(page):
    at = page({"strategy": "fsdp", "devices": "cpu", "workers": "2", "reshard_after_forward": "false"})
    assert not at.exception and not at.error
    assert at.toggle(key="reshard_after_forward").value is False
    assert control_values(at)["reshard_after_forward"] is False
    assert at.header[0].value == "How FSDP shards the model"
    at.toggle(key="reshard_after_forward").set_value(True).run()
    assert at.query_params["reshard_after_forward"] == "true"
    other = page({"reshard_after_forward": "false"})  # DataParallel reads no such switch: refused, one line
    errors = [shown(e) for e in other.error]
    assert errors == [
        "The link had a bad value, so the default is used. Free W after forward (ZeRO-3): got 'false'; "
        "allowed: its default: it applies only to the FSDP strategy"
    ]
    assert not other.exception and control_values(other)["reshard_after_forward"] is True


@pytest.mark.parametrize(
    "query, field",
    [({"preset": "x" * 10_000}, "Preset"), ({"script": "nope"}, "Script"), ({"room": "ZZZZ"}, "room")],
)
def test_a_bad_preset_script_or_room_in_the_link_is_one_error_and_leaves_the_address_bar(page, query, field):
    at = page(query)
    (error,) = [e.value for e in at.error]
    assert field.lower() in error.lower()
    assert len(error) < 400  # a 10,000-character value is cut, not shown whole
    assert not set(query) & set(at.query_params)


def test_a_preset_named_in_the_link_sets_the_controls_and_the_links_values_apply_over_it(page):
    at = page({"preset": "uneven"})
    assert not at.error and at.selectbox(key="preset").value == "Uneven split"
    assert at.session_state["virtual_devices"] == 3 and at.number_input(key="epochs").value == 200
    at = page({"preset": "uneven", "epochs": "7"})  # no longer the preset's settings: "Custom"
    assert not at.error and at.selectbox(key="preset").value == "Custom"
    assert at.session_state["virtual_devices"] == 3 and at.number_input(key="epochs").value == 7


def test_one_device_is_the_checked_plans_count_of_devices_against_the_gpus_the_run_had():
    """The heading's "one device" is the device plan's count, as config.check made it: `cuda` on a one-GPU
    machine is one device, on a two-GPU machine two, a recording's `cuda:5` on a laptop the one it ran on,
    and controls not valid yet (no plan) none."""
    from dashboard.panels import page_title
    from fitcore.core.config import check
    from fitcore.core.devices import GPU

    one, two = [GPU(0, "H100", 80 << 30)], [GPU(0, "H100", 80 << 30), GPU(1, "H100", 80 << 30)]
    split, whole = t(registry.strategy(registry.DEFAULT).words["title"]), t("page.title.one_device")

    def title(devices: str, gpus=None, recorded: bool = False) -> str:
        plan = check(FitConfig(devices=devices), gpus=gpus, recorded=recorded).plan
        return page_title({"strategy": registry.DEFAULT, "devices": devices}, plan)

    assert title("cuda", one) == whole and title("cuda", two) == split  # one GPU: nothing is split, said so
    assert title("cpu", []) == title("virtual:1", []) == whole and title("virtual:2", []) == split
    assert title("cuda:5", recorded=True) == whole and title("cuda:0,1", two) == split
    assert page_title({"strategy": registry.DEFAULT, "devices": "nonsense"}, None) == split
