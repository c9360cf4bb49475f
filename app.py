"""The fitcore dashboard: watch nn.DataParallel (or its CPU emulation) split each batch of y = X·W + b, or
DistributedDataParallel's ranks each train on their own shard of the data.

Run with `streamlit run app.py`. The page holds no training code: it sends start / pause / stop to one
server-wide RunPool and draws the snapshots it reads back.
"""

from __future__ import annotations

import dataclasses
import os
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
from fitcore.i18n import count, t
from fitcore.pool import RunNotFound, RunPool, server_pool
from fitcore.runner import Snapshot
from fitcore.uploads import server_store
from fitcore.view import controls, datasource, quiz, results, status
from fitcore.view.common import Section, escape_markdown, parameter_names

FRONTEND = Path(__file__).parent / "frontend"  # the live view's JavaScript and CSS
# The live view asks the server for news this often (ms): a request costs the server well under a millisecond,
# where a script rerun cost 9-25 ms. A queued run changes only its place in the queue.
POLL_MS, QUEUED_POLL_MS = 400, 1000
# the projected page may ask ten times a second: each answer costs the server about a millisecond
REFRESH_CHOICES = {400: "page.refresh.normal", 100: "page.refresh.projected"}  # catalog keys
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


def browser_language() -> str:
    """The language the browser asks for (`navigator.language`), English where the catalog lacks it."""
    return i18n.language(st.context.locale) or i18n.DEFAULT


def page_language() -> str:
    """This script run's language: the language control's, or on a session's first run the link's
    `?lang=` and else the browser's."""
    ss = st.session_state
    if ss.get("lang") not in i18n.LANGUAGES:
        ss.lang = i18n.language(st.query_params.get("lang")) or browser_language()
    return ss.lang


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
    return controls.control_values(st.session_state) | data_values()


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
            message = "the server dropped this run: the page did not read it"  # status.message_text reads it
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
        cfg = run_config(control_values(), gpus)
        snap = submit_run(cfg)
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
    ss.preset = match.name if match else "Custom"  # the selectbox follows the controls; names are its ids
    obey(st).selectbox(
        t("page.preset"),
        ["Custom"] + [p.name for p in controls.PRESETS],
        key="preset",
        on_change=preset_chosen,
        format_func=lambda name: t("page.preset.custom") if name == "Custom" else controls.preset(name).title,
        help=t("page.preset.help"),
    )


def language_ui() -> None:
    """English or 中文, each written in its own language; the link keeps the choice (`?lang=`)."""
    st.segmented_control(
        t("language.name"),
        list(i18n.LANGUAGES),
        key="lang",
        format_func=i18n.LANGUAGES.get,
        required=True,
        label_visibility="collapsed",
    )


def data_controls_ui() -> None:
    st.subheader(t("page.data"))
    obey(st).number_input(
        t("page.features"),
        min_value=1,
        max_value=controls.MAX_FEATURE_CONTROL,
        step=1,
        key="n_features",
        help=t("page.features.help"),
    )
    n = st.session_state.n_features
    cols = st.columns(2)
    for i in range(n):
        with cols[i % 2]:
            obey(st).number_input(t("page.weight", i=i + 1), step=0.1, format="%g", key=f"weight_{i}")
    left, right = map(Obeying, st.columns(2))
    left.number_input(t("page.bias"), step=0.1, format="%g", key="bias")
    right.number_input(t("page.noise"), step=0.1, format="%g", key="noise")
    left.number_input(t("page.data_size"), step=1, key="data_size")
    right.number_input(t("page.seed"), step=1, key="seed")
    obey(st).checkbox(t("page.shuffle"), key="shuffle")


