"""The fitcore dashboard: watch nn.DataParallel (or its CPU emulation) split each batch of y = X·W + b, or
DistributedDataParallel's ranks each train on their own shard of the data.

Run with `streamlit run app.py`. The page holds no training code: it sends start / pause / stop to one
server-wide RunPool and draws the snapshots it reads back. This file is the page's flow; its panels are
dashboard/'s modules: the session, the sidebar, the run buttons, the panels, the lab, your data, the
classroom.
"""

from __future__ import annotations

import streamlit as st

from dashboard import classroom, data, follower, lab, panels, run, sidebar, state
from fitcore import api, serve
from fitcore.core import i18n
from fitcore.core.config import Checked, ConfigError
from fitcore.core.i18n import t
from fitcore.runs.runner import Snapshot
from fitcore.view import controls, link

# Static CSS, no user text in it. One projector screen holds the header, the buttons and the live view with
# the sidebar open or collapsed: the page starts 1.5 rem from the top (Streamlit leaves 6 rem once the sidebar
# is collapsed) under a see-through header, and the element that carries this style takes no room of its own.
PAGE_CSS = (
    "<style data-fitcore>"
    "[data-testid='stMainBlockContainer'] { padding-top: 1.5rem; }"
    "[data-testid='stHeader'] { background: transparent; pointer-events: none; }"
    # the header lies over the buttons once the heading gives its room: only its menu and the sidebar's
    # opener take clicks (the status widget's own Stop and Rerun would, over our Stop and Reset)
    "[data-testid='stHeader'] * { pointer-events: none !important; }"
    "[data-testid='stMainMenu'], [data-testid='stMainMenu'] *, [data-testid='stExpandSidebarButton'],"
    " [data-testid='stExpandSidebarButton'] * { pointer-events: auto !important; }"
    "[data-testid='stElementContainer']:has(style[data-fitcore]) { display: none; }"
    # Start is shown once the live view has its charts' library (frontend/charts.js says fitcore-ready):
    # its 0.7 s of compiling would hold a Start pressed meanwhile; after 4 s it is shown regardless
    ".st-key-start { visibility: hidden; animation: fl-shown 0s linear 4s forwards; }"
    "body.fitcore-ready .st-key-start { visibility: visible; animation: none; }"
    "@keyframes fl-shown { to { visibility: visible; } }"
    # a short screen (a 1280x720 projector) gives the heading's room to the live view's picture and charts:
    # the status line, the picture's title and the tab's title still say what runs
    "@media (max-height: 800px) {"
    "[data-testid='stLayoutWrapper']:has(> .st-key-page_title), .st-key-page_title { display: none; }"
    "}"
    "</style>"
)
# The presenter on a short projector screen (1280x720): the main column gives its wide side margins to the
# live view, so that the charts are tall enough to read from the back row.
PRESENTER_CSS = (
    "<style data-fitcore>"
    "@media (max-height: 800px) {"
    "[data-testid='stMainBlockContainer'] { padding-left: 2rem; padding-right: 2rem; }"
    "}"
    "</style>"
)


def below_ui(snap: Snapshot | None, checked: Checked | None, values: dict) -> None:
    """What is read rather than watched: the lesson, shards, shapes, console, results, downloads."""
    # a pending question's answer is in the lesson, the step's tables and its console
    if classroom.revealed(snap):
        panels.lesson_ui(snap, values)
    panels.differences_ui(snap, values)
    if classroom.revealed(snap):
        panels.sections_ui(snap, checked)
        panels.console_ui(snap, checked.config if checked is not None else None)
    else:
        st.caption(i18n.t("classroom.quiz.below"))
    panels.results_ui(snap)
    data.data_results_ui(snap)
    panels.downloads_ui(snap)
    data.recording_downloads_ui(snap)
    lab.lab_ui(checked)


def main() -> None:
    i18n.set_language(state.page_language())  # every t() of this script run speaks it
    st.set_page_config(page_title=t("page.tab_title"), layout="wide")
    try:
        pool = state.get_pool()
    except ConfigError as exc:
        run.error_ui(t("page.server_settings", error=str(exc)))
        st.stop()
    st.html(PAGE_CSS)  # only a <style>: Streamlit adds it to the page without drawing anything
    gpus = state.get_gpus()
    if state.init_session(gpus):  # a new session: the link's room, once
        classroom.join_link_room()
    st.session_state.pool = pool  # tests reach the server's pool through the session
    if st.session_state.get("presenter"):
        st.html(PRESENTER_CSS)
    code = classroom.following()
    if code is not None:  # a room's student: the teacher's run, followed; nothing of its own
        follower.follower_ui(code)
        return
    state.keep_widget_defaults(gpus)
    state.pin_classroom(gpus)
    state.refresh_snapshot()
    sidebar.sidebar_ui(gpus)

    values = state.control_values()
    try:  # the controls checked once: their config and its device plan, which the panels draw
        checked, config_error = data.run_config(values, gpus), None
    except ConfigError as exc:
        checked, config_error = None, controls.error_text(exc)
    cfg, plan = (checked.config, checked.plan) if checked is not None else (None, None)
    # the link names the language once it is not the browser's own (or the link already named it)
    lang = st.session_state.lang
    keep_lang = "lang" in st.query_params or lang != state.browser_language()
    want = link.to_query(
        values, st.session_state.pace, lang=lang if keep_lang else None, classroom=classroom.page_classroom()
    )
    if st.query_params.to_dict() != {**st.query_params.to_dict(), **want}:
        st.query_params.update(want)  # the link reproduces the setup
    classroom.forget_classroom_params(want)

    # one projector screen: a compact header, the buttons, then the live view; what is read comes below.
    # The words follow the run shown (a replay's strategy, not the sidebar's)
    snap = st.session_state.snap
    shown = panels.shown_config(snap, values)
    strategy = shown["strategy"]
    with st.container(key="page_title"):
        st.header(panels.page_title(shown, panels.shown_plan(snap, values, plan)), anchor=False)
    run.messages_ui(values, config_error)
    run.run_controls_ui(gpus, can_start=cfg is not None)
    snap = st.session_state.snap  # the buttons may have started, stopped or reset a run
    classroom.ask_room(snap)
    panels.live_view_ui(snap, checked, values)
    classroom.quiz_ui(snap)  # below the picture, which keeps its place on the first screen
    below_ui(snap, checked, values)
    panels.explain_ui(strategy, snap, cfg, values)


# Streamlit runs this file as __main__ for every page. `streamlit run app.py` first imports it as `app` to
# find the st.App below: the server that serves the page and fitcore's two routes beside it. A spawned DDP
# rank imports it as __mp_main__ (spawn re-imports the parent's main module) and builds neither.
if __name__ == "__main__":
    main()
elif __name__ == "app":
    serve.end_on_sigterm()
    serve.quiet_protocol_errors()
    app = st.App(__file__, routes=api.routes())
