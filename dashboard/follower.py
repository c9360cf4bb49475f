"""A room's student's page: the teacher's run, followed live and read-only (fitcore.follow, follow.js).

It has no run buttons and no settings of its own: the language, a button to leave the room, and the live view,
whose polls bring the teacher's run, its phase and its question. app.py draws it instead of the page of one's
own while the session's room is open and not its own.
"""

from __future__ import annotations

import streamlit as st

from dashboard import sidebar
from dashboard.classroom import leave_room
from dashboard.panels import live_component, view_settings
from dashboard.run import error_ui, notices_ui
from fitcore.core import i18n


def live_data(code: str) -> dict:
    """The live view of a room's student: the room to follow, the page's language, no run of its own."""
    return {
        **view_settings(),
        "payload": None,
        "overlay": [],
        "presenter": bool(st.session_state.presenter),
        "reveal": True,
        "ask_step": None,
        "veil": "",
        "follow": code,
    }


def follower_ui(code: str) -> None:
    """A student's page: the teacher's run, live; no run buttons, no settings; a button to leave."""
    for text in st.session_state.url_errors:  # the link's bad values, one line each
        error_ui(i18n.t("page.link_error", error=text))
    notices_ui()
    with st.sidebar:
        sidebar.language_ui()
        st.subheader(i18n.t("classroom.follow.title"))
        st.caption(i18n.t("classroom.follow.help"))
        st.button(i18n.t("classroom.follow.leave"), key="room_leave", on_click=leave_room, type="primary")
    with st.container(key="page_title"):
        st.header(i18n.t("classroom.follow.title"), anchor=False)
    live_component()(data=live_data(code), key="live", on_status_change=lambda: None)
