"""The fitcore dashboard: watch nn.DataParallel (or its CPU emulation) split each batch of y = X·W + b, or
DistributedDataParallel's ranks each train on their own shard of the data.

Run with `streamlit run app.py`. The page holds no training code: it sends start / pause / stop to one
server-wide RunPool and draws the snapshots it reads back.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fitcore import api, i18n, live, strategies
from fitcore.config import MAX_WORKERS, OPTIMIZERS, ConfigError, FitConfig
from fitcore.devices import MAX_VIRTUAL, cuda_gpus
from fitcore.events import Status
from fitcore.pool import RunNotFound, RunPool, server_pool
from fitcore.runner import Snapshot
from fitcore.text import plural
from fitcore.view import controls, quiz, results, status
from fitcore.view.common import Section, escape_markdown, parameter_names

FRONTEND = Path(__file__).parent / "frontend"  # the live view's JavaScript and CSS
# The live view asks the server for news this often (ms): a request costs the server well under a millisecond,
# where a script rerun cost 9-25 ms. A queued run changes only its place in the queue.
POLL_MS, QUEUED_POLL_MS = 400, 1000
# the projected page may ask ten times a second: each answer costs the server about a millisecond
REFRESH_CHOICES = {400: "2.5 times a second", 100: "10 times a second (a projected page)"}
KEEP_RUNS = 5  # earlier runs of this session kept for the loss chart's overlay
PLOT_CONFIG = {"displaylogo": False, "displayModeBar": False}  # no toolbar over a picture on a projector
# Static CSS, no user text in it. One projector screen holds the header, the buttons and the live view with
# the sidebar open or collapsed: the page starts 1.5 rem from the top (Streamlit leaves 6 rem once the sidebar
# is collapsed) under a see-through header, and the element that carries this style takes no room of its own.
PAGE_CSS = (
    "<style data-fitcore>"
    "[data-testid='stMainBlockContainer'] { padding-top: 1.5rem; }"
    "[data-testid='stHeader'] { background: transparent; pointer-events: none; }"
    "[data-testid='stHeader'] * { pointer-events: auto; }"
    "[data-testid='stElementContainer']:has(style[data-fitcore]) { display: none; }"
    "</style>"
)
# widgets that are not always drawn (a hidden widget's value is forgotten by Streamlit unless kept)
KEPT_WIDGETS = ("virtual_devices", "gpus", "workers", "emulate_on")


def get_pool() -> RunPool:
    """One pool for the whole server: every browser session's runs share its cap and queue."""
    return server_pool()


@st.cache_resource(show_spinner=False)
def get_gpus() -> dict:
    """The CUDA GPUs this server sees, by index (empty on a CPU-only machine)."""
    return {g.index: g for g in cuda_gpus()}


# ---------------------------------------------------------------------------------------------------------
# Session state: the owner id, the current run, the last snapshot read, earlier runs, the controls.


def browser_owner() -> str:
    """This browser's owner id: the pool lets it touch its own runs only.

    The live view keeps it in a cookie, so a reloaded or reopened page (same browser) is the same owner and
    finds its runs again; a link opened in another browser has no cookie and gets an owner of its own.
    """
    return api.owner_of(st.context.cookies) or uuid.uuid4().hex


def init_session(gpus: dict) -> None:
    ss = st.session_state
    if "owner" in ss:
        return
    ss.owner = browser_owner()
    ss.run_id = get_pool().latest_run(ss.owner)  # a reloaded page shows its run again
    ss.snap = None  # the last snapshot read: kept when the run ends or the pool drops it
    ss.past = []  # (label, loss history) of this session's earlier runs
    ss.start_error = None
    apply_values(controls.defaults(), gpus)
    ss.device_mode = "virtual"  # "virtual": on the CPU (emulated devices, or CPU processes); "cuda"
    ss.pace = controls.DEFAULT_PACE
    ss.smoothing = 0.0
    ss.overlay = False  # earlier runs only when asked: the current run is the lesson
    ss.refresh_ms = POLL_MS
    if ss.run_id is not None:
        try:
            snap = get_pool().snapshot(ss.owner, ss.run_id)
        except RunNotFound:
            ss.run_id = None
        else:  # without a link, the controls are the run's own, so that they match what is shown
            ss.run_number = get_pool().run_number(ss.owner, ss.run_id)
            apply_values(controls.config_values(snap.config), gpus)
            ss.pace = controls.pace_choice(snap.pace)
    # a link sets the controls (a reload's link is the run's own); bad values are reported, the defaults kept
    values, pace, errors = controls.from_query(st.query_params.to_dict(), list(gpus.values()))
    apply_values(values, gpus)
    if pace is not None:
        ss.pace = pace
    ss.url_errors = [controls.error_text(e) for e in errors]
    init_classroom()


def apply_values(values: dict, gpus: dict) -> None:
    """Set the controls' widgets from typed config values (a preset, a link, the defaults, a run's)."""
    for key, value in controls.widget_values(values, list(gpus.values())).items():
        st.session_state[key] = value


