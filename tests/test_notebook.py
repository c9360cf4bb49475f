"""fitcore.notebook: the live view as a widget. Its bundle of frontend/'s modules, its config from keyword
arguments, what it pushes to the view (every step once, throttled, the run's end last), its buttons, its
words, and a bad argument as one line. The widget is driven here without a kernel: what it sends is
collected where the view would receive it (tests/test_browser_notebook.py runs it in JupyterLab)."""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import FrozenInstanceError, replace

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore.core import i18n
from fitcore.core.config import FitConfig, check
from fitcore.core.paths import FRONTEND
from fitcore.notebook import bundle
from fitcore.notebook.widget import ACTIONS, MAX_ERROR_CHARS, MAX_UPDATES_PER_S, Live


def collected(live: Live) -> list[dict]:
    """The messages `live` sends its views from now on."""
    sent: list[dict] = []
    live.send = lambda content, buffers=None: sent.append({**content, "buffers": buffers})
    return sent


def payloads(sent: list[dict]) -> list[dict]:
    return [m for m in sent if m["type"] == "payload"]


def loss_steps(sent: list[dict]) -> list[int]:
    """The steps of every loss point the view received, in the order received."""
    return [s for m in payloads(sent) for s, _ in (m["payload"] or {}).get("loss", [])]


# ---------------------------------------------------------------- the bundle


def test_the_bundle_holds_every_module_the_widget_needs_each_after_its_imports():
    names = bundle.order()
    assert names[-1] == "widget.js" and len(names) == len(set(names))
    for i, name in enumerate(names):
        for dep in bundle.imports((FRONTEND / name).read_text(encoding="utf-8")):
            assert dep in names[:i], f"{name} imports {dep} before it is made"
    # the view's whole set: the page's entry, mount.js, needs exactly these besides the widget's own
    assert set(names) - {"widget.js"} == set(bundle.order(entry="mount.js"))
    text = bundle.build()
    sources = json.loads(re.search(r"^const SOURCES = (.*);$", text, re.M).group(1))
    assert sources == {n: (FRONTEND / n).read_text(encoding="utf-8") for n in names}  # each module unchanged
    assert json.loads(re.search(r"^const ORDER = (.*);$", text, re.M).group(1)) == names


def test_the_bundle_refuses_an_import_its_rewrite_would_miss_and_a_circle(tmp_path):
    (tmp_path / "widget.js").write_text('import "./side.js";\nexport default {};\n')
    with pytest.raises(bundle.BundleError, match="relative import"):
        bundle.order(tmp_path)
    (tmp_path / "widget.js").write_text('import { a } from "./a.js";\nexport default {};\n')
    (tmp_path / "a.js").write_text('import { w } from "./widget.js";\nexport const a = 1;\n')
    with pytest.raises(bundle.BundleError, match="widget.js -> a.js -> widget.js"):
        bundle.order(tmp_path)


def test_the_css_is_the_pages_own_with_the_widgets_rules():
    assert bundle.styles() == (FRONTEND / "live.css").read_text(encoding="utf-8")
    assert ".fl-nb-error" in bundle.styles() and ".fl-root" in bundle.styles()


# ---------------------------------------------------------------- the config


