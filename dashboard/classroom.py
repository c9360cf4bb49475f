"""The classroom (fitcore.view.link.Classroom, fitcore.view.quiz): a teacher's link that hides or locks
controls, the presenter's bigger picture, and a question before a paused step's picture.

The link is read once, when the session starts (dashboard.state.init_classroom, then join_link_room).
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

import streamlit as st

from dashboard import roomlink
from dashboard.state import apply_values, control_values, drop_bad_params, get_gpus, get_pool
from fitcore.core import i18n, identity, rooms
from fitcore.core.config import ConfigError
from fitcore.core.events import Status
from fitcore.runs.pool import RunNotFound
from fitcore.runs.runner import Snapshot
from fitcore.view import controls, link, quiz
from fitcore.view.common import escape_markdown


class Obeying:
    """A place to draw widgets (st, a column) whose widgets obey the teacher's link, by their key: a hidden
    control's widget is not drawn (its value stays in the session), a locked one's is drawn disabled."""

    def __init__(self, where):
        self._where = where

    def __getattr__(self, name: str):
        draw = getattr(self._where, name)

        def widget(*args, **kwargs):
            room, key = st.session_state.classroom, kwargs.get("key")
            control = link.control_of(key)
            if control is not None and room.hidden(control):
                return st.session_state.get(key)
            if control is not None and room.locked(control):
                kwargs["disabled"] = True
            return draw(*args, **kwargs)

        return widget


obey = Obeying


def page_classroom() -> link.Classroom:
    """This page's classroom: the link's hidden and locked controls, the sidebar's two modes."""
    ss = st.session_state
    return dataclasses.replace(ss.classroom, presenter=bool(ss.presenter), ask=bool(ss.ask))


def forget_classroom_params(want: dict) -> None:
    """A mode switched off leaves the link (query_params.update only adds and changes)."""
    for name in link.CLASSROOM_PARAMS:
        if name not in want and name in st.query_params:
            del st.query_params[name]


def classroom_ui() -> None:
    ss = st.session_state
    st.subheader(i18n.t("classroom.title"))
    st.toggle(i18n.t("classroom.presenter"), key="presenter", help=i18n.t("classroom.presenter.help"))
    st.toggle(i18n.t("classroom.ask"), key="ask", help=i18n.t("classroom.ask.help"))
    if ss.get("room") and rooms.server_rooms().is_teacher(ss.room, ss.owner):
        room_link_ui()
        following_count_ui()
        st.button(i18n.t("classroom.follow.close"), key="room_close", on_click=close_room)
    elif not ss.get("room"):
        join_box_ui()
    if not (ss.classroom.hide or ss.classroom.lock):  # a student's page does not offer to unlock
        teacher_link_ui()


def room_link_ui() -> None:
    """The teacher's room, as a class joins it: its short code, big; the link on the server's network
    address; and the link as a QR code. Shown while the room is open, never folded away."""
    try:
        pin = rooms.server_rooms().pin(st.session_state.room)
    except rooms.RoomNotFound:
        return
    st.markdown(f"### {i18n.t('classroom.room.code', code=pin)}")
    joining = roomlink.join_link(pin)
    if joining.url is None:
        key = "classroom.room.loopback" if joining.loopback else "classroom.room.no_address"
        st.warning(i18n.t(key, pin=pin))
        return
    st.code(joining.url, language=None, wrap_lines=True)
    st.image(roomlink.qr_png(joining.url), width=240, caption=i18n.t("classroom.room.qr"))


def join_box_ui() -> None:
    """A student's way in without the link: the room's short code, typed."""
    with st.form("room_join", border=False):
        st.text_input(i18n.t("classroom.join"), key="room_pin", max_chars=12,
                      placeholder=i18n.t("classroom.join.placeholder"))  # fmt: skip
        st.form_submit_button(i18n.t("classroom.join.button"), on_click=join_typed)


def join_typed() -> None:
    """Join the open room whose short code was typed (a callback: before the page draws its toggles); one
    error line for any other text. The rerun then draws the room's page: the teacher's run, followed."""
    ss = st.session_state
    typed = str(ss.get("room_pin") or "")
    try:
        code = rooms.server_rooms().by_pin(typed)
    except rooms.RoomNotFound:
        ss.notices.append(("error", i18n.t("classroom.join.none", value=typed[:20])))
        return
    ss.room, ss.ask = code, True


BUILDER_OPEN = "builder_open"  # the link builder's expander: whether it is open


