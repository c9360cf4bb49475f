"""The page's own state under sequences of actions: a Hypothesis state machine over AppTest presses the run's
buttons, switches the language, the pace, the preset, the devices and the strategy, uploads files and
replays, and after every action checks that the page shows no traceback, a status of `Status`, and buttons
and a pace that match the run. Each bug it found has its own example test below it.

The browser sends a choice widget's value as the label it shows: the page's language of the run that drew
it, unless the server pushed a new value (`set_value`). `browser_run` sends them so (AppTest would otherwise
put the labels into words in the test's own language).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from fitcore import i18n
from fitcore.events import Status
from fitcore.view import controls
from tests import test_app
from tests.test_app import live_view

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "dataparallel-virtual3.fitrec"
page = test_app.page  # the fixture: fresh sessions of the page, every run stopped afterwards

# what the machine uploads: a good CSV, a `;`-separated one, good and hostile recordings
GOOD_RECORDING = (ROOT / "examples" / EXAMPLE).read_bytes()
RECORDINGS = {
    "good": GOOD_RECORDING,
    "nested": b"[" * 100_000 + b"]" * 100_000,
    "nested-line-2": GOOD_RECORDING.split(b"\n")[0] + b"\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "forged-total": GOOD_RECORDING.replace(b'"total_steps":20,', b'"total_steps":1000000000000000,'),
}
CSVS = {"houses": (ROOT / "examples" / "houses.csv").read_bytes(), "semicolons": b"a;b;y\n1;2;3\n4;5;6\n"}
# DDP's presets spawn processes: the machine sets them and draws the page, but starts DataParallel runs only
# (a DDP run through the page is tests/test_app.py's slow test)
PRESETS = [p.name for p in controls.PRESETS]


def held_language(at) -> str:
    """The language of the labels the browser holds: the page's, as its last run drew it."""
    return at.session_state["lang"] if "lang" in at.session_state else "en"


def browser_run(at, held: str | None = None):
    """Rerun the page as the browser would: every choice sent as the label it shows."""
    with i18n.using(held or held_language(at)):
        return at.run()


def choices(at) -> dict:
    """The choice widgets the page drew, by key: the browser sends their values as labels."""
    return {w.key: w for kind in ("selectbox", "radio", "multiselect") for w in at.get(kind) if w.key}


def pushed(at, key: str) -> bool:
    """Did the page's last run send the browser a new value for this widget?"""
    return bool(choices(at)[key].proto.set_value)


def switch_language(at) -> None:
    """Switch the page's language as the browser does; every choice whose labels changed must come back
    with its value pushed, or the browser would send the old language's label as its value."""
    held = held_language(at)
    before = {key: list(w.options) for key, w in choices(at).items()}
    at.segmented_control(key="lang").set_value("zh" if held == "en" else "en")
    browser_run(at, held)
    for key, w in choices(at).items():
        if key in before and list(w.options) != before[key]:
            assert w.proto.set_value, f"{key}: its labels changed with the language, its value was not sent"


