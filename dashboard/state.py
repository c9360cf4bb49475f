"""The page's session: this browser's owner id, the current run and the last snapshot read, earlier runs,
the server's pool and GPUs, the teacher's link, and the controls' values to and from the session."""

from __future__ import annotations

import dataclasses
import uuid

import streamlit as st

from fitcore import api
from fitcore.core import i18n, identity
from fitcore.core.config import FitConfig
from fitcore.core.devices import cuda_gpus
from fitcore.core.errors import Text
from fitcore.core.events import Status
from fitcore.kit import live
from fitcore.runs.pool import RunNotFound, RunPool, server_pool
from fitcore.runs.runner import Snapshot
from fitcore.view import controls, datasource, link

# The live view asks the server for news this often (ms): a request costs the server well under a millisecond,
# where a script rerun cost 9-25 ms. A queued run changes only its place in the queue.
POLL_MS, QUEUED_POLL_MS = 400, 1000
KEEP_RUNS = 5  # earlier runs of this session kept for the loss chart's overlay
# widgets that are not always drawn (a hidden widget's value is forgotten by Streamlit unless kept)
KEPT_WIDGETS = ("virtual_devices", "gpus", "workers", "mesh", "emulate_on", *controls.OPTIONS)


def get_pool() -> RunPool:
    """One pool for the whole server: every browser session's runs share its cap and queue."""
    return server_pool()


@st.cache_resource(show_spinner=False)
def get_gpus() -> dict:
    """The CUDA GPUs this server sees, by index (empty on a CPU-only machine)."""
    return {g.index: g for g in cuda_gpus()}


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


def init_session(gpus: dict) -> bool:
    """A new session's state, from the run this browser has and the link; False where it has it already.
    The link's room is joined next, by dashboard.classroom.join_link_room (it draws; this module only
    starts a session)."""
    ss = st.session_state
    if "owner" in ss:
        return False
    ss.owner = browser_owner()
    ss.signature = browser_signature(ss.owner)
    ss.run_id = get_pool().latest_run(ss.owner)  # a reloaded page shows its run again
    ss.snap = None  # the last snapshot read: kept when the run ends or the pool drops it
    ss.past = []  # (label, loss history) of this session's earlier runs
    ss.start_error = None
    ss.run_gone = run_gone(ss.owner)
    apply_values(controls.defaults(), gpus)
    for key, value in page_defaults().items():
        ss[key] = value
    if ss.run_id is not None:
        try:
            snap = get_pool().snapshot(ss.owner, ss.run_id)
        except RunNotFound:
            ss.run_id = None
        else:  # without a link, the controls are the run's own, so that they match what is shown
            ss.run_number = get_pool().run_number(ss.owner, ss.run_id)
            apply_values(controls.values_here(controls.config_values(snap.config), list(gpus.values())), gpus)
            ss.pace = controls.pace_choice(snap.pace)
    # a link sets the controls (a reload's link is the run's own); bad values are reported, the defaults kept.
    # A preset it names comes first: the link's own values apply over it
    chosen, errors = controls.preset_from_query(link_params())
    if chosen is not None:
        apply_values(controls.config_values(chosen.config), gpus)
        ss.preset = chosen.name
    values, pace, value_errors = link.from_query(link_params(), list(gpus.values()))
    errors += value_errors
    apply_values(values, gpus)
    if pace is not None:
        ss.pace = pace
    ss.url_errors = [controls.error_text(e) for e in errors]
    ss.notices = []  # ("info" | "error", text): what the page says that no link value caused
    init_script(gpus)
    init_classroom()
    return True


# The link's parameters that name something (a room, a script, a preset) rather than a control's value: a
# bad one is reported once and taken out of the address bar, so that a reload or a copied link drops it.
NAMING_PARAMS = ("room", "script", "preset")


def drop_bad_params() -> None:
    ss = st.session_state
    preset = controls.preset_from_query(link_params())[0]
    taken = {"room": bool(ss.room), "script": bool(ss.script), "preset": preset is not None}
    for name in NAMING_PARAMS:
        if name in st.query_params and not taken[name]:
            del st.query_params[name]


def browser_signature(owner: str) -> str:
    """The server's signature of this browser's owner id (fitcore.core.identity), kept in a cookie beside it:
    an answer in a room counts, and a room opens, for a signed id only. The one the browser holds is kept; a
    new one is given within the address's bound, else none (its runs are its own, nothing it says counts)."""
    held = st.context.cookies.get(api.SIGNED_COOKIE)
    if identity.signed(owner, held):
        return held
    return identity.sign(owner) if identity.server_minting().allow(st.context.ip_address) else ""


def run_gone(owner: str) -> bool:
    """Did this browser's live view show a run live that the server no longer has (it restarted, or
    dropped the run while no page read it)? Asked once, as the session starts: its page says so once."""
    run_id = api.live_run_of(st.context.cookies)
    if run_id is None:
        return False
    try:
        get_pool().snapshot(owner, run_id)
    except RunNotFound:
        return True
    return False