def teacher_link_ui() -> None:
    """The link builder: controls to hide and to lock, and the whole link with the settings as they are."""
    ss = st.session_state
    # keyed and rerun on a click, so that the page knows whether it is open: its link is drawn only then (a
    # code block loads Streamlit's syntax highlighter, a third of a second of a loaded core on every page's
    # first load, for a link nobody sees folded away)
    with st.expander(i18n.t("classroom.builder"), expanded=bool(ss.get("room")), key=BUILDER_OPEN,
                     on_change="rerun") as builder:  # fmt: skip
        name = controls.field_label  # the controls by their labels; the link names them by their fields
        hide = st.multiselect(
            i18n.t("classroom.builder.hide"), link.CLASSROOM_NAMES, key="teach_hide", format_func=name,
            placeholder=i18n.t("page.choose"),
        )
        lock = st.multiselect(
            i18n.t("classroom.builder.lock"), link.CLASSROOM_NAMES, key="teach_lock", format_func=name,
            placeholder=i18n.t("page.choose"),
        )
        room = link.Classroom(tuple(hide), tuple(n for n in lock if n not in hide), ss.presenter, ss.ask)
        query = link.to_query(control_values(), ss.pace, classroom=room)
        base = (st.context.url or "").rstrip("/")
        if ss.get("room"):
            query["room"] = ss.room
        else:  # a callback: it turns ask mode on before the toggle is drawn
            st.button(i18n.t("classroom.room.open"), key="room_open", help=i18n.t("classroom.room.open.help"),
                      on_click=open_room)  # fmt: skip
        if builder.open:
            st.code(f"{base}/?{urlencode(query, safe=',:@')}", language=None, wrap_lines=True)
        st.caption(i18n.t("classroom.builder.caption"))


def open_room() -> None:
    """A room for this teacher's browser: its link asks every student, and this page sees their answers."""
    ss = st.session_state
    try:
        if not ss.signature:  # more new browsers from this address than a minute allows: none opens a room
            raise rooms.RoomsFull("signed", identity.SIGNS_PER_MINUTE)
        ss.room = rooms.server_rooms().open(ss.owner, st.context.ip_address)
    except rooms.RoomsFull as full:
        ss.notices.append(("error", i18n.t(f"classroom.room.full.{full.limit}", most=full.most)))
        return
    ss.ask = True
    ss[BUILDER_OPEN] = True  # the room's link in the builder, open


def join_link_room() -> None:
    """A new session's room, from the link: joined where it is open; a room always asks, so a link that
    says not to is refused, not overrun. Then the link's bad naming values leave the address bar."""
    ss = st.session_state
    join_room(st.query_params.get("room"))
    if ss.room and "ask" in st.query_params and not ss.ask_refused and not ss.classroom.ask:
        refused = ConfigError("ask", st.query_params.get("ask"), i18n.t("classroom.link.room_asks"))
        ss.url_errors.append(controls.error_text(refused))
    drop_bad_params()


def join_room(code: str | None) -> None:
    """A link's ?room=: a student's page joins an open room; any other code is one error line, no more."""
    ss = st.session_state
    ss.room = None
    if code is None:
        return
    try:
        if not rooms.CODE_PATTERN.fullmatch(code):  # the short code a link of the room's carries
            code = rooms.server_rooms().by_pin(code)
        rooms.server_rooms().state(code, ss.owner)
        ss.room, ss.ask = code, True
        return
    except rooms.RoomNotFound:
        pass
    ss.url_errors.append(i18n.t("classroom.room.bad", value=code[:40]))


question_key = quiz.question_key


def room_state(question: quiz.Question) -> rooms.RoomState | None:
    """The page's room, where it asks this very question; None without a room or on another question."""
    ss = st.session_state
    if not ss.get("room"):
        return None
    try:
        state = rooms.server_rooms().state(ss.room, ss.owner)
    except rooms.RoomNotFound:
        ss.room = None  # closed, or expired: the page goes on as a page of its own
        return None
    return state if state.question == question_key(question) else None


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
    """False while the step the picture is about to show has a question this browser has not answered, or,
    in a room that asks it, until the teacher reveals it."""
    asked = current_question(snap)
    if asked is None:
        return True
    state = room_state(asked[1])
    if state is not None:
        return state.revealed
    return quiz_scores().chosen(st.session_state.owner, asked[0]) is not None


def answer_question(question_id: str, question: quiz.Question, choice: int) -> None:
    ss = st.session_state
    quiz_scores().answer(ss.owner, question_id, choice, choice == question.answer)
    if ss.get("room"):
        try:  # the class's count: once per browser, and only for the room's own question
            rooms.server_rooms().answer(ss.room, ss.owner, question_key(question), choice)
        except rooms.RoomNotFound:
            ss.room = None


def reveal_question(question: quiz.Question) -> None:
    ss = st.session_state
    rooms.server_rooms().reveal(ss.room, ss.owner, question_key(question))


def ask_room(snap: Snapshot | None) -> None:
    """The teacher's page asks its room the question of its paused step, before the picture is drawn: the
    students' pages find it in their next poll, and the teacher's veil shows it with its counts and Reveal
    (frontend/follow.js)."""
    asked = current_question(snap)
    ss = st.session_state
    if asked is not None and ss.get("room") and rooms.server_rooms().is_teacher(ss.room, ss.owner):
        question = asked[1]
        rooms.server_rooms().ask(ss.room, ss.owner, question_key(question), len(question.choices))