def training_controls_ui() -> None:
    st.subheader(t("page.training"))
    left, right = map(Obeying, st.columns(2))
    left.number_input(t("page.batch_size"), step=1, key="batch_size")
    right.number_input(t("page.epochs"), step=1, key="epochs")
    left.number_input(t("page.lr"), step=0.05, format="%g", key="lr")
    right.selectbox(
        t("page.optimizer"), OPTIMIZERS, key="optimizer", format_func=lambda o: {"adam": "Adam"}.get(o, "SGD")
    )


def strategy_ui() -> None:
    if st.session_state.classroom.hidden("strategy"):
        return
    st.subheader(t("page.strategy"))
    obey(st).radio(
        t("page.strategy"),
        strategies.NAMES,
        key="strategy",
        format_func=lambda name: strategies.strategy(name).label,
        label_visibility="collapsed",
        help=t("page.strategy.help"),
    )


def devices_ui(gpus: dict) -> None:
    ss = st.session_state
    processes = strategies.strategy(ss.strategy).processes  # workers on the CPU, one per GPU with CUDA
    if ss.classroom.hidden("devices") and (ss.classroom.hidden("workers") or not processes):
        return
    st.subheader(t("page.devices"))
    if gpus:
        on_cpu = t("page.mode.processes") if processes else t("page.mode.virtual")
        obey(st).radio(
            t("page.run_on"),
            ["cuda", "virtual"],
            key="device_mode",
            horizontal=True,
            format_func=lambda m: t("page.mode.cuda") if m == "cuda" else on_cpu,
        )
    else:
        st.caption(t("page.no_gpu"))
    if ss.device_mode == "cuda":
        obey(st).multiselect("GPUs", sorted(gpus), key="gpus", format_func=lambda i: gpus[i].label)
        if processes:
            n = len(ss.gpus)
            st.caption(t("page.gpu.ranks", ranks=count("view.count.rank", n)))
        else:
            st.caption(t("page.gpu.dataparallel"))
    elif processes:
        obey(st).number_input(
            t("page.workers"),
            step=1,
            key="workers",
            help=t("page.workers.help", most=MAX_WORKERS),
        )
        st.caption(t("page.workers.caption"))
    else:
        obey(st).slider(t("page.mode.virtual"), 1, MAX_VIRTUAL, key="virtual_devices")
        if gpus:  # one GPU is enough to show the split on real CUDA kernels
            places = ["cpu"] + [f"cuda:{i}" for i in sorted(gpus)]
            obey(st).radio(t("page.emulate_on"), places, key="emulate_on", horizontal=True)
        where = t("page.the_cpu") if ss.emulate_on == "cpu" else ss.emulate_on
        st.caption(t("page.emulated", where=where))


def chart_controls_ui() -> None:
    ss = st.session_state
    st.subheader(t("page.charts"))
    st.slider(t("page.smoothing"), 0.0, 0.95, step=0.05, key="smoothing", help=t("page.smoothing.help"))
    st.selectbox(
        t("page.refresh"),
        list(REFRESH_CHOICES),
        key="refresh_ms",
        format_func=lambda ms: t(REFRESH_CHOICES[ms]),
        help=t("page.refresh.help"),
    )
    left, right = st.columns([3, 1], vertical_alignment="center")
    left.toggle(t("page.overlay"), key="overlay", help=t("page.overlay.help", n=KEEP_RUNS))
    right.button(t("page.clear"), key="clear_overlay", on_click=clear_overlay, disabled=not ss.past)


def sidebar_ui(gpus: dict) -> None:
    with st.sidebar:
        language_ui()
        presets_ui()
        if data_source_ui():  # a CSV file: the synthetic data's controls out of the way (the seed applies)
            with st.expander(t("data.synthetic.hidden")):
                data_controls_ui()
        else:
            data_controls_ui()
        training_controls_ui()
        strategy_ui()
        devices_ui(gpus)
        chart_controls_ui()
        replay_ui()
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
        error_ui(t("page.link_error", error=text))
    if config_error:
        error_ui(config_error)
    elif ss.start_error:
        error_ui(ss.start_error)


