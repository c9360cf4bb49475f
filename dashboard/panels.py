"""The live view's component and what is read below it: the lesson, the controls' differences from the run,
the strategy's panels, the console, the results and their downloads, the explanations."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard.classroom import classroom_data
from dashboard.state import QUEUED_POLL_MS
from fitcore import api
from fitcore.core import i18n
from fitcore.core.config import Checked, FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.i18n import t
from fitcore.kit import live
from fitcore.protocols import registry
from fitcore.runs.runner import Snapshot
from fitcore.view import controls, results, status
from fitcore.view.common import Section, escape_markdown, parameter_names

FRONTEND = Path(__file__).resolve().parents[1] / "frontend"  # the live view's JavaScript and CSS
PLOT_CONFIG = {"displaylogo": False, "displayModeBar": False}  # no toolbar over a picture on a projector


@st.cache_resource(show_spinner=False)
def live_component():
    """The live view's browser component, registered once per server (fitcore.kit.live says what it reads).

    Its script is frontend/component.js, which imports the view's modules from fitcore's static route.
    """
    return st.components.v2.component(
        "fitcore_live",
        html='<div class="fitcore-live"></div>',
        css=(FRONTEND / "live.css").read_text(encoding="utf-8"),
        js=(FRONTEND / "component.js").read_text(encoding="utf-8"),
    )


@st.cache_resource(show_spinner=False)
def figure_component():
    """A strategy's figure below the live view (frontend/figure.js): drawn with the live view's plotly.js,
    which a fresh page then compiles once, not a second time for st.plotly_chart's own."""
    return st.components.v2.component(
        "fitcore_figure",
        html='<div class="fitcore-figure"></div>',
        js=(FRONTEND / "figure.js").read_text(encoding="utf-8"),
    )


def figure_ui(figure: dict, key: str) -> None:
    """A figure dict of plotly's names (built in fitcore.view), in the page's type and colours."""
    figure_component()(data={"figure": figure, "config": PLOT_CONFIG, **static_urls()}, key=key)


def static_urls() -> dict:
    """Where a browser component finds frontend/'s modules and the charts' plotly.js: fitcore's own route."""
    return {"assets": api.STATIC_PATH, "plotly": api.plotly_url()}


def superseded(snap: Snapshot | None, values: dict) -> bool:
    """An ended live run whose settings the controls no longer hold (a preset chosen, a field changed): the
    live view draws the new settings' planned step instead, and the page calls it the previous run. A
    replay is never superseded: it is shown for its own recorded settings, whatever the sidebar says."""
    if snap is None or snap.active or snap.source_label:
        return False
    return bool(status.config_differences(values, snap.config))


def shown_config(snap: Snapshot | None, values: dict) -> dict:
    """The settings of what the page shows: the run's (a replay's recorded ones too), else the controls'."""
    if snap is None or superseded(snap, values):
        return values
    ran = {f: getattr(snap.config, f) for f in controls.CONTROL_FIELDS}
    return {**values, **ran, "data": snap.config.data}


def shown_plan(snap: Snapshot | None, values: dict, plan: DevicePlan | None) -> DevicePlan | None:
    """The device plan of what the page shows (shown_config's): the run's own, as its start checked it (a
    replay's as its machine had them), else the controls' `plan`, None where they are not valid yet."""
    return plan if snap is None or superseded(snap, values) else snap.plan


def page_title(shown: dict, plan: DevicePlan | None) -> str:
    """The page's heading for what it shows (`plan`: its devices, shown_plan): its strategy's, or, where one
    process runs on one device (`cpu`, `cuda:3`, `virtual:1`, `cuda` on a one-GPU machine; a single GPU's
    recording, say), that nothing is split."""
    strategy = registry.strategy(shown["strategy"])
    if not strategy.processes and plan is not None and len(plan.labels) == 1:
        return t("page.title.one_device")
    return t(strategy.words["title"])


def run_name(number: int | None) -> str:
    """ "Run 3": a run as the page names it to a student (never its internal id)."""
    return t("live.run.title", n=number) if number else t("page.run.this")


def view_settings() -> dict:
    """What every live view starts from, a page's own run or a student's following the teacher's: this
    browser, fitcore's routes, the page's pace and smoothing, its language and words."""
    ss = st.session_state
    return {
        "owner": ss.owner,  # kept in a cookie, so that a reload finds this browser's runs again
        "signed": ss.signature,  # the server's signature of it, kept beside it: its room answers count
        "endpoint": api.LIVE_PATH,
        **static_urls(),
        "poll_ms": int(ss.refresh_ms),
        "queued_poll_ms": QUEUED_POLL_MS,
        "smoothing": float(ss.smoothing),
        "lang": i18n.current(),  # the live route answers in it (poll.js sends it as `&lang=`)
        "texts": i18n.browser_texts(),  # the live view's own words, in that language
    }


