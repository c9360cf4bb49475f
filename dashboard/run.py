"""The messages above the live view and the run buttons: start, pause or resume, step, stop, reset, the pace.

Every action goes through the server's pool, as this session's owner.
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard.classroom import obey
from dashboard.data import run_config, submit_run
from dashboard.state import archive_current, control_values, get_pool, run_dropped
from fitcore.core.config import ConfigError
from fitcore.core.events import Status
from fitcore.core.i18n import t
from fitcore.runs.pool import RunNotFound
from fitcore.runs.runner import Snapshot
from fitcore.view import controls
from fitcore.view.common import escape_markdown

# how long Pause and Step wait for the run to hold, so that the rerun draws a paused run's buttons (and, in
# ask mode, asks about the step that Step ran): a step under way ends first, and meanwhile the run says it is
# running
HOLD_WAIT_S = 3.0


def error_ui(text: str) -> None:
    """An error exactly as written: it quotes what the user typed or linked, which must not become Markdown
    (a value like [click me](http://example.com) would otherwise show as a link inside the red box)."""
    st.error(escape_markdown(text))


def messages_ui(values: dict, config_error: str | None) -> None:
    ss = st.session_state
    if ss.run_gone:  # once, above the buttons, until Start or Replay runs something again
        st.warning(t("page.run_gone"))
    for text in ss.url_errors:
        error_ui(t("page.link_error", error=text))
    notices_ui()
    if config_error:
        error_ui(config_error)
    if ss.start_error and ss.start_error != config_error:  # a refused replay, whatever the controls hold
        error_ui(ss.start_error)


def notices_ui() -> None:
    """What the page says that no link value caused: a room closed (calm), a room not opened (an error)."""
    for kind, text in st.session_state.notices:
        if kind == "info":
            st.info(text)
        else:
            error_ui(text)


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


def start_run(gpus: dict) -> None:
    ss = st.session_state
    pool = get_pool()
    ss.start_error, ss.url_errors, ss.notices, ss.run_gone = None, [], [], False
    try:
        snap = submit_run(run_config(control_values(), gpus))
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
        run_dropped()  # already dropped by the pool: shown stopped, saying why, not as running or Ready
    if action in ("pause", "step_once"):
        await_hold(stepped=action == "step_once")


def await_hold(stepped: bool) -> None:
    """After Pause or Step: wait (briefly) for the step under way, or the one Step let through, to end and the
    run to hold, so that the rerun shows Resume and Step, and asks about that step."""
    ss = st.session_state
    before = ss.snap.step if ss.snap is not None else 0
    deadline = time.monotonic() + HOLD_WAIT_S
    while ss.run_id is not None and time.monotonic() < deadline:
        try:
            snap = get_pool().snapshot(ss.owner, ss.run_id)
        except RunNotFound:
            return
        if (snap.status == Status.PAUSED and (snap.step > before or not stepped)) or not snap.active:
            return
        time.sleep(0.02)


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
