"""The sidebar: the language, presets, the data, training, strategy, devices and charts controls, then the
data source's, the replay's and the classroom's own (dashboard.data, dashboard.classroom)."""

from __future__ import annotations

import streamlit as st

from dashboard.classroom import Obeying, classroom_ui, obey
from dashboard.data import data_source_ui, replay_ui
from dashboard.state import KEEP_RUNS, apply_values, clear_overlay, control_values, get_gpus
from fitcore.core import i18n
from fitcore.core.config import MAX_WORKERS, OPTIMIZERS, FitConfig
from fitcore.core.devices import MAX_VIRTUAL
from fitcore.core.i18n import count, t
from fitcore.engine import warmstart
from fitcore.protocols import registry
from fitcore.protocols.mesh import DP, TP
from fitcore.view import controls

# the projected page may ask ten times a second: each answer costs the server about a millisecond
REFRESH_CHOICES = {400: "page.refresh.normal", 100: "page.refresh.projected"}  # catalog keys


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


def language_ui() -> None:
    """English or 中文, each written in its own language; the link keeps the choice (`?lang=`)."""
    st.segmented_control(
        t("language.name"),
        list(i18n.LANGUAGES),
        key="lang",
        format_func=i18n.LANGUAGES.get,
        required=True,
        label_visibility="collapsed",
        on_change=language_changed,
    )


# The choice widgets whose options are shown in the page's language. The browser sends a choice as its label,
# and Streamlit maps the label back to its option with the labels of the page's language: the run that
# switches the language would read the old language's label as a value of its own ("Pace: 20 steps/s" as a
# pace). Each one's value is read before the switch, while its labels still match, and set again.
LABELLED_CHOICES = (
    "pace", "preset", "strategy", "device_mode", "refresh_ms", "data_source", "replay_choice", "teach_hide",
    "teach_lock", "cmp_reduction", "wi_link", "wi_precision",
)  # fmt: skip


def language_changed() -> None:
    ss = st.session_state
    for key in LABELLED_CHOICES:
        if key in ss:
            ss[key] = ss[key]


def presets_ui() -> None:
    ss = st.session_state
    if ss.get("script"):
        script_ui()
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


def script_ui() -> None:
    """The lesson script's place (`2 / 5 · Uneven split`) and the teacher's Back and Next."""
    ss = st.session_state
    at, script = ss.script_at, ss.script
    st.markdown(t("page.script.at", at=at + 1, n=len(script), preset=script[at].title))
    back, forward = st.columns(2)
    back.button(t("page.script.back"), key="script_back", on_click=script_moved, args=(-1,),
                disabled=at == 0, width="stretch")  # fmt: skip
    forward.button(t("page.script.next"), key="script_next", on_click=script_moved, args=(1,),
                   disabled=at == len(script) - 1, width="stretch")  # fmt: skip


def script_moved(delta: int) -> None:
    ss = st.session_state
    ss.script_at = max(0, min(len(ss.script) - 1, ss.script_at + delta))
    apply_values(controls.config_values(ss.script[ss.script_at].config), get_gpus())
    ss.url_errors = []


def preset_chosen() -> None:
    ss = st.session_state
    if ss.preset != "Custom":
        apply_values(controls.config_values(controls.preset(ss.preset).config), get_gpus())
        ss.url_errors = []


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
        registry.NAMES,
        key="strategy",
        format_func=lambda name: registry.strategy(name).label,
        label_visibility="collapsed",
        help=t("page.strategy.help"),
    )
    entry = registry.strategy(st.session_state.strategy)
    for option in entry.options:  # its own: FSDP's ZeRO switch, the pipeline's layers, microbatches, schedule
        if not st.session_state.classroom.hidden(option):
            option_widget(entry, option)


def option_widget(entry, option: str) -> None:
    """A strategy's option as its field's type asks: a switch, a choice of its values, or a number box."""
    label, help_text = t(f"view.field.{option}"), t(f"page.option.{option}.help")
    default = getattr(FitConfig, option)
    if isinstance(default, bool):
        obey(st).toggle(label, key=option, help=help_text)
    elif option in entry.choices:
        obey(st).selectbox(label, entry.choices[option], key=option, help=help_text)
    elif isinstance(default, float):
        obey(st).number_input(label, min_value=0.0, step=1.0, key=option, help=help_text)
    else:
        # a count from 0, or an index whose default -1 says "none" (the pipeline's slow stage)
        obey(st).number_input(label, min_value=min(0, default), step=1, key=option, help=help_text)


def devices_ui(gpus: dict) -> None:
    ss = st.session_state
    processes = registry.strategy(ss.strategy).processes  # workers on the CPU, one per GPU with CUDA
    if processes:  # the ranks fork from a server that imports torch once: started now, it is ready at Start
        warmstart.start()
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
        obey(st).multiselect(t("page.gpus"), sorted(gpus), key="gpus", format_func=lambda i: gpus[i].label,
                             placeholder=t("page.choose"))
        if processes:
            n = len(ss.gpus)
            st.caption(t("page.gpu.ranks", ranks=count("view.count.rank", n)))
        else:
            st.caption(t("page.gpu.split"))
    elif processes:
        obey(st).number_input(
            t("page.workers"),
            step=1,
            key="workers",
            help=t("page.workers.help", most=MAX_WORKERS),
            disabled=bool(ss.get("mesh")),  # a mesh says how many ranks: its sizes' product
        )
        st.caption(t("page.workers.caption"))
    if processes and ss.device_mode != "cuda":
        obey(st).text_input(
            t("page.mesh"), key="mesh", placeholder=f"{DP}=2,{TP}=2", help=t("page.mesh.help")
        )
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
    # each on a line of its own: side by side, the sidebar's width cut both labels ("Overlay my earli…")
    st.toggle(t("page.overlay"), key="overlay", help=t("page.overlay.help", n=KEEP_RUNS))
    st.button(t("page.clear"), key="clear_overlay", on_click=clear_overlay, disabled=not ss.past)