def lesson_ui(values: dict) -> None:
    """What the chosen preset shows: below the live view, where it does not push the picture down."""
    match = controls.matching_preset(values)
    if match is not None:
        st.info(f"**{match.title}.** {match.lesson}")


def run_controls_ui(gpus: dict, can_start: bool) -> None:
    snap: Snapshot | None = st.session_state.snap
    active = snap is not None and snap.active
    paused = active and snap.status == Status.PAUSED
    cols = st.columns([1.6, 1.1, 0.9, 0.9, 0.9, 3.0], vertical_alignment="bottom")
    cols[0].button(
        t("page.start"),
        key="start",
        type="primary",
        disabled=not can_start or active,
        on_click=start_run,
        args=(gpus,),
        width="stretch",
    )
    if paused:
        cols[1].button(t("page.resume"), key="resume", on_click=_on_run, args=("resume",), width="stretch")
    else:
        cols[1].button(
            t("page.pause"), key="pause", disabled=not active, on_click=_on_run, args=("pause",),
            width="stretch",
        )  # fmt: skip
    cols[2].button(
        t("page.step"),
        key="step",
        disabled=not paused,
        on_click=_on_run,
        args=("step_once",),
        width="stretch",
        help=t("page.step.help"),
    )
    cols[3].button(
        t("page.stop"), key="stop", disabled=not active, on_click=_on_run, args=("stop",), width="stretch"
    )
    cols[4].button(t("page.reset"), key="reset", disabled=snap is None, on_click=reset_run, width="stretch")
    # a select box as tall as the buttons, its label inside: the live view starts one row higher
    obey(cols[5]).selectbox(
        t("page.pace"),
        controls.PACE_CHOICES,
        key="pace",
        format_func=lambda choice: t("page.pace.choice", pace=controls.pace_label(choice)),
        on_change=pace_changed,
        label_visibility="collapsed",
        help=t("page.pace.help"),
    )


def differences_ui(snap: Snapshot | None, values: dict) -> None:
    if snap is None:
        return
    diffs = status.config_differences(values, snap.config)
    if not diffs:
        return
    if snap.active:
        listed = escape_markdown("; ".join(diffs))
        st.warning(t("page.differ.active", run=snap.run_id, diffs=listed))
    else:
        st.caption(t("page.differ.ended", run=snap.run_id, diffs="; ".join(diffs)))


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
    st.subheader(t("page.console"))
    if snap is None or not snap.recent:
        hint = strategies.of(snap if snap is not None else FitConfig()).view_module.CONSOLE_HINT
        st.caption(t("page.console.hint", hint=t(hint)))
        return
    # a tab as 4 spaces keeps the tutorial's lines on one line at the page's width
    st.code(status.console_text(snap).expandtabs(4), language="text", wrap_lines=True)


def results_ui(snap: Snapshot | None) -> None:
    if snap is None or not snap.weights:
        return
    title = t("page.results") if not snap.active else t("page.results.so_far", step=snap.step)
    st.subheader(title)
    rows = results.results_table(snap)
    table = pd.DataFrame(rows)
    for column in ("Learned", "True", "Least squares"):
        table[column] = table[column].map(lambda v: "" if v is None else f"{v:.4f}")
    for column in ("Learned − true", "Learned − least squares"):
        table[column] = table[column].map(lambda v: "" if v is None else f"{v:+.4f}")
    st.table(table.rename(columns=results.column_label), hide_index=True)  # the data's names, translated
    if snap.final_loss is not None:
        st.caption(t("page.results.loss", loss=f"{snap.final_loss:.6g}"))
    if strategies.of(snap).processes:  # each process ends with its own copy of the parameters
        ranks_results_ui(snap)