class PageMachine(RuleBasedStateMachine):
    open_page = None  # set by the test: the `page` fixture's opener

    def __init__(self):
        super().__init__()
        self.at = type(self).open_page()

    # --- what the page shows -----------------------------------------------------------------------------

    def button(self, key: str):
        found = [b for b in self.at.button if b.key == key]
        return found[0] if found else None

    def enabled(self, key: str) -> bool:
        b = self.button(key)
        return b is not None and not b.disabled

    def snap(self):
        return self.at.session_state["snap"]

    def click(self, key: str) -> bool:
        """Press the button if the page offers it enabled (a browser cannot press a disabled one)."""
        if not self.enabled(key):
            return False
        self.button(key).click()
        browser_run(self.at)
        return True

    # --- the rules -----------------------------------------------------------------------------------------

    @rule()
    def start(self):
        if self.at.session_state["strategy"] == "dataparallel":
            self.click("start")

    @rule()
    def pause(self):
        self.click("pause")

    @rule()
    def resume(self):
        self.click("resume")

    @rule()
    def step(self):
        self.click("step")

    @rule()
    def stop(self):
        self.click("stop")

    @rule()
    def reset(self):
        self.click("reset")

    @rule()
    def language(self):
        switch_language(self.at)

    @rule(pace=st.sampled_from(controls.PACE_CHOICES))
    def pace(self, pace):
        self.at.selectbox(key="pace").set_value(pace)
        browser_run(self.at)

    @rule(name=st.sampled_from(PRESETS))
    def preset(self, name):
        self.at.selectbox(key="preset").set_value(name)
        browser_run(self.at)

    @rule(k=st.integers(1, 8))
    def devices(self, k):
        if self.at.session_state["strategy"] == "dataparallel":
            self.at.slider(key="virtual_devices").set_value(k)
            browser_run(self.at)

    @rule(name=st.sampled_from(["dataparallel", "ddp"]))
    def strategy(self, name):
        self.at.radio(key="strategy").set_value(name)
        browser_run(self.at)

    @rule(name=st.sampled_from(sorted(CSVS)))
    def upload_csv(self, name):
        self.at.radio(key="data_source").set_value("csv")
        browser_run(self.at)
        self.at.file_uploader(key="csv_upload").set_value((f"{name}.csv", CSVS[name], "text/csv"))
        browser_run(self.at)

    @rule()
    def synthetic_data(self):
        self.at.radio(key="data_source").set_value("synthetic")
        browser_run(self.at)

    @rule(name=st.sampled_from(["example"] + sorted(RECORDINGS)))
    def replay(self, name):
        if name == "example":
            self.at.selectbox(key="replay_choice").set_value(EXAMPLE)
        else:
            self.at.selectbox(key="replay_choice").set_value("upload")
            browser_run(self.at)
            upload = (f"{name}.fitrec", RECORDINGS[name], "text/plain")
            self.at.file_uploader(key="replay_upload").set_value(upload)
        browser_run(self.at)
        if self.click("replay") and name not in ("example", "good"):  # refused with one line, nothing started
            assert len([e for e in self.at.error if e.value.startswith("Recording: got")]) == 1

    @rule()
    def poll(self):
        browser_run(self.at)

    # --- what must hold after every rule ------------------------------------------------------------------

    @invariant()
    def no_traceback(self):
        assert not self.at.exception, [e.value for e in self.at.exception]

    @invariant()
    def status_is_a_status(self):
        payload = live_view(self.at)["payload"]  # None: no run and no config to show (a CSV not chosen yet)
        snap = self.snap()
        if payload is None:
            assert snap is None
            return
        run = payload["run"]
        assert run["status"] in {s.value for s in Status} | {"ready"}
        assert snap is None or (isinstance(snap.status, Status) and run["status"] == snap.status.value)

    @invariant()
    def controls_match_the_run(self):
        ss = self.at.session_state
        snap = self.snap()
        active = snap is not None and snap.active
        paused = active and snap.status == Status.PAUSED
        assert ss["pace"] in controls.PACE_CHOICES  # a choice, never a label
        assert self.button("stop").disabled == (not active)
        assert self.button("step").disabled == (not paused)
        assert self.button("reset").disabled == (snap is None)
        assert self.button("start").disabled or not active
        assert (self.button("resume") is not None) == paused
        if not paused:
            assert self.button("pause").disabled == (not active)
        if active and ss["run_id"] is not None:
            pool = ss["pool"]
            assert pool.snapshot(ss["owner"], ss["run_id"]).pace == controls.parse_pace(ss["pace"])

    def teardown(self):
        ss = self.at.session_state
        if ss["run_id"] is not None:
            ss["pool"].forget(ss["owner"], ss["run_id"])


def test_no_sequence_of_actions_breaks_the_page(page):
    PageMachine.open_page = staticmethod(page)
    profile = settings(
        max_examples=4, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
    )
    run_state_machine_as_test(PageMachine, settings=profile)


# ---------------------------------------------------------------------------------------------------------
# The bugs it found, one example each.


def test_switching_the_language_back_during_a_run_keeps_the_pace(page):
    """/?epochs=10000&pace=20 -> Start -> 中文 -> English gave `could not convert string to float: 'Pace: 20
    steps/s'`: the browser held the pace box's English label, which the Chinese page did not know."""
    at = page({"epochs": "10000", "pace": "20"})
    at.button(key="start").click()
    browser_run(at)
    switch_language(at)  # the Chinese page sends every labelled choice back in Chinese
    held = "zh" if pushed(at, "pace") else "en"
    at.segmented_control(key="lang").set_value("en")
    browser_run(at, held)
    assert not at.exception
    assert at.session_state["pace"] == "20"
    ss = at.session_state
    assert ss["pool"].snapshot(ss["owner"], ss["run_id"]).pace == 20.0
    assert json.dumps(live_view(at)["payload"]["run"]["status"]) == '"running"'


@pytest.mark.parametrize("name", ["nested", "nested-line-2"])
def test_a_deeply_nested_recording_is_one_error_line(page, name):
    """A recording nested 100,000 deep replaced the whole page with a RecursionError."""
    at = page()
    at.selectbox(key="replay_choice").set_value("upload").run()
    at.file_uploader(key="replay_upload").set_value((f"{name}.fitrec", RECORDINGS[name], "text/plain")).run()
    at.button(key="replay").click().run()
    problem = {
        "nested": 'line 1: not a recording header (expected {"format": "fitcore-recording", ...})',
        "nested-line-2": "line 2: JSON nested a few levels deep; this line nests too deep to read",
    }[name]
    assert not at.exception and [e.value for e in at.error] == [
        f"Recording: got '{name}.fitrec'; allowed: a fitcore-recording file of version 1; {problem}"
    ]
    assert at.session_state["run_id"] is None


def test_replay_waits_for_a_file_so_an_oversize_upload_is_told_once(page):
    """An upload past the limit got the uploader's message and a second one from Replay ("got ''; ...
    upload one first"): with no file to replay, Replay cannot be pressed."""
    at = page()
    at.selectbox(key="replay_choice").set_value("upload").run()
    assert at.button(key="replay").disabled and not at.error
    at.file_uploader(key="replay_upload").set_value(("run.fitrec", GOOD_RECORDING, "text/plain")).run()
    assert not at.button(key="replay").disabled