def keep_widget_defaults(gpus: dict) -> None:
    """Streamlit forgets a widget's value while the widget is not drawn: put back a default before drawing."""
    ss = st.session_state
    for i in range(ss.n_features):
        ss.setdefault(f"weight_{i}", 1.0)
    ss.setdefault("virtual_devices", 2)
    ss.setdefault("gpus", sorted(gpus))
    ss.setdefault("workers", FitConfig.workers)
    ss.setdefault("emulate_on", "cpu")
    for key in KEPT_WIDGETS:
        ss[key] = ss[key]  # set through the session, so that switching strategy does not forget it
    if not gpus:
        ss.device_mode, ss.emulate_on = "virtual", "cpu"


def control_values() -> dict:
    """The controls' current values, typed like FitConfig's fields (not yet validated)."""
    return controls.control_values(st.session_state)


def refresh_snapshot() -> Snapshot | None:
    """Read the current run from the pool; keep the last snapshot when the pool no longer has it."""
    ss = st.session_state
    if ss.run_id is None:
        return ss.snap
    try:
        ss.snap = get_pool().snapshot(ss.owner, ss.run_id)
    except RunNotFound:
        ss.run_id = None
        if ss.snap is not None and ss.snap.active:
            message = "the server dropped this run: the page did not read it"
            ss.snap = dataclasses.replace(ss.snap, status=Status.STOPPED, message=message)
    return ss.snap


def archive_current() -> None:
    """Keep the current run's loss curve for the overlay before it is replaced or reset."""
    ss = st.session_state
    snap = ss.snap
    if snap is not None and snap.loss_history:
        label = live.run_title(snap, ss.get("run_number"))
        ss.past = (ss.past + [(label, snap.loss_history)])[-KEEP_RUNS:]


def clear_overlay() -> None:
    st.session_state.past = []


# ---------------------------------------------------------------------------------------------------------
# Callbacks of the run buttons: every action goes through the pool, as this session's owner.


def start_run(gpus: dict) -> None:
    ss = st.session_state
    pool = get_pool()
    ss.start_error, ss.url_errors = None, []
    try:
        cfg = controls.config_from_controls(control_values(), pool.settings.limits, list(gpus.values()))
        snap = pool.submit(ss.owner, cfg, controls.parse_pace(ss.pace))
    except ConfigError as exc:
        ss.start_error = controls.error_text(exc)
        return
    archive_current()
    ss.run_id, ss.snap = snap.run_id, snap
    ss.run_number = pool.run_number(ss.owner, snap.run_id)


def _on_run(action: str) -> None:
    ss = st.session_state
    if ss.run_id is None:
        return
    try:
        getattr(get_pool(), action)(ss.owner, ss.run_id)
    except RunNotFound:
        ss.run_id = None  # already dropped by the pool; the page keeps what it last read
    if action == "step_once" and ss.ask:
        await_step()


def reset_run() -> None:
    ss = st.session_state
    _on_run("forget")
    archive_current()
    ss.run_id, ss.snap, ss.start_error = None, None, None


def pace_changed() -> None:
    """The pace is the one setting a run takes live."""
    ss = st.session_state
    if ss.run_id is not None:
        try:
            get_pool().set_pace(ss.owner, ss.run_id, controls.parse_pace(ss.pace))
        except RunNotFound:
            ss.run_id = None


def preset_chosen() -> None:
    ss = st.session_state
    if ss.preset != "Custom":
        apply_values(controls.config_values(controls.preset(ss.preset).config), get_gpus())
        ss.url_errors = []


# ---------------------------------------------------------------------------------------------------------
# Sidebar: presets and controls.


def presets_ui() -> None:
    ss = st.session_state
    match = controls.matching_preset(control_values())
    ss.preset = match.name if match else "Custom"  # the selectbox follows the controls
    obey(st).selectbox(
        "Preset",
        ["Custom"] + [p.name for p in controls.PRESETS],
        key="preset",
        on_change=preset_chosen,
        help="Sets the controls to a setup that shows one thing.",
    )


def data_controls_ui() -> None:
    st.subheader("Data: y = X·W + b")
    obey(st).number_input(
        "Number of features",
        min_value=1,
        max_value=controls.MAX_FEATURE_CONTROL,
        step=1,
        key="n_features",
        help="Columns of X, one true weight each (a run may use 1 to 16).",
    )
    n = st.session_state.n_features
    cols = st.columns(2)
    for i in range(n):
        with cols[i % 2]:
            obey(st).number_input(f"True w{i + 1}", step=0.1, format="%g", key=f"weight_{i}")
    left, right = map(Obeying, st.columns(2))
    left.number_input("True bias b", step=0.1, format="%g", key="bias")
    right.number_input("Noise (std)", step=0.1, format="%g", key="noise")
    left.number_input("Data size (rows)", step=1, key="data_size")
    right.number_input("Seed", step=1, key="seed")
    obey(st).checkbox("Shuffle the rows every epoch", key="shuffle")