def ranks_results_ui(snap: Snapshot) -> None:
    """Every rank's own parameters after the last step, which DDP's all-reduce keeps identical."""
    rows = results.final_rows(snap)
    if not rows:
        if not snap.active:
            st.caption(t("page.ranks.missing"))
        return
    st.markdown(f"**{t('page.ranks.title')}**")
    table = pd.DataFrame(rows)
    for name in parameter_names(snap.config.n_features):
        table[name] = table[name].map(lambda v: f"{v:.6f}")
    st.table(table.astype({"Rank": str}).rename(columns=results.column_label), hide_index=True)
    agreement = results.final_agreement(snap)
    (st.success if snap.extra["final"]["identical"] else st.warning)(agreement)


def downloads_ui(snap: Snapshot | None) -> None:
    if snap is None or snap.active or not snap.loss_history:
        return
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        t("page.download.csv"),
        results.history_csv(snap),
        file_name=f"fitcore-{snap.run_id}-history.csv",
        mime="text/csv",
        key="download_csv",
        on_click="ignore",
    )
    right.download_button(
        t("page.download.json"),
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
        "lang": i18n.current(),  # the live route answers in it (poll.js sends it as `&lang=`)
        "texts": i18n.browser_texts("live."),  # the live view's own words, in that language
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
    data_results_ui(snap)
    downloads_ui(snap)
    recording_downloads_ui(snap)
    lab_ui(cfg)


def explain_ui(strategy: str) -> None:
    """Every strategy's explanation; a chosen strategy other than the default opens its own (the default's
    is the page's title and first screen)."""
    for s in strategies.STRATEGIES.values():
        with st.expander(t(f"page.explain.{s.name}"), expanded=s.name == strategy != strategies.DEFAULT):
            st.markdown(s.markdown)


def main() -> None:
    i18n.set_language(page_language())  # every t() of this script run speaks it
    st.set_page_config(page_title=t("page.tab_title"), layout="wide")
    try:
        pool = get_pool()
    except ConfigError as exc:
        error_ui(t("page.server_settings", error=str(exc)))
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
            run_config(values, gpus),
            None,
        )
    except ConfigError as exc:
        cfg, config_error = None, controls.error_text(exc)
    # the link names the language once it is not the browser's own (or the link already named it)
    lang = st.session_state.lang
    keep_lang = "lang" in st.query_params or lang != browser_language()
    want = controls.to_query(
        values, st.session_state.pace, lang=lang if keep_lang else None, classroom=page_classroom()
    )
    if st.query_params.to_dict() != {**st.query_params.to_dict(), **want}:
        st.query_params.update(want)  # the link reproduces the setup
    forget_classroom_params(want)

    # one projector screen: a compact header, the buttons, then the live view; what is read comes below
    strategy = st.session_state.strategy
    st.header(t(f"page.title.{strategy}"), anchor=False)
    messages_ui(values, config_error)
    run_controls_ui(gpus, can_start=cfg is not None)
    snap = st.session_state.snap
    quiz_ui(snap)
    live_view_ui(snap, cfg, gpus)
    below_ui(snap, cfg, gpus, values)
    explain_ui(strategy)


# ---------------------------------------------------------------------------------------------------------
# Your own data and recordings (fitcore.view.datasource): a CSV upload, a replay, the Record and Trace
# downloads. Uploads and the page's recordings are files of this browser's owner in the server's store.

REPLAY_UPLOAD = "upload"  # the replay choice that takes an uploaded file rather than an example
KEEP_RUN_FILES = 8  # runs whose recording, label and data source the page remembers


def data_source_ui() -> bool:
    """The data-source choice; with a CSV file, its upload, columns and preview. True for a CSV file."""
    ss = st.session_state
    st.subheader(t("data.source.title"))
    st.radio(
        t("data.source.title"), datasource.SOURCES, key="data_source", horizontal=True,
        format_func=lambda s: t(f"data.source.{s}"), label_visibility="collapsed",
    )  # fmt: skip
    if ss.data_source != "csv":
        return False
    mb = st.get_option("server.maxUploadSize")
    upload = st.file_uploader(
        t("data.upload.label"), type=["csv"], key="csv_upload", help=t("data.upload.help", mb=mb)
    )
    if upload is not None and upload.file_id != ss.get("csv_file_id"):
        csv_chosen(upload.name, upload.getvalue(), upload.file_id)
    elif upload is None and ss.get("csv_file_id") not in (None, "example"):
        ss.csv_path = ss.csv_file_id = None  # the upload was removed
    st.button(t("data.example.button"), key="csv_example", on_click=csv_example)
    if ss.get("csv_path"):
        csv_columns_ui()
    else:
        st.caption(t("data.no_file"))
    return True