def test_keyword_arguments_are_the_configs_fields_checked_as_the_cli_checks_them():
    live = Live(weights=[5.2, 9.6, -1.0], devices="virtual:3", epochs=7)
    assert live.error == ""
    assert live.config == check(FitConfig(weights=(5.2, 9.6, -1.0), devices="virtual:3", epochs=7)).config
    over = Live(FitConfig(epochs=5, lr=0.1), epochs=9)  # a config, with arguments on top
    assert (over.config.epochs, over.config.lr) == (9, 0.1)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"epochs": -3}, "epochs"),
        ({"epoch": 3}, "epoch"),  # no such field: the fields are listed, cut to a readable length
        ({"weights": []}, "weights"),
        ({"epochs": 7 * 10**4300}, "epochs"),  # too long to print whole
        ({"strategy": "zero"}, "strategy"),
        ({"strategy": "tp", "workers": 3}, "workers"),
        ({"pace": -1}, "pace"),  # the widget's own arguments too
        ({"pace": "fast"}, "pace"),
        ({"pace": float("nan")}, "pace"),
        ({"lang": "fr"}, "lang"),  # torch.chunk gives 2 features to 1 or 2 ranks
    ],
)
def test_a_bad_argument_is_one_line_in_the_widget_and_start_refuses_it(values, named):
    live = Live(**values)
    sent = collected(live)
    assert live.config is None
    assert live.error.startswith(f"{named}:") and "\n" not in live.error
    assert len(live.error) <= MAX_ERROR_CHARS
    with pytest.raises(ValueError, match=re.escape(live.error)):
        live.start()
    live._on_message(live, {"type": "control", "action": "start"}, [])  # the widget's Start: nothing runs
    assert live.snapshot() is None
    live._on_message(live, {"type": "hello"}, [])
    assert payloads(sent) == [{"type": "payload", "payload": None, "replace": True, "buffers": None}]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field=st.sampled_from([f for f in FitConfig.__dataclass_fields__ if f != "data"] + ["pace", "lang"]),
    value=st.one_of(
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=300),
        st.booleans(),
        st.none(),
        st.lists(st.floats(allow_nan=True), max_size=40),
        st.binary(max_size=20),
    ),
)
def test_any_keyword_value_is_a_config_or_one_line(field, value):
    live = Live(**{field: value})
    assert (live.config is None) == bool(live.error)
    assert "\n" not in live.error and len(live.error) <= MAX_ERROR_CHARS
    live.close()


# ---------------------------------------------------------------- what the view receives


def test_a_run_reaches_least_squares_and_the_view_receives_every_step_once_then_its_end():
    live = Live(epochs=200, pace=None)
    sent = collected(live)
    snap = live.run(timeout=60)
    assert snap.status.value == "finished" and snap.step == 200
    assert max(abs(w - ls) for w, ls in zip(snap.weights, snap.lstsq_weights)) < 1e-3
    assert abs(snap.bias - snap.lstsq_bias) < 1e-3
    assert loss_steps(sent) == list(range(1, 201))  # each step once, in order: none dropped, none twice
    first, last = payloads(sent)[0], payloads(sent)[-1]
    assert first["replace"] is True and first["payload"]["run"]["status"] == "running"
    assert last["payload"]["run"]["status"] == "finished" and last["payload"]["picture"]["step"] == 200
    assert live.pushes == len(payloads(sent))


def test_a_fast_run_is_pushed_at_most_max_updates_a_second_and_still_whole():
    live = Live(epochs=3000, pace=None)
    sent = collected(live)
    began = time.monotonic()
    snap = live.run(timeout=120)
    elapsed = time.monotonic() - began
    assert snap.step == 3000
    assert len(payloads(sent)) <= MAX_UPDATES_PER_S * elapsed + 3  # the start, the end and one spare
    # the run keeps about 2,000 points a series (fitcore.runs.runner.History thins them past that, and the
    # page's charts get the same): the view received each point once, in order, every point the run still
    # keeps, and the last step
    steps = loss_steps(sent)
    assert steps == sorted(set(steps)) and steps[-1] == 3000
    assert {s for s, _ in snap.loss_history} <= set(steps)
    assert payloads(sent)[-1]["payload"]["picture"]["step"] == 3000