def training_controls_ui() -> None:
    st.subheader("Training")
    left, right = map(Obeying, st.columns(2))
    left.number_input("Batch size", step=1, key="batch_size")
    right.number_input("Epochs", step=1, key="epochs")
    left.number_input("Learning rate", step=0.05, format="%g", key="lr")
    right.selectbox(
        "Optimizer", OPTIMIZERS, key="optimizer", format_func=lambda o: {"adam": "Adam"}.get(o, "SGD")
    )


def strategy_ui() -> None:
    if st.session_state.classroom.hidden("strategy"):
        return
    st.subheader("Strategy")
    obey(st).radio(
        "Strategy",
        strategies.NAMES,
        key="strategy",
        format_func=lambda name: strategies.strategy(name).label,
        label_visibility="collapsed",
        help="DataParallel: one process cuts every batch over the devices. DistributedDataParallel: one "
        "process (rank) per device, each with its own shard of the data.",
    )


def devices_ui(gpus: dict) -> None:
    ss = st.session_state
    processes = strategies.strategy(ss.strategy).processes  # workers on the CPU, one per GPU with CUDA
    if ss.classroom.hidden("devices") and (ss.classroom.hidden("workers") or not processes):
        return
    st.subheader("Devices")
    if gpus:
        on_cpu = "CPU processes" if processes else "Virtual devices"
        obey(st).radio(
            "Run on",
            ["cuda", "virtual"],
            key="device_mode",
            horizontal=True,
            format_func=lambda m: "CUDA GPUs" if m == "cuda" else on_cpu,
        )
    else:
        st.caption("No CUDA GPU on this server.")
    if ss.device_mode == "cuda":
        obey(st).multiselect("GPUs", sorted(gpus), key="gpus", format_func=lambda i: gpus[i].label)
        if processes:
            n = len(ss.gpus)
            st.caption(f"One rank per selected GPU, backend nccl: {plural(n, 'rank')}.")
        else:
            st.caption("Two or more GPUs run the real nn.DataParallel; one GPU runs the model alone.")
    elif processes:
        obey(st).number_input(
            "Workers (ranks)",
            step=1,
            key="workers",
            help=f"1 to {MAX_WORKERS} processes, and at most the data size.",
        )
        st.caption(
            "Each worker is a process of its own on the CPU (spawned, backend gloo) with its own shard of "
            "the data. Starting them takes a few seconds: each one imports torch."
        )
    else:
        obey(st).slider("Virtual devices", 1, MAX_VIRTUAL, key="virtual_devices")
        if gpus:  # one GPU is enough to show the split on real CUDA kernels
            places = ["cpu"] + [f"cuda:{i}" for i in sorted(gpus)]
            obey(st).radio("Replicas run on", places, key="emulate_on", horizontal=True)
        where = "the CPU" if ss.emulate_on == "cpu" else ss.emulate_on
        st.caption(
            f"Emulated on {where}: each batch is split with DataParallel's own rule (tensor.chunk) and the "
            "replicas run in threads on that one device, so nothing runs faster."
        )


def chart_controls_ui() -> None:
    ss = st.session_state
    st.subheader("Charts")
    st.slider("Loss smoothing", 0.0, 0.95, step=0.05, key="smoothing", help="Exponential moving average.")
    st.selectbox(
        "Live refresh",
        list(REFRESH_CHOICES),
        key="refresh_ms",
        format_func=REFRESH_CHOICES.get,
        help="How often this page asks the server for new steps while a run trains.",
    )
    left, right = st.columns([3, 1], vertical_alignment="center")
    left.toggle("Overlay my earlier runs", key="overlay", help=f"The last {KEEP_RUNS} runs of this page.")
    right.button("Clear", key="clear_overlay", on_click=clear_overlay, disabled=not ss.past)


def sidebar_ui(gpus: dict) -> None:
    with st.sidebar:
        presets_ui()
        data_controls_ui()
        training_controls_ui()
        strategy_ui()
        devices_ui(gpus)
        chart_controls_ui()
        classroom_ui()


# ---------------------------------------------------------------------------------------------------------
# Main area: messages, run buttons, live panels, explanation.


def error_ui(text: str) -> None:
    """An error exactly as written: it quotes what the user typed or linked, which must not become Markdown
    (a value like [click me](http://example.com) would otherwise show as a link inside the red box)."""
    st.error(escape_markdown(text))


def messages_ui(values: dict, config_error: str | None) -> None:
    ss = st.session_state
    for text in ss.url_errors:
        error_ui(f"The link had a bad value, so the default is used. {text}")
    if config_error:
        error_ui(config_error)
    elif ss.start_error:
        error_ui(ss.start_error)