def csv_chosen(name: str, data: bytes, file_id: str) -> None:
    """Keep a new file as this browser's latest upload; its columns are chosen afresh."""
    ss = st.session_state
    ss.csv_path = str(datasource.save_upload(server_store(), ss.owner, name, data))
    ss.csv_file_id, ss.csv_preview = file_id, None
    for key in ("csv_target", "csv_features"):
        ss.pop(key, None)


def csv_example() -> None:
    """The example file, examples/houses.csv, as if it were uploaded."""
    csv_chosen(datasource.EXAMPLE_CSV.name, datasource.EXAMPLE_CSV.read_bytes(), "example")


def csv_columns_ui() -> None:
    """The target and feature columns of the file, standardisation, and its first rows."""
    ss = st.session_state
    path = ss.csv_path
    if ss.get("csv_preview") is None or ss.csv_preview[0] != path:
        try:
            ss.csv_preview = (path, *csvdata_preview(path))
        except ConfigError:
            ss.csv_preview = (path, None, None)  # the run's validation names what is wrong, once
    _, names, rows = ss.csv_preview
    if names is None:
        return
    ss.setdefault("csv_target", names[-1])
    target = st.selectbox(t("data.target.label"), names, key="csv_target")
    options = [n for n in names if n != target]
    kept = [f for f in ss.get("csv_features") or [] if f in options]
    ss.csv_features = kept or datasource.default_features(names, target)
    st.multiselect(
        t("data.features.label", n=datasource.csvdata.MAX_FEATURES), options, key="csv_features",
        max_selections=datasource.csvdata.MAX_FEATURES,
    )  # fmt: skip
    st.checkbox(t("data.standardize.label"), value=True, key="csv_standardize",
                help=t("data.standardize.help"))  # fmt: skip
    fit_batch_to_file()
    st.caption(t("data.preview", n=len(rows), file=os.path.basename(path)))
    st.dataframe(pd.DataFrame(datasource.preview_rows(names, rows)), hide_index=True, key="csv_preview_table")


def csvdata_preview(path: str):
    return datasource.csvdata.preview(path)


def fit_batch_to_file() -> None:
    """A new file of fewer rows than the batch size: one batch, as the command line does."""
    ss = st.session_state
    if ss.get("csv_batch_fitted") == ss.csv_path:
        return
    ss.csv_batch_fitted = ss.csv_path
    try:
        rows = len(datasource.csvdata.load(ss.csv_path, ss.csv_target, tuple(ss.csv_features)).y)
    except ConfigError:
        return
    if ss.batch_size > rows:
        ss.batch_size = rows


def data_values() -> dict:
    """The CSV source's config values, or none for the synthetic data."""
    ss = st.session_state
    if ss.get("data_source") != "csv" or not ss.get("csv_path"):
        return {}
    features = ss.get("csv_features") or []
    return datasource.csv_values(
        ss.csv_path, ss.get("csv_target", ""), features, ss.get("csv_standardize", True)
    )


def run_config(values: dict, gpus: dict) -> FitConfig:
    """The run's config from the controls and the data source; a ConfigError names the control or file."""
    if st.session_state.get("data_source") == "csv" and not values.get("data"):
        raise datasource.field_error(ConfigError("data", "", t("data.need_file")))
    try:
        return controls.config_from_controls(values, get_pool().settings.limits, list(gpus.values()))
    except ConfigError as exc:
        raise datasource.field_error(exc) from None