def quiz_ui(snap: Snapshot | None) -> None:
    """The question about the step the picture is about to show, its choices, then the answer and why."""
    asked = current_question(snap)
    if asked is None:
        return
    question_id, question = asked
    ss = st.session_state
    if ss.get("room") and rooms.server_rooms().is_teacher(ss.room, ss.owner):
        teacher_quiz_ui(question)  # the question itself is on the picture's veil (ask_room)
        return
    scores, owner = quiz_scores(), ss.owner
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


def teacher_quiz_ui(question: quiz.Question) -> None:
    """The teacher's page below the picture, once revealed: the class's answers as they stood, and why."""
    state = room_state(question)
    if state is None or not state.revealed:
        return
    with st.container(border=True, key="quiz"):
        st.markdown(f"**{i18n.t('classroom.room.title')}** · {escape_markdown(question.text.say())}")
        most = max(state.counts or (0,)) or 1
        for i, choice in enumerate(question.choices):
            n = state.counts[i] if state.counts else 0
            mark = " ✓" if i == question.answer else ""
            bar = "█" * round(20 * n / most) if n else ""
            st.markdown(f"`{bar:<20}` **{n}** · {escape_markdown(choice.say())}{mark}")
        st.caption(i18n.t("classroom.room.answered", n=state.answered))
        st.success(escape_markdown(question.explanation.say()))


def classroom_data(snap: Snapshot | None) -> dict:
    """What the live view needs of the classroom: the presenter's bigger picture, whether to show the step
    or a veil until its question is answered (the veil says the question: on the projector, the class reads
    it over the picture), and the teacher's room, where the page posts its picture's phase."""
    ss = st.session_state
    asked = current_question(snap)
    shown = quiz.question_view(asked[1]) if asked is not None else None
    veil = i18n.t("classroom.quiz.veil")
    if shown is not None:
        veil = f"{shown['text']}\n{' · '.join(shown['choices'])}\n{veil}"
    teaching = bool(ss.get("room")) and rooms.server_rooms().is_teacher(ss.room, ss.owner)
    return {
        "presenter": bool(ss.presenter),
        "reveal": revealed(snap),
        "ask_step": asked[1].step if asked else None,
        "veil": veil,
        "teach": ss.room if teaching else None,
        "question": shown if teaching else None,  # the projector's veil: the question, the counts, Reveal
        "tally": revealed_tally(asked[1]) if teaching and asked else None,
    }


def revealed_tally(question: quiz.Question) -> dict | None:
    """After the teacher's Reveal, what the projector shows under the picture, on the first screen: the
    right answer and why, and the class's count for every choice. None before the reveal."""
    state = room_state(question)
    if state is None or not state.revealed or state.counts is None:
        return None
    return {**quiz.question_view(question), "answer": question.answer, "why": question.explanation.say(),
            "counts": list(state.counts), "answered": state.answered}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# A student's page in a room: the teacher's run, followed live and read-only (fitcore.follow).


def following() -> str | None:
    """The room this page follows as a student (its code); None for a page of its own or the teacher's.
    A room closed meanwhile leaves the page a page of its own."""
    ss = st.session_state
    code = ss.get("room")
    if not code or rooms.server_rooms().is_teacher(code, ss.owner):
        return None
    try:
        rooms.server_rooms().state(code, ss.owner)
    except rooms.RoomNotFound:
        ss.room = None
        ss.notices.append(("info", i18n.t("classroom.follow.closed")))  # calm: nothing was wrong
        return None
    return code


def leave_room() -> None:
    """A student leaves the room: a page of its own, with the teacher's settings, to try for itself."""
    ss = st.session_state
    code, ss.room = ss.room, None
    try:
        teacher, _ = rooms.server_rooms().follow(code, ss.owner)
        run_id = get_pool().latest_run(teacher)
        if run_id is not None:
            config = get_pool().snapshot(teacher, run_id, keep=False).config
            apply_values(controls.config_values(config), get_gpus())
    except (rooms.RoomNotFound, RunNotFound):
        pass  # closed, or no run yet: the page keeps the link's settings
    if "room" in st.query_params:
        del st.query_params["room"]


@st.fragment(run_every=2.0)
def following_count_ui() -> None:
    """The teacher's page: how many students follow its run, and the room's close button."""
    ss = st.session_state
    i18n.set_language(ss.get("lang", i18n.DEFAULT))  # a fragment's own rerun: the page's language is not set
    if not ss.get("room"):
        return
    try:
        state = rooms.server_rooms().state(ss.room, ss.owner)
    except rooms.RoomNotFound:
        return
    st.caption(i18n.count("classroom.follow.count", state.following))


def close_room() -> None:
    ss = st.session_state
    try:
        rooms.server_rooms().close(ss.room, ss.owner)
    except rooms.RoomNotFound:
        pass
    ss.room = None
    if "room" in st.query_params:
        del st.query_params["room"]