def test_pause_holds_the_step_step_moves_one_and_stop_ends_the_run():
    live = Live(epochs=2000, pace=50)
    sent = collected(live)
    press = lambda action: live._on_message(live, {"type": "control", "action": action}, [])  # noqa: E731
    press("start")
    deadline = time.monotonic() + 30
    while live.snapshot().step < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    press("pause")
    held = live.snapshot().step
    time.sleep(0.5)
    assert live.snapshot().status.value == "paused"
    assert live.snapshot().step - held <= 1  # a step already on its way finishes, no more
    held = live.snapshot().step
    press("step")
    while live.snapshot().step == held and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert live.snapshot().step == held + 1 and live.snapshot().status.value == "paused"
    press("stop")
    snap = live.wait(30)
    assert snap.status.value == "stopped"
    assert payloads(sent)[-1]["payload"]["run"]["status"] == "stopped"
    assert loss_steps(sent) == list(range(1, snap.step + 1))


def test_the_pace_set_while_a_run_trains_is_the_runs_at_once_and_a_bad_one_changes_nothing():
    """`live.pace = None` in a cell speeds up the run under way, as the page's pace control does; a bad pace
    raises one line and leaves the run's pace as it was."""
    live = Live(epochs=300, pace=5)  # 300 steps at 5 a second: a minute, unless the pace changes
    collected(live)
    live.start()
    deadline = time.monotonic() + 30
    while live.snapshot().step < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(ValueError, match=r"^pace: got -1; allowed: ") as bad:
        live.pace = -1
    assert "\n" not in str(bad.value) and live.pace == 5 and live.snapshot().pace == 5
    live.pace = None
    assert live.snapshot().pace is None
    snap = live.wait(30)
    assert snap.status.value == "finished" and snap.step == 300  # in seconds, not the minute pace 5 takes
    live.pace = 20
    assert live.pace == 20 and live.snapshot().pace == 20  # the ended run's, and the next Start's


def test_a_new_view_gets_the_whole_run_and_reset_brings_back_the_planned_step():
    live = Live(epochs=20, pace=None)
    sent = collected(live)
    live._on_message(live, {"type": "hello"}, [])
    planned = payloads(sent)[-1]
    assert planned["replace"] and planned["payload"]["run"]["status"] == "ready"
    assert planned["payload"]["picture"]["planned"] is True and planned["payload"]["loss"] == []
    live.run(timeout=60)
    live._on_message(live, {"type": "hello"}, [])
    whole = payloads(sent)[-1]
    assert whole["replace"] and [s for s, _ in whole["payload"]["loss"]] == list(range(1, 21))
    live._on_message(live, {"type": "control", "action": "reset"}, [])
    assert payloads(sent)[-1]["payload"]["run"]["id"] is None and live.snapshot() is None


def test_plotly_is_sent_once_asked_as_a_buffer_never_as_synced_state():
    live = Live()
    sent = collected(live)
    live._on_message(live, {"type": "plotly"}, [])
    (message,) = sent
    assert message["type"] == "plotly" and len(message["buffers"]) == 1
    assert len(message["buffers"][0]) > 1_000_000 and b"plotly" in message["buffers"][0][:2000]
    assert all(
        len(json.dumps(getattr(live, name))) < 50_000 for name in ("lang", "texts", "labels", "error", "note")
    )


def test_unknown_messages_and_actions_do_nothing():
    live = Live(epochs=5, pace=None)
    sent = collected(live)
    for content in (
        {"type": "control", "action": "close"},
        {"type": "control"},
        {"type": "x"},
        "start",
        None,
        [],
    ):
        live._on_message(live, content, [])
    assert sent == [] and live.snapshot() is None


def test_the_words_follow_the_language_the_buttons_are_the_pages_own():
    live = Live(lang="zh")
    assert live.labels == {
        a: i18n.t(f"page.{a}", lang="zh") for a in ("start", "pause", "resume", "step", "stop", "reset")
    }
    assert live.texts == i18n.browser_texts(lang="zh")
    live.lang = "en"
    assert live.labels["start"] == i18n.t("page.start", lang="en")
    assert live.texts == i18n.browser_texts(lang="en")
    assert Live(lang="fr").lang == "en" and Live(lang="fr").error == "lang: got 'fr'; allowed: en, zh"
    assert Live(lang="zh", epochs=-3).error.startswith("epochs：")  # the error in the widget's language too