def link_params() -> dict:
    """The link's parameters, a repeated one with all its values (to_dict would keep only the last)."""
    return link.link_params({k: st.query_params.get_all(k) for k in st.query_params})


def init_script(gpus: dict) -> None:
    """A lesson script's link (`?script=lesson`): its presets in order, the first one's settings now."""
    ss = st.session_state
    ss.script, errors = controls.script_from_query(link_params())
    ss.script_at = 0
    ss.url_errors += [controls.error_text(e) for e in errors]
    if ss.script:
        apply_values(controls.config_values(ss.script[0].config), gpus)


def init_classroom() -> None:
    """The teacher's link: the controls it hides or locks keep the values the page holds now (the link's,
    where it gave them); the presenter and question modes start as the link says."""
    ss = st.session_state
    room, errors = link.classroom_from_query(link_params())
    ss.classroom = room
    ss.url_errors += [controls.error_text(e) for e in errors]
    values = control_values()
    ss.pinned = {name: values[name] for name in room.pinned if name in values}
    ss.pinned_pace = ss.pace if room.locked("pace") else None
    ss.presenter, ss.ask = room.presenter, room.ask
    ss.ask_refused = "ask" in st.query_params and any(e.field == "ask" for e in errors)


def pin_classroom(gpus: dict) -> None:
    """Every run, before the widgets: a hidden or locked control holds the link's value, whatever a preset
    or the session says."""
    ss = st.session_state
    apply_values(ss.pinned, gpus)
    if ss.pinned_pace is not None:
        ss.pace = ss.pinned_pace


def apply_values(values: dict, gpus: dict) -> None:
    """Set the controls' widgets from typed config values (a preset, a link, the defaults, a run's)."""
    for key, value in controls.widget_values(values, list(gpus.values())).items():
        st.session_state[key] = value


def page_defaults() -> dict:
    """The page's own widgets' first values (beside the run's controls), which the page reads as it draws."""
    return {
        "device_mode": "virtual",  # "virtual": on the CPU (emulated devices, or CPU processes); "cuda"
        "pace": controls.DEFAULT_PACE,
        "smoothing": 0.0,
        "overlay": False,  # earlier runs only when asked: the current run is the lesson
        "refresh_ms": POLL_MS,
        "presenter": False,
        "ask": False,
    }


def keep_widget_defaults(gpus: dict) -> None:
    """Streamlit forgets a widget's value while the widget is not drawn: put back a default before drawing
    (a page that followed a room drew none of its widgets, and becomes a page of its own again)."""
    ss = st.session_state
    for key, value in controls.widget_values(controls.defaults(), list(gpus.values())).items():
        ss.setdefault(key, value)
    for key, value in page_defaults().items():
        ss.setdefault(key, value)
    for i in range(ss.n_features):
        ss.setdefault(f"weight_{i}", 1.0)
    ss.setdefault("virtual_devices", 2)
    ss.setdefault("gpus", sorted(gpus))
    ss.setdefault("workers", FitConfig.workers)
    ss.setdefault("mesh", FitConfig.mesh)
    ss.setdefault("emulate_on", "cpu")
    for option in controls.OPTIONS:  # a strategy's switches, drawn under that strategy only
        ss.setdefault(option, getattr(FitConfig, option))
    for key in KEPT_WIDGETS:
        ss[key] = ss[key]  # set through the session, so that switching strategy does not forget it
    if not gpus:
        ss.device_mode, ss.emulate_on = "virtual", "cpu"


def control_values() -> dict:
    """The controls' current values, typed like FitConfig's fields (not yet validated)."""
    return controls.control_values(st.session_state) | data_values()


def data_values() -> dict:
    """The CSV source's config values, or none for the synthetic data."""
    ss = st.session_state
    if ss.get("data_source") != "csv" or not ss.get("csv_path"):
        return {}
    features = ss.get("csv_features") or []
    return datasource.csv_values(
        ss.csv_path, ss.get("csv_target", ""), features, ss.get("csv_standardize", True)
    )


def refresh_snapshot() -> Snapshot | None:
    """Read the current run from the pool; keep the last snapshot when the pool no longer has it."""
    ss = st.session_state
    if ss.run_id is None:
        return ss.snap
    try:
        ss.snap = get_pool().snapshot(ss.owner, ss.run_id)
    except RunNotFound:
        run_dropped()
    return ss.snap


def run_dropped() -> None:
    """The pool no longer has the current run: the page keeps what it last read, and an active run is
    shown stopped, saying why, with Start offered and Pause and Stop gone."""
    ss = st.session_state
    ss.run_id = None
    if ss.snap is not None and ss.snap.active:
        message = Text("run.message.dropped")
        ss.snap = dataclasses.replace(ss.snap, status=Status.STOPPED, message=message)


def archive_current() -> None:
    """Keep the current run's loss curve for the overlay before it is replaced or reset."""
    ss = st.session_state
    snap = ss.snap
    if snap is not None and snap.loss_history:
        label = live.run_title(snap, ss.get("run_number"))
        ss.past = (ss.past + [(label, snap.loss_history)])[-KEEP_RUNS:]


def clear_overlay() -> None:
    st.session_state.past = []