def lesson_ui(values: dict) -> None:
    """What the chosen preset shows: below the live view, where it does not push the picture down."""
    match = controls.matching_preset(values)
    if match is not None:
        st.info(f"**{match.name}.** {match.lesson}")


def run_controls_ui(gpus: dict, can_start: bool) -> None:
    snap: Snapshot | None = st.session_state.snap
    active = snap is not None and snap.active
    paused = active and snap.status == Status.PAUSED
    cols = st.columns([1.6, 1.1, 0.9, 0.9, 0.9, 3.0], vertical_alignment="bottom")
    cols[0].button(
        "Start training",
        key="start",
        type="primary",
        disabled=not can_start or active,
        on_click=start_run,
        args=(gpus,),
        width="stretch",
    )
    if paused:
        cols[1].button("Resume", key="resume", on_click=_on_run, args=("resume",), width="stretch")
    else:
        cols[1].button(
            "Pause", key="pause", disabled=not active, on_click=_on_run, args=("pause",), width="stretch"
        )
    cols[2].button(
        "Step",
        key="step",
        disabled=not paused,
        on_click=_on_run,
        args=("step_once",),
        width="stretch",
        help="While paused: run exactly one step, then stay paused.",
    )
    cols[3].button("Stop", key="stop", disabled=not active, on_click=_on_run, args=("stop",), width="stretch")
    cols[4].button("Reset", key="reset", disabled=snap is None, on_click=reset_run, width="stretch")
    # a select box as tall as the buttons, its label inside: the live view starts one row higher
    obey(cols[5]).selectbox(
        "Pace",
        controls.PACE_CHOICES,
        key="pace",
        format_func=lambda choice: f"Pace: {controls.pace_label(choice)}",
        on_change=pace_changed,
        label_visibility="collapsed",
        help="Steps per second; takes effect at once, also during a run. At 5 or fewer, each step's "
        "phases play in order in the picture.",
    )


def differences_ui(snap: Snapshot | None, values: dict) -> None:
    if snap is None:
        return
    diffs = status.config_differences(values, snap.config)
    if not diffs:
        return
    if snap.active:
        st.warning(
            f"The controls differ from {snap.run_id}'s configuration; the run keeps its own, and the "
            "controls apply to the next run. " + escape_markdown("; ".join(diffs))
        )
    else:
        st.caption(f"Shown: {snap.run_id}'s configuration. Changed since: " + "; ".join(diffs))


def section_ui(section: Section) -> None:
    """One of the strategy's panels below the live view, as its view module gives it."""
    if section.title:
        st.subheader(section.title)
    if section.heading:
        st.markdown(f"**{escape_markdown(section.heading)}**")
    if section.figure is not None:  # a figure dict of plotly's names, built in fitcore.view
        st.plotly_chart(
            go.Figure(section.figure), theme=None, config=PLOT_CONFIG, key=f"{section.name}_chart"
        )
    for rows in section.tables:
        table = pd.DataFrame(rows)
        text = {c: str for c in section.text_columns if c in table}
        st.table(table.astype(text), hide_index=True)
    for note in section.notes:
        st.caption(note)


def sections_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> None:
    """The strategy's own panels: the run's, or before any run the controls' strategy's."""
    source = snap if snap is not None else cfg
    if source is None:
        return
    for section in strategies.of(source).view_module.sections(snap, cfg, list(gpus.values())):
        section_ui(section)


def console_ui(snap: Snapshot | None) -> None:
    st.subheader("Console")
    if snap is None or not snap.recent:
        hint = strategies.of(snap if snap is not None else FitConfig()).view_module.CONSOLE_HINT
        st.caption(f"The console shows {hint} for the latest steps.")
        return
    # a tab as 4 spaces keeps the tutorial's lines on one line at the page's width
    st.code(status.console_text(snap).expandtabs(4), language="text", wrap_lines=True)


def results_ui(snap: Snapshot | None) -> None:
    if snap is None or not snap.weights:
        return
    title = "Results" if not snap.active else f"Parameters so far (step {snap.step})"
    st.subheader(title)
    rows = results.results_table(snap)
    table = pd.DataFrame(rows)
    for column in ("Learned", "True", "Least squares"):
        table[column] = table[column].map(lambda v: "" if v is None else f"{v:.4f}")
    for column in ("Learned − true", "Learned − least squares"):
        table[column] = table[column].map(lambda v: "" if v is None else f"{v:+.4f}")
    st.table(table, hide_index=True)
    if snap.final_loss is not None:
        st.caption(f"Loss of the last batch: {snap.final_loss:.6g}")
    if strategies.of(snap).processes:  # each process ends with its own copy of the parameters
        ranks_results_ui(snap)