def remember_run(run_id: str, **info) -> None:
    """What the page keeps of a run: its recording's path, replay label, data source, recorder."""
    ss = st.session_state
    kept = ss.setdefault("run_files", {})
    kept[run_id] = info
    for old in list(kept)[:-KEEP_RUN_FILES]:
        del kept[old]


def submit_run(cfg: FitConfig) -> Snapshot:
    """Start cfg's run through the pool, recorded to a file of this browser's when it is not too long."""
    ss = st.session_state
    listener, made = datasource.recorder_for(server_store(), ss.owner)
    snap = get_pool().submit(ss.owner, cfg, controls.parse_pace(ss.pace), listener=listener)
    remember_run(
        snap.run_id,
        path=made.get("path"),
        recorder=made.get("recorder"),
        label="",
        source=datasource.source_of(snap.config),
        too_long=not datasource.recordable(snap.config),
    )
    return snap  # fmt: skip


def replay_ui() -> None:
    """Replay a recording: an example of this project or an uploaded file, with the live run's controls."""
    ss = st.session_state
    st.subheader(t("data.replay.title"))
    examples = {p.name: p for p in datasource.example_recordings()}
    names = {**{name: name for name in examples}, REPLAY_UPLOAD: t("data.replay.upload_choice")}
    st.selectbox(t("data.replay.choose"), list(names), key="replay_choice", format_func=names.get)
    if ss.replay_choice == REPLAY_UPLOAD:
        mb = datasource.MAX_RECORDING_MB
        st.file_uploader(
            t("data.replay.upload"), type=["fitrec"], key="replay_upload", max_upload_size=mb,
            help=t("data.replay.upload_help", mb=mb),
        )  # fmt: skip
    snap = ss.snap
    st.button(t("data.replay.button"), key="replay", on_click=start_replay,
              disabled=snap is not None and snap.active, help=t("data.replay.help"))  # fmt: skip


def replay_file() -> tuple[str, str]:
    """The chosen recording's path and name: an example, or the upload kept in this browser's store."""
    ss = st.session_state
    if ss.replay_choice != REPLAY_UPLOAD:
        path = datasource.EXAMPLES / ss.replay_choice
        return str(path), path.name
    upload = ss.get("replay_upload")
    if upload is None:
        raise ConfigError("recording", "", t("data.replay.no_file"))
    if ss.get("replay_file_id") != upload.file_id:
        ss.replay_path = str(server_store().save(ss.owner, "fitrec", upload.name, upload.getvalue()))
        ss.replay_file_id = upload.file_id
    return ss.replay_path, upload.name


def start_replay() -> None:
    ss = st.session_state
    ss.start_error, ss.url_errors = None, []
    try:
        path, name = replay_file()
        recording = datasource.read_recording(path, name)
        snap = get_pool().submit_replay(ss.owner, recording, controls.parse_pace(ss.pace))
    except ConfigError as exc:
        ss.start_error = controls.error_text(datasource.field_error(exc))
        return
    archive_current()
    ss.run_id, ss.snap = snap.run_id, snap
    ss.run_number = get_pool().run_number(ss.owner, snap.run_id)
    source = datasource.source_of(snap.config, recording.header)
    remember_run(snap.run_id, path=path, recorder=None, label=recording.label, source=source, too_long=False)


def data_results_ui(snap: Snapshot | None) -> None:
    """A CSV run's parameters in the file's units, against least squares on the raw columns."""
    if snap is None or not snap.weights or not snap.config.data:
        return
    info = st.session_state.get("run_files", {}).get(snap.run_id, {})
    source = info.get("source")
    if not source:
        return
    st.markdown(f"**{t('data.results.title')}**")
    st.caption(escape_markdown(datasource.source_caption(source)))
    table = pd.DataFrame(datasource.file_units_rows(snap, source))
    for column, form in zip(table.columns[1:], ("{:.4f}", "{:.4f}", "{:+.4f}")):
        table[column] = table[column].map(lambda v, f=form: "" if v is None else f.format(v))
    st.table(table, hide_index=True)


