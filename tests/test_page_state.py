"""The page's own state under sequences of actions: a Hypothesis state machine over AppTest presses the run's
buttons, switches the language, the pace, the preset, the devices and the strategy, uploads files and
replays, and after every action checks that the page shows no traceback, a status of `Status`, and buttons
and a pace that match the run. Each bug it found has its own example test below it.

The browser sends a choice widget's value as the label it shows: the page's language of the run that drew
it, unless the server pushed a new value (`set_value`). `browser_run` sends them so (AppTest would otherwise
put the labels into words in the test's own language).
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from fitcore.core import i18n
from fitcore.core.events import Status
from fitcore.protocols import registry
from fitcore.view import controls
from tests import test_app
from tests.helpers import wait_for
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
FIRED: collections.Counter = collections.Counter()  # what each rule did, over one test's sequences
REACHED: collections.Counter = collections.Counter()  # the live states seen after a rule: paused, ...
BEGINS = ("from a run", "from a paused run", "from a replay", "from nothing")  # how sequences begin, in turn


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
        self.at = type(self).open_page()  # the tutorial's 200 steps: 10 s at the default pace
        self.replays: set[str] = set()  # the runs that are replays

    # --- what the page shows -----------------------------------------------------------------------------

    def button(self, key: str):
        found = [b for b in self.at.button if b.key == key]
        return found[0] if found else None

    def enabled(self, key: str) -> bool:
        b = self.button(key)
        return b is not None and not b.disabled

    def snap(self):
        return self.at.session_state["snap"]

    def wait_until_ended(self):
        """The run ended, then the page rerun as its browser would: in the page's language, whose labels
        the choice widgets hold (tests/test_app.py's own rerun would send them in English)."""
        pool, owner = test_app._pool(self.at)
        run_id = self.at.session_state["run_id"]
        wait_for(lambda: not pool.snapshot(owner, run_id).active, 30, interval=0.02, what="the run to end")
        browser_run(self.at)

    def click(self, key: str) -> bool:
        """Press the button if the page offers it enabled (a browser cannot press a disabled one)."""
        if not self.enabled(key):
            return False
        self.button(key).click()
        browser_run(self.at)
        return True

    # --- the rules -----------------------------------------------------------------------------------------
    # A button is pressed only while the page offers it (a browser cannot press a disabled one). The rules
    # draw the same way whatever the page shows (a precondition on a run's state would depend on the clock,
    # which Hypothesis reads as a flaky strategy); FIRED counts what each one did, and the test checks that
    # the runs, pauses, steps and replays the rules are for did happen.

    @initialize(pace=st.sampled_from(["1", "5", "20", "lesson1", "max"]))
    def begin(self, pace, begin: str | None = None):
        """Three sequences in four start from a live run, a paused one or a replay at some pace (in turn,
        not drawn: the draws are Hypothesis's to spend on the rules), so that the run's buttons have
        something to act on: a rule's turn to start one comes too seldom."""
        begin = begin or BEGINS[sum(FIRED[b] for b in BEGINS) % len(BEGINS)]
        FIRED[begin] += 1
        if begin == "from nothing":
            return
        self.at.selectbox(key="pace").set_value(pace)
        browser_run(self.at)
        if begin == "from a replay":
            self.replay("example")
        else:
            assert self.press("start")
        if begin == "from a paused run":
            assert self.press("pause")

    def press(self, key: str) -> bool:
        pressed = self.click(key)
        FIRED[key if pressed else f"{key}: not offered"] += 1
        return pressed

    # Four rules, each drawing what it does: Hypothesis leaves some rules out of each sequence (swarm
    # testing) and draws the first ones more often, so fifteen rules of their own left the run's buttons a
    # few turns in 300 steps, where a run needs them together (Start, then Pause, Step, Resume, Stop, Reset).

    @rule(key=st.sampled_from(["pause_or_resume", "step", "start", "stop", "reset"]))
    def run_button(self, key):
        if key == "start" and self.at.session_state["strategy"] != "dataparallel":
            FIRED["start: ddp, not started"] += 1
        elif key == "pause_or_resume":  # one place on the page: Pause, or Resume on a paused run
            self.press("resume" if self.button("resume") is not None else "pause")
        elif key == "step":  # Step is offered on a paused run: a running one is paused first
            if self.enabled("pause"):
                self.press("pause")
            self.press("step")
        else:
            self.press(key)

    @rule(
        change=st.one_of(
            st.tuples(st.just("language"), st.none()),
            st.tuples(st.just("pace"), st.sampled_from(controls.PACE_CHOICES)),
            st.tuples(st.just("preset"), st.sampled_from(PRESETS)),
            st.tuples(st.just("devices"), st.integers(1, 8)),
            st.tuples(st.just("strategy"), st.sampled_from(list(registry.NAMES))),
            st.tuples(st.just("reshard_after_forward"), st.booleans()),
        )
    )
    def setting(self, change):
        what, value = change
        if what == "language":
            switch_language(self.at)
        elif what == "devices":
            if self.at.session_state["strategy"] != "dataparallel":
                return  # DDP draws no device slider
            self.at.slider(key="virtual_devices").set_value(value)
        elif what == "reshard_after_forward":
            if self.at.session_state["strategy"] != "fsdp":
                return  # FSDP's switch is drawn under FSDP only
            self.at.toggle(key=what).set_value(value)
        else:
            widget = {"pace": self.at.selectbox, "preset": self.at.selectbox, "strategy": self.at.radio}[what]
            widget(key=what).set_value(value)
        browser_run(self.at)
        FIRED[what] += 1

    # a good recording as often as all the hostile ones together, so that Replay replays
    @rule(
        change=st.one_of(
            st.tuples(st.just("replay"), st.sampled_from(["example", "good"])),
            st.tuples(st.just("replay"), st.sampled_from(sorted(RECORDINGS))),
            st.tuples(st.just("upload_csv"), st.sampled_from(sorted(CSVS))),
            st.tuples(st.just("synthetic_data"), st.none()),
        )
    )
    def data(self, change):
        what, name = change
        if what == "replay":
            self.replay(name)
        elif what == "upload_csv":
            self.at.radio(key="data_source").set_value("csv")
            browser_run(self.at)
            self.at.file_uploader(key="csv_upload").set_value((f"{name}.csv", CSVS[name], "text/csv"))
            browser_run(self.at)
            FIRED[what] += 1
        else:
            self.at.radio(key="data_source").set_value("synthetic")
            browser_run(self.at)
            FIRED[what] += 1

    def replay(self, name):
        if name == "example":
            self.at.selectbox(key="replay_choice").set_value(EXAMPLE)
        else:
            self.at.selectbox(key="replay_choice").set_value("upload")
            browser_run(self.at)
            upload = (f"{name}.fitrec", RECORDINGS[name], "text/plain")
            self.at.file_uploader(key="replay_upload").set_value(upload)
        browser_run(self.at)
        if self.enabled("stop"):  # Replay waits for the live run: stopped first, as a user would
            self.press("stop")
            self.wait_until_ended()
        assert self.press("replay"), self.at.error  # a file chosen, no live run: Replay is offered
        if name in ("example", "good"):
            snap = self.snap()
            assert snap is not None and snap.run_id == self.at.session_state["run_id"], self.at.error
            self.replays.add(snap.run_id)
            FIRED["replay: replaying"] += 1
        else:  # refused with one line, nothing started
            assert len([e for e in self.at.error if e.value.startswith("Recording: got")]) == 1
            FIRED["replay: refused"] += 1

    @rule()
    def poll(self):
        time.sleep(0.05)  # the run moves on between two looks, as it does between the browser's polls
        browser_run(self.at)
        FIRED["poll"] += 1

    # --- what must hold after every rule ------------------------------------------------------------------

    @invariant()
    def count_the_state(self):
        snap = self.snap()
        if snap is not None and snap.active:
            REACHED["replaying" if snap.run_id in self.replays else snap.status.value] += 1

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
        if run["status"] == "ready" and snap is not None:  # an ended run the controls moved on from
            assert not snap.active and not snap.source_label, snap.status
            return
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
    FIRED.clear()
    REACHED.clear()
    # the runs move with the clock, so a sequence replayed is not the same sequence: no shrinking, a failing
    # sequence is reported as it was found
    profile = settings(
        max_examples=20, stateful_step_count=10, deadline=None, derandomize=True, database=None,
        phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    run_state_machine_as_test(PageMachine, settings=profile)
    print("rules fired:", dict(sorted(FIRED.items())), "states reached:", dict(sorted(REACHED.items())))
    # the sequences were not cut short, and reached what the machine is for: live runs and replays, paused
    # and running, whose buttons were pressed (a rule that stops doing anything fails here, or below)
    # (the draws are fixed, the runs move with the clock: the bounds leave room for a slow machine)
    assert sum(FIRED.values()) >= 150, FIRED
    pressed = sum(FIRED[k] for k in ("start", "pause", "resume", "step", "stop", "reset", "replay"))
    assert pressed >= 30, FIRED
    for key in ("start", "pause", "stop", "reset", "replay: replaying", "replay: refused"):
        assert FIRED[key] >= 1, (key, FIRED)
    for state in ("running", "paused", "replaying"):
        assert REACHED[state] >= 3, (state, REACHED)


def test_the_machines_rules_each_do_what_they_are_for(page):
    """The machine's rules in one fixed order: each reaches the state it is for, so that none can quietly
    turn into a rule that does nothing (as Replay did, once it waited for a file the rule never gave)."""
    PageMachine.open_page = staticmethod(page)
    FIRED.clear()
    REACHED.clear()
    machine = PageMachine()
    status = lambda: machine.snap().status.value  # noqa: E731
    machine.begin("1", "from a run")
    assert status() == "running"
    machine.run_button("pause_or_resume")
    assert status() == "paused"
    machine.run_button("step")
    machine.run_button("pause_or_resume")
    assert status() == "running"
    machine.run_button("stop")
    test_app.wait_until_ended(machine.at)  # the run's thread stops between two steps
    assert status() == "stopped"
    machine.run_button("reset")
    assert machine.snap() is None
    machine.data(("replay", "good"))
    assert status() == "running" and machine.snap().run_id in machine.replays
    machine.run_button("stop")
    test_app.wait_until_ended(machine.at)
    machine.data(("replay", "forged-total"))
    machine.data(("upload_csv", "houses"))
    machine.data(("synthetic_data", None))
    for change in (("language", None), ("pace", "max"), ("preset", PRESETS[1]), ("devices", 3)):
        machine.setting(change)
    machine.setting(("strategy", "ddp"))
    machine.poll()
    machine.teardown()
    assert {k: FIRED[k] for k in FIRED if ":" not in k or k.startswith("replay:")} == {
        "from a run": 1, "start": 1, "pause": 1, "step": 1, "resume": 1, "stop": 2, "reset": 1, "replay": 2,
        "replay: replaying": 1, "replay: refused": 1, "upload_csv": 1, "synthetic_data": 1, "language": 1,
        "pace": 1, "preset": 1, "devices": 1, "strategy": 1, "poll": 1,
    }  # fmt: skip
    assert not [k for k in FIRED if k.endswith("not offered")], FIRED


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
        f"Recording: got '{name}.fitrec'; allowed: a fitcore-recording file of version 1 or 2 or 3; {problem}"
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


def test_a_refused_replay_is_told_while_the_controls_hold_an_error(page):
    """With a CSV the run cannot use (a config error shown), a refused recording's line was not shown at
    all: the page showed the config error only, and Replay seemed to do nothing."""
    at = page()
    at.radio(key="data_source").set_value("csv").run()
    at.file_uploader(key="csv_upload").set_value(("semicolons.csv", CSVS["semicolons"], "text/csv")).run()
    config_errors = [e.value for e in at.error]
    assert len(config_errors) == 1 and not config_errors[0].startswith("Recording")
    at.selectbox(key="replay_choice").set_value("upload").run()
    upload = ("forged.fitrec", RECORDINGS["forged-total"], "text/plain")
    at.file_uploader(key="replay_upload").set_value(upload).run()
    at.button(key="replay").click().run()
    errors = [e.value for e in at.error]
    assert errors[0] == config_errors[0] and len(errors) == 2
    assert errors[1].startswith("Recording: got 'forged.fitrec'; allowed: ")