def ranks_results_ui(snap: Snapshot) -> None:
    """Every rank's own parameters after the last step, which DDP's all-reduce keeps identical."""
    rows = results.final_rows(snap)
    if not rows:
        if not snap.active:
            st.caption("The ranks did not report their final parameters.")
        return
    st.markdown("**Every rank's parameters after the last step**")
    table = pd.DataFrame(rows)
    for name in parameter_names(snap.config.n_features):
        table[name] = table[name].map(lambda v: f"{v:.6f}")
    st.table(table.astype({"Rank": str}), hide_index=True)
    agreement = results.final_agreement(snap)
    (st.success if snap.extra["final"]["identical"] else st.warning)(agreement)


def downloads_ui(snap: Snapshot | None) -> None:
    if snap is None or snap.active or not snap.loss_history:
        return
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        "Download history (CSV)",
        results.history_csv(snap),
        file_name=f"fitcore-{snap.run_id}-history.csv",
        mime="text/csv",
        key="download_csv",
        on_click="ignore",
    )
    right.download_button(
        "Download result (JSON)",
        results.result_json(snap),
        file_name=f"fitcore-{snap.run_id}-result.json",
        mime="application/json",
        key="download_json",
        on_click="ignore",
    )


@st.cache_resource(show_spinner=False)
def live_component():
    """The live view's browser component, registered once per server (fitcore.live says what it reads).

    Its script is frontend/component.js, which imports the view's modules from fitcore's static route.
    """
    return st.components.v2.component(
        "fitcore_live",
        html='<div class="fitcore-live"></div>',
        css=(FRONTEND / "live.css").read_text(encoding="utf-8"),
        js=(FRONTEND / "component.js").read_text(encoding="utf-8"),
    )


def live_data(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> dict:
    """What the live view starts from: the run's whole payload, or before a run the planned first step."""
    ss = st.session_state
    if snap is not None:
        body = live.payload(snap, 0, ss.get("run_number"))
    elif cfg is not None:
        body = live.planned_payload(cfg, list(gpus.values()))
    else:
        body = None
    overlay = []  # earlier runs' losses, copied only when they are shown: up to five whole histories
    if ss.overlay:
        overlay = [{"label": label, "loss": [[s, v] for s, v in history]} for label, history in ss.past]
    return {
        "payload": body,
        "owner": ss.owner,  # kept in a cookie, so that a reload finds this browser's runs again
        "endpoint": api.LIVE_PATH,
        "bye": api.BYE_PATH,
        "assets": api.STATIC_PATH,  # frontend/'s modules
        "plotly": api.plotly_url(),  # the charts' plotly.js, from the same route
        "poll_ms": int(ss.refresh_ms),
        "queued_poll_ms": QUEUED_POLL_MS,
        "smoothing": float(ss.smoothing),
        "overlay": live.json_safe(overlay),
        **classroom_data(snap),
    }


def live_view_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> None:
    """The status, the step picture and the charts: drawn and kept live in the browser.

    While a run trains, the browser asks fitcore's /fitcore/live route for the steps since the last it
    drew; the script reruns only when a control is used or the run's status changes (the component's
    `status` trigger), so a live page costs the server a small JSON answer, not a rerun of this script.
    """
    live_component()(data=live_data(snap, cfg, gpus), key="live", on_status_change=lambda: None)


def below_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict, values: dict) -> None:
    """What is read rather than watched: the lesson, shards, shapes, console, results, downloads."""
    if revealed(snap):  # a pending question's answer is in the lesson, the step's tables and its console
        lesson_ui(values)
    differences_ui(snap, values)
    if revealed(snap):
        sections_ui(snap, cfg, gpus)
        console_ui(snap)
    else:
        st.caption(i18n.t("classroom.quiz.below"))
    results_ui(snap)
    downloads_ui(snap)
    lab_ui(cfg)


def explain_ui(strategy: str) -> None:
    """Every strategy's explanation; a chosen strategy other than the default opens its own (the default's
    is the page's title and first screen)."""
    for s in strategies.STRATEGIES.values():
        with st.expander(s.explanation_title, expanded=s.name == strategy != strategies.DEFAULT):
            st.markdown(s.markdown)


def main() -> None:
    st.set_page_config(page_title="fitcore: how DataParallel splits a batch", layout="wide")
    try:
        pool = get_pool()
    except ConfigError as exc:
        error_ui(f"The server's settings are wrong: {exc}")
        st.stop()
    st.html(PAGE_CSS)  # only a <style>: Streamlit adds it to the page without drawing anything
    gpus = get_gpus()
    init_session(gpus)
    st.session_state.pool = pool  # tests reach the server's pool through the session
    keep_widget_defaults(gpus)
    pin_classroom(gpus)
    refresh_snapshot()
    sidebar_ui(gpus)

    values = control_values()
    try:
        cfg, config_error = (
            controls.config_from_controls(values, pool.settings.limits, list(gpus.values())),
            None,
        )
    except ConfigError as exc:
        cfg, config_error = None, controls.error_text(exc)
    want = controls.to_query(values, st.session_state.pace, page_classroom())
    if st.query_params.to_dict() != {**st.query_params.to_dict(), **want}:
        st.query_params.update(want)  # the link reproduces the setup
    forget_classroom_params(want)

    # one projector screen: a compact header, the buttons, then the live view; what is read comes below
    strategy = st.session_state.strategy
    st.header(strategies.strategy(strategy).title, anchor=False)
    messages_ui(values, config_error)
    run_controls_ui(gpus, can_start=cfg is not None)
    snap = st.session_state.snap
    quiz_ui(snap)
    live_view_ui(snap, cfg, gpus)
    below_ui(snap, cfg, gpus, values)
    explain_ui(strategy)