def live_data(snap: Snapshot | None, checked: Checked | None, values: dict | None = None) -> dict:
    """What the live view starts from: the run's whole payload, or before a run (or once the controls
    have moved on from an ended one) the planned first step of the controls, as checked."""
    ss = st.session_state
    if values is not None and superseded(snap, values) and checked is not None:
        snap = None  # the new settings' step; the previous run stays in the results below
    if snap is not None:
        body = live.payload(snap, 0, ss.get("run_number"))
    elif checked is not None:
        body = live.planned_payload(checked)
    else:
        body = None
    overlay = []  # earlier runs' losses, copied only when they are shown: up to five whole histories
    if ss.overlay:
        overlay = [{"label": label, "loss": [[s, v] for s, v in history]} for label, history in ss.past]
    return {
        **view_settings(),
        "payload": body,
        "bye": api.BYE_PATH,
        "overlay": live.json_safe(overlay),
        **classroom_data(snap),
    }


def live_view_ui(snap: Snapshot | None, checked: Checked | None, values: dict | None = None) -> None:
    """The status, the step picture and the charts: drawn and kept live in the browser.

    While a run trains, the browser asks fitcore's /fitcore/live route for the steps since the last it
    drew; the script reruns only when a control is used or the run's status changes (the component's
    `status` trigger), so a live page costs the server a small JSON answer, not a rerun of this script.
    """
    live_component()(data=live_data(snap, checked, values), key="live", on_status_change=lambda: None)


def lesson_ui(snap: Snapshot | None, values: dict) -> None:
    """What the preset of the run shown teaches (a replay's own settings, not the sidebar's): below the live
    view, where it does not push the picture down."""
    match = controls.matching_preset(shown_config(snap, values))
    if match is not None:
        st.info(t("page.lesson", title=match.title, lesson=match.lesson))


def differences_ui(snap: Snapshot | None, values: dict) -> None:
    if snap is None:
        return
    diffs = status.config_differences(values, snap.config)
    if not diffs:
        return
    name = run_name(st.session_state.get("run_number"))
    if snap.active:
        listed = escape_markdown("; ".join(diffs))
        st.warning(t("page.differ.active", run=name, diffs=listed))
    elif snap.source_label:
        st.caption(t("page.differ.replay", diffs="; ".join(diffs)))
    else:
        st.caption(t("page.differ.ended", run=name, diffs="; ".join(diffs)))


def section_ui(section: Section) -> None:
    """One of the strategy's panels below the live view, as its view module gives it."""
    if section.title:
        st.subheader(section.title)
    if section.heading:
        st.markdown(f"**{escape_markdown(section.heading)}**")
    if section.figure is not None:
        figure_ui(section.figure, key=f"{section.name}_chart")
    for rows in section.tables:
        table = pd.DataFrame(rows)
        text = {c: str for c in section.text_columns if c in table}
        st.table(table.astype(text), hide_index=True)
    for note in section.notes:
        st.caption(note)


def sections_ui(snap: Snapshot | None, checked: Checked | None) -> None:
    """The strategy's own panels: the run's (on its own devices, Snapshot.plan: a replay's may be another
    machine's GPUs), or before any run the controls' strategy's, on the device plan their check made."""
    cfg, plan = (checked.config, checked.plan) if checked is not None else (None, None)
    source = snap if snap is not None else cfg
    if source is None:
        return
    for section in registry.of(source).view_module.sections(snap, cfg, plan):
        section_ui(section)


def console_ui(snap: Snapshot | None, cfg: FitConfig | None) -> None:
    """The run's console lines, or before its first step what they will be: the run's strategy's, else the
    controls' (`cfg`; the default strategy's while the controls are not valid)."""
    st.subheader(t("page.console"))
    if snap is None or not snap.recent:
        hint = registry.of(snap if snap is not None else cfg or FitConfig()).view_module.CONSOLE_HINT
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
        if column in table:  # a CSV run has no true values, and no true column
            table[column] = table[column].map(lambda v: "" if v is None else f"{v:.4f}")
    for column in ("Learned − true", "Learned − least squares"):
        if column in table:
            table[column] = table[column].map(lambda v: "" if v is None else f"{v:+.4f}")
    st.table(table.rename(columns=results.column_label), hide_index=True)  # the data's names, translated
    if snap.final_loss is not None:
        st.caption(t("page.results.loss", loss=f"{snap.final_loss:.6g}"))
    gap = results.least_squares_gap(snap)  # a run that did not settle: how far, and what would help
    if gap:
        st.warning(gap)
    if registry.of(snap).processes:  # each process ends with its own copy of the parameters
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
        # an upload by its own name: the server's path to it is no one's business
        results.result_json(snap, os.path.basename(snap.config.data) if snap.config.data else None),
        file_name=f"fitcore-{snap.run_id}-result.json",
        mime="application/json",
        key="download_json",
        on_click="ignore",
    )


def explain_ui(strategy: str, snap: Snapshot | None, cfg: FitConfig | None, values: dict) -> None:
    """Every strategy's explanation, its examples on the shown run's sizes (its weights, its ranks: the
    run's, else the controls' where they are valid, else the defaults); the shown strategy's opens where it
    is not the default (the default's is the page's title and first screen)."""
    shown = snap.config if snap is not None and not superseded(snap, values) else cfg
    for s in registry.STRATEGIES.values():
        with st.expander(t(s.words["explain"]), expanded=s.name == strategy != registry.DEFAULT):
            st.markdown(s.markdown(shown))