def recording_downloads_ui(snap: Snapshot | None) -> None:
    """Record (the run's events, .fitrec) and Trace (Chrome trace JSON) of an ended run."""
    if snap is None or snap.active:
        return
    info = st.session_state.get("run_files", {}).get(snap.run_id)
    if info is None:
        return
    if info.get("too_long"):
        st.caption(t("data.download.too_long", n=datasource.MAX_RECORDED_STEPS))
        return
    path, recorder = info.get("path"), info.get("recorder")
    if not path or (recorder is not None and not recorder.complete) or not os.path.exists(path):
        return
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        t("data.download.record"), data=lambda: _file_bytes(path),
        file_name=datasource.download_name(snap, ".fitrec"), mime="application/x-ndjson",
        key="download_record", on_click="ignore", help=t("data.download.record_help"),
    )  # fmt: skip
    right.download_button(
        t("data.download.trace"), data=lambda: datasource.trace_json(path, info.get("label", "")),
        file_name=datasource.download_name(snap, "-trace.json"), mime="application/json",
        key="download_trace", on_click="ignore", help=t("data.download.trace_help"),
    )  # fmt: skip


def _file_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


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
        name = controls.field_label  # the controls by their labels; the link names them by their fields
        hide = st.multiselect(
            i18n.t("classroom.builder.hide"), controls.CLASSROOM_NAMES, key="teach_hide", format_func=name
        )
        lock = st.multiselect(
            i18n.t("classroom.builder.lock"), controls.CLASSROOM_NAMES, key="teach_lock", format_func=name
        )
        room = controls.Classroom(tuple(hide), tuple(n for n in lock if n not in hide), ss.presenter, ss.ask)
        query = controls.to_query(control_values(), ss.pace, classroom=room)
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
TOGGLE_LABELS = {"loss_reduction": "lab.reduction"}  # the only toggle a form can get wrong: its catalog key


def lab_ui(cfg: FitConfig | None) -> None:
    """Two questions after a run: does DDP give the same model, and what would 1,024 devices do?"""
    if cfg is None:
        return
    compare_tab, whatif_tab = st.tabs([t("lab.compare.tab"), t("lab.whatif.tab")])
    with compare_tab:
        compare_ui(cfg)
    with whatif_tab:
        whatif_ui(cfg)