# ---------------------------------------------------------------------------------------------------------
# The classroom (fitcore.view.controls.Classroom, fitcore.view.quiz): a teacher's link that hides or locks
# controls, the presenter's bigger picture, and a question before a paused step's picture.

STEP_WAIT_S = 3.0  # how long Step waits, in ask mode, for its step, so that the rerun asks about that step


def init_classroom() -> None:
    """The teacher's link: the controls it hides or locks keep the values the page holds now (the link's,
    where it gave them); the presenter and question modes start as the link says."""
    ss = st.session_state
    room, errors = controls.classroom_from_query(st.query_params.to_dict())
    ss.classroom = room
    ss.url_errors += [controls.error_text(e) for e in errors]
    values = control_values()
    ss.pinned = {name: values[name] for name in room.pinned if name in values}
    ss.pinned_pace = ss.pace if room.locked("pace") else None
    ss.presenter, ss.ask = room.presenter, room.ask


def pin_classroom(gpus: dict) -> None:
    """Every run, before the widgets: a hidden or locked control holds the link's value, whatever a preset
    or the session says."""
    ss = st.session_state
    apply_values(ss.pinned, gpus)
    if ss.pinned_pace is not None:
        ss.pace = ss.pinned_pace


class Obeying:
    """A place to draw widgets (st, a column) whose widgets obey the teacher's link, by their key: a hidden
    control's widget is not drawn (its value stays in the session), a locked one's is drawn disabled."""

    def __init__(self, where):
        self._where = where

    def __getattr__(self, name: str):
        draw = getattr(self._where, name)

        def widget(*args, **kwargs):
            room, key = st.session_state.classroom, kwargs.get("key")
            control = controls.control_of(key)
            if control is not None and room.hidden(control):
                return st.session_state.get(key)
            if control is not None and room.locked(control):
                kwargs["disabled"] = True
            return draw(*args, **kwargs)

        return widget


obey = Obeying


def page_classroom() -> controls.Classroom:
    """This page's classroom: the link's hidden and locked controls, the sidebar's two modes."""
    ss = st.session_state
    return dataclasses.replace(ss.classroom, presenter=bool(ss.presenter), ask=bool(ss.ask))


def forget_classroom_params(want: dict) -> None:
    """A mode switched off leaves the link (query_params.update only adds and changes)."""
    for name in controls.CLASSROOM_PARAMS:
        if name not in want and name in st.query_params:
            del st.query_params[name]


def classroom_ui() -> None:
    ss = st.session_state
    st.subheader(i18n.t("classroom.title"))
    st.toggle(i18n.t("classroom.presenter"), key="presenter", help=i18n.t("classroom.presenter.help"))
    st.toggle(i18n.t("classroom.ask"), key="ask", help=i18n.t("classroom.ask.help"))
    if not (ss.classroom.hide or ss.classroom.lock):  # a student's page does not offer to unlock
        teacher_link_ui()


def teacher_link_ui() -> None:
    """The link builder: controls to hide and to lock, and the whole link with the settings as they are."""
    ss = st.session_state
    with st.expander(i18n.t("classroom.builder")):
        hide = st.multiselect(i18n.t("classroom.builder.hide"), controls.CLASSROOM_NAMES, key="teach_hide")
        lock = st.multiselect(i18n.t("classroom.builder.lock"), controls.CLASSROOM_NAMES, key="teach_lock")
        room = controls.Classroom(tuple(hide), tuple(n for n in lock if n not in hide), ss.presenter, ss.ask)
        query = controls.to_query(control_values(), ss.pace, room)
        base = (st.context.url or "").rstrip("/")
        st.code(f"{base}/?{urlencode(query, safe=',:@')}", language=None, wrap_lines=True)
        st.caption(i18n.t("classroom.builder.caption"))


@st.cache_resource(show_spinner=False)
def quiz_scores() -> quiz.Scores:
    """Right answers of every browser on this server, each by its owner id; a page shows its own only."""
    return quiz.Scores()


def current_question(snap: Snapshot | None) -> tuple[str, quiz.Question] | None:
    """In ask mode, a paused run's latest step (the one its picture is about to show) asks a question."""
    ss = st.session_state
    if not ss.ask or snap is None or snap.status != Status.PAUSED or snap.latest is None:
        return None
    question = quiz.question_for(snap.latest, snap.config, snap.devices, snap.extra)
    return None if question is None else (f"{snap.run_id}/{question.step}", question)