def test_a_push_that_fails_is_one_line_in_the_widget_not_a_traceback_in_a_cell(monkeypatch):
    live = Live(epochs=50, pace=None)
    collected(live)
    monkeypatch.setattr(
        "fitcore.kit.live.payload", lambda snap, since: (_ for _ in ()).throw(KeyError("picture"))
    )
    live.start()
    live.wait(30)
    deadline = time.monotonic() + 5
    while not live.error and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (
        live.error == i18n.t("notebook.push_failed", error="KeyError: 'picture'") and "\n" not in live.error
    )
    assert "Traceback" in live.last_traceback


def test_colab_is_told_to_run_in_the_cell(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert Live().note == i18n.t("notebook.colab")
    monkeypatch.delitem(sys.modules, "google.colab")
    assert Live().note == ""


def test_without_the_extra_the_import_says_what_to_install(monkeypatch):
    import fitcore.notebook

    monkeypatch.delitem(sys.modules, "fitcore.notebook.widget")
    monkeypatch.setitem(sys.modules, "anywidget", None)  # as if not installed
    with pytest.raises(ImportError, match=re.escape('pip install "fitcore[notebook]"')):
        fitcore.notebook.Live  # noqa: B018


def test_a_closed_widget_leaves_no_run_training():
    live = Live(epochs=5000, pace=20)
    collected(live)
    live.start()
    live.close()
    snap = live.wait(30)
    assert snap.status.value == "stopped" and snap.step < 5000


def test_the_config_is_frozen_and_replace_makes_another():
    live = Live(epochs=3)
    with pytest.raises(FrozenInstanceError):
        live.config.epochs = 4  # type: ignore[misc]
    assert Live(replace(live.config, epochs=4)).config.epochs == 4


# ---------------------------------------------------------------- the lesson, executed


@pytest.mark.slow
def test_the_lesson_notebook_runs_and_every_strategy_meets_least_squares():
    """examples/lesson.ipynb, every cell in a fresh kernel (nbclient), as fast as it trains; its outputs are
    not kept in the repository (each cell's saved outputs are empty)."""
    import nbclient

    from benchmarks.notebook_host import LESSON, lesson

    saved = nbformat.read(LESSON, as_version=4)
    code = [c for c in saved.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and not c.get("execution_count") for c in code)
    nb = lesson(None)
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "finished after 200 steps" in text
    assert "learned W, b: [5.2002, 9.5999] 3.4001" in text and "least squares: [5.2, 9.6] 3.4" in text
    for strategy in ("dataparallel", "ddp", "fsdp", "tp"):
        assert f"{strategy}: W = [5.2002, 9.5999], largest gap to least squares 1.7e-04" in text
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]  # fmt: skip
    assert len(widgets) == 4  # the lesson's Live and the three strategies' own
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


VIEW_MESSAGES = JSON | st.fixed_dictionaries(
    {"type": st.sampled_from(["control", "hello", "plotly", "payload"])},
    optional={"action": st.sampled_from([*ACTIONS, "close", "", "START"]) | JSON},
)


@settings(max_examples=150, deadline=None)
@given(content=VIEW_MESSAGES)
def test_whatever_a_view_sends_nothing_raises_and_only_a_known_button_acts(content):
    live = Live(epochs=3, pace=None)
    sent = collected(live)
    live._on_message(live, content, [])  # a view's message is the one input a page (or a script) controls
    kind = content.get("type") if isinstance(content, dict) else None
    action = content.get("action") if isinstance(content, dict) else None
    if kind == "control" and action == "start":
        assert live.wait(30).status.value == "finished"
    else:
        assert live.snapshot() is None
    assert all(m["type"] in ("payload", "plotly") for m in sent)