def compare_ui(cfg: FitConfig) -> None:
    from fitcore import compare

    st.caption(t("lab.compare.caption"))
    cols = st.columns(5)
    reduction = cols[0].selectbox(
        t("lab.reduction"), compare.LOSS_REDUCTIONS, key="cmp_reduction", help=t("lab.reduction.help"),
        format_func=lambda r: t(f"lab.reduction.{r}"),
    )  # fmt: skip
    drop_last = cols[1].checkbox("drop_last", key="cmp_drop_last", help=t("lab.drop_last.help"))
    no_set_epoch = cols[2].checkbox(
        t("lab.no_set_epoch"), key="cmp_no_set_epoch", help=t("lab.no_set_epoch.help")
    )
    per_rank = cols[3].checkbox(t("lab.per_rank"), key="cmp_per_rank", help=t("lab.per_rank.help"))
    scale_lr = cols[4].checkbox(t("lab.scale_lr"), key="cmp_scale_lr", help=t("lab.scale_lr.help"))
    if st.button(t("lab.compare"), key="cmp_run"):
        try:
            toggles = compare.Toggles(reduction, drop_last, not no_set_epoch, per_rank, scale_lr)
            st.session_state.cmp_result = compare.run(cfg, toggles, max_steps=COMPARE_MAX_STEPS)
        except ConfigError as exc:
            st.session_state.cmp_result = None
            label = TOGGLE_LABELS.get(exc.field)
            st.error(exc.named(t(label)) if label else controls.error_text(exc))
    result = st.session_state.get("cmp_result")
    if not result:
        return
    rows = result["results"]
    st.dataframe(
        pd.DataFrame(
            {
                t("lab.col.strategy"): [t(f"lab.strategy.{r['strategy']}") for r in rows],
                t("lab.col.devices"): [r["devices"] for r in rows],
                t("lab.col.max_diff"): [f"{r['max_abs_diff']:.3g}" for r in rows],
                t("lab.col.first_step"): [str(r["first_divergent_step"] or "-") for r in rows],
                t("lab.col.engine"): [result["config"]["engines"][r["strategy"]] for r in rows],
            }
        ),
        hide_index=True,
        key="cmp_table",
    )
    for r in rows:
        for cause in r["causes"]:
            st.markdown(t("lab.cause", strategy=t(f"lab.strategy.{r['strategy']}"), cause=cause))
    floor = 1e-12  # a log axis has no 0: identical parameters are drawn at the floor
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": t(f"lab.strategy.{r['strategy']}"),
            "y": [max(v, floor) for v in r["per_step"]],
        }
        for r in rows
    ]
    layout = {
        "height": 260, "margin": {"l": 50, "r": 10, "t": 10, "b": 40},
        "yaxis": {"type": "log", "title": t("lab.chart.y")}, "xaxis": {"title": t("lab.chart.x")},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1e-5, "y1": 1e-5,
                    "line": {"dash": "dot", "width": 1}}],
    }  # fmt: skip
    st.plotly_chart(go.Figure(data, layout), config=PLOT_CONFIG, key="cmp_chart")


def whatif_ui(cfg: FitConfig) -> None:
    from fitcore import whatif

    st.caption(t("lab.whatif.caption"))
    cols = st.columns(3)
    params = cols[0].select_slider(
        t("lab.params"), [3, 1e6, 1e8, 1e9, 7e9, 13e9, 70e9], value=7e9, key="wi_params",
        format_func=lambda p: f"{p:.3g}", help=t("lab.sources"),
    )  # fmt: skip
    link = cols[1].selectbox(
        t("lab.link"), list(whatif.LINKS), key="wi_link", format_func=lambda n: whatif.LINKS[n].name,
        help=t("lab.link.help", sources=t("lab.sources")),
    )  # fmt: skip
    memory = cols[2].number_input(t("lab.memory"), 1.0, 10_000.0, 80.0, key="wi_memory")
    if st.button(t("lab.measure"), key="wi_run"):
        try:
            measured = whatif.measure(dataclasses.replace(cfg, strategy="dataparallel"), WHATIF_STEPS)
            st.session_state.wi_measured = measured
        except ConfigError as exc:
            st.error(controls.error_text(exc))
    measured = st.session_state.get("wi_measured")
    if measured is None:
        return
    st.metric(
        t("lab.measured"), f"{measured.compute_seconds * 1e6:.0f} µs", help=measured.where
    )
    rows = whatif.table(measured, params, link=link, device_memory=memory * 1e9)
    st.caption(t("lab.projected"))
    st.dataframe(
        pd.DataFrame(
            {
                t("lab.col.strategy"): [t("lab.ring") if r["strategy"] == "ddp" else r["name"] for r in rows],
                t("lab.col.devices"): [r["devices"] for r in rows],
                t("lab.col.memory"): [r["memory_per_device_bytes"] / 1e9 for r in rows],
                t("lab.col.fits"): [r["fits"] for r in rows],
                t("lab.col.sent"): [_gb(r["comm_bytes_per_device"]) for r in rows],
                t("lab.col.step"): [_ms(r["step_seconds"]) for r in rows],
                t("lab.col.share"): [r["comm_share"] for r in rows],
                t("lab.col.note"): [r["note"] for r in rows],
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