def revealed(snap: Snapshot | None) -> bool:
    """False while the step the picture is about to show has a question this browser has not answered."""
    asked = current_question(snap)
    return asked is None or quiz_scores().chosen(st.session_state.owner, asked[0]) is not None


def answer_question(question_id: str, question: quiz.Question, choice: int) -> None:
    quiz_scores().answer(st.session_state.owner, question_id, choice, choice == question.answer)


def await_step() -> None:
    """After Step in ask mode: wait (briefly) for the new step, so the rerun asks about it, not the last."""
    ss = st.session_state
    before = ss.snap.step if ss.snap is not None else 0
    deadline = time.monotonic() + STEP_WAIT_S
    while ss.run_id is not None and time.monotonic() < deadline:
        try:
            snap = get_pool().snapshot(ss.owner, ss.run_id)
        except RunNotFound:
            return
        if snap.step > before or not snap.active:
            return
        time.sleep(0.02)


def quiz_ui(snap: Snapshot | None) -> None:
    """The question about the step the picture is about to show, its choices, then the answer and why."""
    asked = current_question(snap)
    if asked is None:
        return
    question_id, question = asked
    scores, owner = quiz_scores(), st.session_state.owner
    chosen = scores.chosen(owner, question_id)
    with st.container(border=True, key="quiz"):
        st.markdown(f"**{i18n.t('classroom.quiz.title')}** · {escape_markdown(question.text.say())}")
        if chosen is None:
            cols = st.columns(len(question.choices))
            for i, (col, choice) in enumerate(zip(cols, question.choices)):
                col.button(choice.say(), key=f"quiz_choice_{i}", on_click=answer_question,
                           args=(question_id, question, i), width="stretch")  # fmt: skip
        else:
            why = question.explanation.say()
            if chosen == question.answer:
                st.success(escape_markdown(i18n.t("classroom.quiz.right", why=why)))
            else:
                answer = question.choices[question.answer].say()
                st.error(escape_markdown(i18n.t("classroom.quiz.wrong", answer=answer, why=why)))
        right, answered = scores.tally(owner)
        st.caption(i18n.t("classroom.quiz.score", right=right, asked=answered))


def classroom_data(snap: Snapshot | None) -> dict:
    """What the live view needs of the classroom: the presenter's bigger picture, and whether to show
    the step or a veil until its question is answered."""
    asked = current_question(snap)
    return {
        "presenter": bool(st.session_state.presenter),
        "reveal": revealed(snap),
        "ask_step": asked[1].step if asked else None,
        "veil": i18n.t("classroom.quiz.veil"),
    }


# ---------------------------------------------------------------------------------------------------------
# The equivalence lab and the what-if projection (fitcore.compare, fitcore.whatif), below the first screen.

COMPARE_MAX_STEPS = 5_000  # the lab trains in the page's own script run: three models, and more per toggle
WHATIF_STEPS = 50  # steps the what-if measures its starting point on
TOGGLE_LABELS = {"loss_reduction": "Loss reduction"}  # the only toggle a form can get wrong
SOURCES = (
    "Memory: 2 + 2 + 12 bytes a parameter for mixed-precision Adam, partitioned by ZeRO's stages "
    "(Rajbhandari et al., ZeRO, SC 2020). Bytes: ring all-reduce 2(K-1)/K of the gradients (Li et al., "
    "PyTorch DDP, VLDB 2020); ZeRO-3 3(K-1)/K. Time: latency x steps + bytes / bandwidth. The Hugging Face "
    "Ultra-Scale Playbook compares them; docs/scaling.md gives every formula."
)


def lab_ui(cfg: FitConfig | None) -> None:
    """Two questions after a run: does DDP give the same model, and what would 1,024 devices do?"""
    if cfg is None:
        return
    compare_tab, whatif_tab = st.tabs(["Does DDP give the same model?", "What if: 2 to 1,024 devices"])
    with compare_tab:
        compare_ui(cfg)
    with whatif_tab:
        whatif_ui(cfg)


def compare_ui(cfg: FitConfig) -> None:
    from fitcore import compare

    st.caption(
        "One device, DataParallel and DDP trained on the same data, seed and initial parameters. The one "
        "device and DataParallel are fed the very same rows each step: those the DDP ranks hold, in rank "
        "order, without DistributedSampler's padding duplicates, so a difference is the strategy's "
        "arithmetic, not the shuffle. DDP's arithmetic is simulated exactly in this process (a test checks "
        "it against torch's DDP on gloo)."
    )
    cols = st.columns(5)
    reduction = cols[0].selectbox(
        "Loss reduction", compare.LOSS_REDUCTIONS, key="cmp_reduction",
        help="DDP averages the ranks' gradients: a summed loss takes K times smaller steps with SGD.",
    )  # fmt: skip
    drop_last = cols[1].checkbox("drop_last", key="cmp_drop_last", help="DistributedSampler(drop_last=True)")
    no_set_epoch = cols[2].checkbox("No set_epoch", key="cmp_no_set_epoch", help="the same order every epoch")
    per_rank = cols[3].checkbox("Per-rank batch", key="cmp_per_rank", help="every rank takes the batch size")
    scale_lr = cols[4].checkbox("Scale lr by K", key="cmp_scale_lr", help="DDP's learning rate times K")
    if st.button("Compare", key="cmp_run"):
        try:
            toggles = compare.Toggles(reduction, drop_last, not no_set_epoch, per_rank, scale_lr)
            st.session_state.cmp_result = compare.run(cfg, toggles, max_steps=COMPARE_MAX_STEPS)
        except ConfigError as exc:
            st.session_state.cmp_result = None
            label = TOGGLE_LABELS.get(exc.field)
            st.error(exc.named(label) if label else controls.error_text(exc))
    result = st.session_state.get("cmp_result")
    if not result:
        return
    rows = result["results"]
    st.dataframe(
        pd.DataFrame(
            {
                "strategy": [r["strategy"] for r in rows],
                "devices": [r["devices"] for r in rows],
                "max |diff|": [f"{r['max_abs_diff']:.3g}" for r in rows],
                "first step > 1e-5": [r["first_divergent_step"] or "-" for r in rows],
                "engine": [result["config"]["engines"][r["strategy"]] for r in rows],
            }
        ),
        hide_index=True,
        key="cmp_table",
    )
    for r in rows:
        for cause in r["causes"]:
            st.markdown(f"- **{r['strategy']}**: {cause}")
    floor = 1e-12  # a log axis has no 0: identical parameters are drawn at the floor
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": r["strategy"],
            "y": [max(v, floor) for v in r["per_step"]],
        }
        for r in rows
    ]
    layout = {
        "height": 260, "margin": {"l": 50, "r": 10, "t": 10, "b": 40},
        "yaxis": {"type": "log", "title": "max |parameter - one device's|"}, "xaxis": {"title": "step"},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1e-5, "y1": 1e-5,
                    "line": {"dash": "dot", "width": 1}}],
    }  # fmt: skip
    st.plotly_chart(go.Figure(data, layout), config=PLOT_CONFIG, key="cmp_chart")


def whatif_ui(cfg: FitConfig) -> None:
    from fitcore import whatif

    st.caption(
        "One step of this run, measured here, then projected to 2 ... 1,024 devices. Every number in the "
        "table is projected, not measured."
    )
    cols = st.columns(3)
    params = cols[0].select_slider(
        "Model parameters", [3, 1e6, 1e8, 1e9, 7e9, 13e9, 70e9], value=7e9, key="wi_params",
        format_func=lambda p: f"{p:.3g}", help=SOURCES,
    )  # fmt: skip
    link = cols[1].selectbox(
        "Link", list(whatif.LINKS), key="wi_link", format_func=lambda n: whatif.LINKS[n].name,
        help="Bandwidth: the vendors' one-direction peaks; latency: a round figure. " + SOURCES,
    )  # fmt: skip
    memory = cols[2].number_input("Device memory (GB)", 1.0, 10_000.0, 80.0, key="wi_memory")
    if st.button("Measure and project", key="wi_run"):
        try:
            measured = whatif.measure(dataclasses.replace(cfg, strategy="dataparallel"), WHATIF_STEPS)
            st.session_state.wi_measured = measured
        except ConfigError as exc:
            st.error(controls.error_text(exc))
    measured = st.session_state.get("wi_measured")
    if measured is None:
        return
    st.metric(
        "Measured here: compute per step", f"{measured.compute_seconds * 1e6:.0f} µs", help=measured.where
    )
    rows = whatif.table(measured, params, link=link, device_memory=memory * 1e9)
    st.caption(whatif.PROJECTED)
    st.dataframe(
        pd.DataFrame(
            {
                "strategy": [r["name"] for r in rows],
                "devices": [r["devices"] for r in rows],
                "memory / device (GB)": [r["memory_per_device_bytes"] / 1e9 for r in rows],
                "fits": [r["fits"] for r in rows],
                "sent / device (GB)": [_gb(r["comm_bytes_per_device"]) for r in rows],
                "step (ms)": [_ms(r["step_seconds"]) for r in rows],
                "communication share": [r["comm_share"] for r in rows],
                "note": [r["note"] for r in rows],
            }
        ),
        hide_index=True,
        key="wi_table",
    )


def _gb(value: float | None) -> float | None:
    return None if value is None else value / 1e9


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


# Streamlit runs this file as __main__ for every page. `streamlit run app.py` first imports it as `app` to
# find the st.App below: the server that serves the page and fitcore's two routes beside it. A spawned DDP
# rank imports it as __mp_main__ (spawn re-imports the parent's main module) and builds neither.
if __name__ == "__main__":
    main()
elif __name__ == "app":
    app = st.App(__file__, routes=api.routes())
