"""The fitcore dashboard: watch nn.DataParallel (or its CPU emulation) split each batch of y = X·W + b, or
DistributedDataParallel's ranks each train on their own shard of the data.

Run with `streamlit run app.py`. The page holds no training code: it sends start / pause / stop to one
server-wide RunPool and draws the snapshots it reads back.
"""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fitcore import report, strategies
from fitcore.config import MAX_WORKERS, OPTIMIZERS, ConfigError, FitConfig
from fitcore.devices import MAX_VIRTUAL, cuda_gpus
from fitcore.events import Status
from fitcore.pool import RunNotFound, RunPool, server_pool
from fitcore.runner import Snapshot

REFRESH_SECONDS = 0.4  # live panels while a run trains or waits: 2.5 times a second
# A paused or queued run changes little, so its page refreshes once a second: reading the snapshot still keeps
# the run from being reaped, and 20 queued pages at 2.5 refreshes a second would crowd out the ones training.
PAUSED_REFRESH_SECONDS = 1.0
KEEP_RUNS = 5  # earlier runs of this session kept for the loss chart's overlay
COLOURS = ("#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#e8590c", "#0c8599", "#c2255c", "#5c940d")
RAW_COLOUR = "#9aa5b1"  # the unsmoothed loss, behind the smoothed one
PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
CHART_HEIGHT = 240  # px: the loss and the parameter charts, side by side
# large, dark type in the page's own font: the page is projected in a classroom
FONT = dict(family='"Source Sans", "Source Sans Pro", sans-serif', size=16, color="#111418")
TICK_FONT = dict(size=15, color="#111418")
AXIS = dict(showline=True, linecolor="#8a94a0", gridcolor="#e3e7ec", zeroline=False, tickfont=TICK_FONT)
MAX_SHARD_PICTURE_ROWS = 2000  # dataset rows the shard picture draws one cell each; above, the table only
CHARTS = ("split_chart", "shards_chart", "loss_chart", "params_chart")  # each drawn as a stack of two (_plot)
# Static CSS, no user text in it: the two charts of a stack share one grid cell, the second on top.
PAGE_CSS = (
    "<style>"
    + ", ".join(f".st-key-{key}_stack" for key in CHARTS)
    + " { display: grid; grid-template-columns: minmax(0, 1fr); } "
    + ", ".join(f".st-key-{key}_stack > *" for key in CHARTS)
    + " { grid-area: 1 / 1; min-width: 0; }"
    + "</style>"
)
# widgets that are not always drawn (a hidden widget's value is forgotten by Streamlit unless kept)
KEPT_WIDGETS = ("virtual_devices", "gpus", "workers")


def get_pool() -> RunPool:
    """One pool for the whole server: every browser session's runs share its cap and queue."""
    return server_pool()


@st.cache_resource(show_spinner=False)
def get_gpus() -> dict:
    """The CUDA GPUs this server sees, by index (empty on a CPU-only machine)."""
    return {g.index: g for g in cuda_gpus()}


# ---------------------------------------------------------------------------------------------------------
# Session state: the owner id, the current run, the last snapshot read, earlier runs, the controls.


def init_session(gpus: dict) -> None:
    ss = st.session_state
    if "owner" in ss:
        return
    ss.owner = uuid.uuid4().hex  # the pool only lets this session touch its own runs
    ss.run_id = None
    ss.snap = None  # the last snapshot read: kept when the run ends or the pool drops it
    ss.past = []  # (label, loss history) of this session's earlier runs
    ss.charts = {}  # key -> ((back figure, front figure), which one the last draw changed): see _plot
    ss.start_error = None
    apply_values(report.defaults())
    ss.device_mode = "virtual"  # "virtual": on the CPU (emulated devices, or ddp's CPU ranks); "cuda"
    ss.pace = report.DEFAULT_PACE
    ss.smoothing = 0.0
    ss.overlay = True
    # a shared link sets the controls; its bad values are reported and replaced by the defaults
    values, pace, errors = report.from_query(st.query_params.to_dict(), list(gpus.values()))
    apply_values(values)
    if pace is not None:
        ss.pace = pace
    ss.url_errors = [report.error_text(e) for e in errors]


def apply_values(values: dict) -> None:
    """Set the controls' widgets from typed config values (a preset, a link, the defaults)."""
    ss = st.session_state
    for name, value in values.items():
        if name == "weights":
            ss.n_features = len(value)
            for i, w in enumerate(value):
                ss[f"weight_{i}"] = float(w)
        elif name == "devices":
            kind, _, rest = value.partition(":")
            if kind == "virtual":
                ss.device_mode, ss.virtual_devices = "virtual", int(rest)
            elif kind == "cpu":  # ddp's ranks on the CPU; their number is `workers`
                ss.device_mode = "virtual"
            else:
                ss.device_mode, ss.gpus = "cuda", [int(i) for i in rest.split(",")]
        elif name in ("bias", "noise", "lr"):
            ss[name] = float(value)
        else:
            ss[name] = value


def keep_widget_defaults(gpus: dict) -> None:
    """Streamlit forgets a widget's value while the widget is not drawn: put back a default before drawing."""
    ss = st.session_state
    for i in range(ss.n_features):
        ss.setdefault(f"weight_{i}", 1.0)
    ss.setdefault("virtual_devices", 2)
    ss.setdefault("gpus", sorted(gpus))
    ss.setdefault("workers", FitConfig.workers)
    for key in KEPT_WIDGETS:
        ss[key] = ss[key]  # set through the session, so that switching strategy does not forget it
    if not gpus:
        ss.device_mode = "virtual"


def devices_spec() -> str:
    ss = st.session_state
    if ss.device_mode == "cuda":
        return "cuda:" + ",".join(str(i) for i in sorted(ss.gpus))
    if strategies.strategy(ss.strategy).processes:
        return "cpu"  # for ddp, `cpu` means `workers` processes on the CPU
    return f"virtual:{ss.virtual_devices}"


def workers_value() -> int:
    """ddp's ranks: the workers control on the CPU; one per selected GPU with CUDA (what validate demands)."""
    ss = st.session_state
    if strategies.strategy(ss.strategy).processes and ss.device_mode == "cuda":
        return len(ss.gpus)
    return int(ss.workers)


def control_values() -> dict:
    """The controls' current values, typed like FitConfig's fields (not yet validated)."""
    ss = st.session_state
    return {
        "weights": tuple(float(ss.get(f"weight_{i}", 1.0)) for i in range(ss.n_features)),
        "bias": float(ss.bias),
        "noise": float(ss.noise),
        "data_size": int(ss.data_size),
        "batch_size": int(ss.batch_size),
        "epochs": int(ss.epochs),
        "lr": float(ss.lr),
        "optimizer": ss.optimizer,
        "shuffle": bool(ss.shuffle),
        "seed": int(ss.seed),
        "devices": devices_spec(),
        "strategy": ss.strategy,
        "workers": workers_value(),
    }


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
        ss.past = (ss.past + [(report.run_label(snap), snap.loss_history)])[-KEEP_RUNS:]


# ---------------------------------------------------------------------------------------------------------
# Callbacks of the run buttons: every action goes through the pool, as this session's owner.


def start_run(gpus: dict) -> None:
    ss = st.session_state
    pool = get_pool()
    ss.start_error, ss.url_errors = None, []
    try:
        cfg = report.config_from_controls(control_values(), pool.settings.limits, list(gpus.values()))
        snap = pool.submit(ss.owner, cfg, report.parse_pace(ss.pace))
    except ConfigError as exc:
        ss.start_error = report.error_text(exc)
        return
    archive_current()
    ss.run_id, ss.snap = snap.run_id, snap


def _on_run(action: str) -> None:
    ss = st.session_state
    if ss.run_id is None:
        return
    try:
        getattr(get_pool(), action)(ss.owner, ss.run_id)
    except RunNotFound:
        ss.run_id = None  # already dropped by the pool; the page keeps what it last read


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
            get_pool().set_pace(ss.owner, ss.run_id, report.parse_pace(ss.pace))
        except RunNotFound:
            ss.run_id = None


def preset_chosen() -> None:
    ss = st.session_state
    if ss.preset != "Custom":
        apply_values(report.config_values(report.preset(ss.preset).config))
        ss.url_errors = []


# ---------------------------------------------------------------------------------------------------------
# Sidebar: presets and controls.


def presets_ui() -> None:
    ss = st.session_state
    match = report.matching_preset(control_values())
    ss.preset = match.name if match else "Custom"  # the selectbox follows the controls
    st.selectbox(
        "Preset",
        ["Custom"] + [p.name for p in report.PRESETS],
        key="preset",
        on_change=preset_chosen,
        help="Sets the controls to a setup that shows one thing.",
    )


def data_controls_ui() -> None:
    st.subheader("Data: y = X·W + b")
    st.number_input(
        "Number of features",
        min_value=1,
        max_value=report.MAX_FEATURE_CONTROL,
        step=1,
        key="n_features",
        help="Columns of X, one true weight each (a run may use 1 to 16).",
    )
    n = st.session_state.n_features
    cols = st.columns(2)
    for i in range(n):
        with cols[i % 2]:
            st.number_input(f"True w{i + 1}", step=0.1, format="%g", key=f"weight_{i}")
    left, right = st.columns(2)
    left.number_input("True bias b", step=0.1, format="%g", key="bias")
    right.number_input("Noise (std)", step=0.1, format="%g", key="noise")
    left.number_input("Data size (rows)", step=1, key="data_size")
    right.number_input("Seed", step=1, key="seed")
    st.checkbox("Shuffle the rows every epoch", key="shuffle")


def training_controls_ui() -> None:
    st.subheader("Training")
    left, right = st.columns(2)
    left.number_input("Batch size", step=1, key="batch_size")
    right.number_input("Epochs", step=1, key="epochs")
    left.number_input("Learning rate", step=0.05, format="%g", key="lr")
    right.selectbox(
        "Optimizer", OPTIMIZERS, key="optimizer", format_func=lambda o: {"adam": "Adam"}.get(o, "SGD")
    )


def strategy_ui() -> None:
    st.subheader("Strategy")
    st.radio(
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
    ddp_run = strategies.strategy(ss.strategy).processes
    st.subheader("Devices")
    if gpus:
        on_cpu = "CPU processes" if ddp_run else "Virtual devices"
        st.radio(
            "Run on",
            ["cuda", "virtual"],
            key="device_mode",
            horizontal=True,
            format_func=lambda m: "CUDA GPUs" if m == "cuda" else on_cpu,
        )
    else:
        st.caption("No CUDA GPU on this server.")
    if ss.device_mode == "cuda":
        st.multiselect("GPUs", sorted(gpus), key="gpus", format_func=lambda i: gpus[i].label)
        if ddp_run:
            n = len(ss.gpus)
            st.caption(f"One rank per selected GPU, backend nccl: {n} rank{'s' if n != 1 else ''}.")
        else:
            st.caption("Two or more GPUs run the real nn.DataParallel; one GPU runs the model alone.")
    elif ddp_run:
        st.number_input(
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
        st.slider("Virtual devices", 1, MAX_VIRTUAL, key="virtual_devices")
        st.caption(
            "Emulated on the CPU: each batch is split with DataParallel's own rule (tensor.chunk) and the "
            "replicas run in threads, but no GPU is used and nothing runs faster."
        )


def chart_controls_ui() -> None:
    st.subheader("Charts")
    st.slider("Loss smoothing", 0.0, 0.95, step=0.05, key="smoothing", help="Exponential moving average.")
    st.toggle("Overlay this session's earlier runs", key="overlay")


def sidebar_ui(gpus: dict) -> None:
    with st.sidebar:
        presets_ui()
        data_controls_ui()
        training_controls_ui()
        strategy_ui()
        devices_ui(gpus)
        chart_controls_ui()


# ---------------------------------------------------------------------------------------------------------
# Main area: messages, run buttons, live panels, explanation.


def error_ui(text: str) -> None:
    """An error exactly as written: it quotes what the user typed or linked, which must not become Markdown
    (a value like [click me](http://example.com) would otherwise show as a link inside the red box)."""
    st.error(report.escape_markdown(text))


def messages_ui(values: dict, config_error: str | None) -> None:
    ss = st.session_state
    for text in ss.url_errors:
        error_ui(f"The link had a bad value, so the default is used. {text}")
    if config_error:
        error_ui(config_error)
    elif ss.start_error:
        error_ui(ss.start_error)
    match = report.matching_preset(values)
    if match is not None:
        st.info(f"**{match.name}.** {match.lesson}")


def run_controls_ui(gpus: dict, can_start: bool) -> None:
    snap: Snapshot | None = st.session_state.snap
    active = snap is not None and snap.active
    cols = st.columns([1.5, 1, 1, 1, 3.2], vertical_alignment="bottom")
    cols[0].button(
        "Start training",
        key="start",
        type="primary",
        disabled=not can_start or active,
        on_click=start_run,
        args=(gpus,),
        width="stretch",
    )
    if active and snap.status == Status.PAUSED:
        cols[1].button("Resume", key="resume", on_click=_on_run, args=("resume",), width="stretch")
    else:
        cols[1].button(
            "Pause", key="pause", disabled=not active, on_click=_on_run, args=("pause",), width="stretch"
        )
    cols[2].button("Stop", key="stop", disabled=not active, on_click=_on_run, args=("stop",), width="stretch")
    cols[3].button("Reset", key="reset", disabled=snap is None, on_click=reset_run, width="stretch")
    cols[4].select_slider(
        "Pace",
        report.PACE_CHOICES,
        key="pace",
        format_func=report.pace_label,
        on_change=pace_changed,
        help="Steps per second; takes effect at once, also during a run.",
    )


def status_ui(snap: Snapshot | None, cfg: FitConfig | None) -> None:
    if snap is None:
        st.info(report.status_line(None, cfg))  # no user text in it: its Markdown is the page's own
        st.progress(0.0)
        return
    line = report.escape_markdown(report.status_line(snap))
    getattr(st, report.status_kind(snap))(line)
    st.progress(min(1.0, snap.progress))
    if report.is_ddp(snap) and snap.active and snap.step == 0:
        k = snap.config.workers
        st.caption(f"Starting {k} process{'es' if k != 1 else ''}: each imports torch and joins the group.")


def differences_ui(snap: Snapshot | None, values: dict) -> None:
    if snap is None:
        return
    diffs = report.config_differences(values, snap.config)
    if not diffs:
        return
    if snap.active:
        st.warning(
            f"The controls differ from {snap.run_id}'s configuration; the run keeps its own, and the "
            "controls apply to the next run. " + report.escape_markdown("; ".join(diffs))
        )
    else:
        st.caption(f"Shown: {snap.run_id}'s configuration. Changed since: " + "; ".join(diffs))


def _layout(height: int, **more) -> dict:
    """A figure's layout in the page's colours and type; drawn with theme=None so that these sizes hold.

    Figures are written as plain dicts and built in one go.Figure(data, layout) call: building one call by
    call (update_layout, add_scatter, add_hline) took ten times as long, 50 ms a chart, and the live panels
    draw three charts 2.5 times a second in the process that trains.
    """
    layout = dict(
        template="none",
        height=height,
        margin=dict(l=10, r=10, t=10, b=10),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0),
        font=FONT,
        paper_bgcolor="#ffffff",  # opaque: the front chart of a stack hides the one behind it
        plot_bgcolor="#ffffff",
    )
    return layout | more


def _hline(y: float, colour: str, dash: str) -> dict:
    """A horizontal line across the whole plot at y: what plotly's add_hline draws."""
    line = dict(color=colour, width=1.5, dash=dash)
    return dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=y, y1=y, line=line)


def _plot(data: list[dict], layout: dict, key: str) -> None:
    """Draw the figure (data, layout) so that no refresh of the live panels ever shows an empty chart.

    Streamlit 1.67 derives a plotly chart's identity from its figure even when it has a key, so new data
    mounts a new chart, which stays blank until plotly has drawn it (streamlit issue #8782): at 2.5
    refreshes a second the chart flashes. So each chart is two charts stacked in one grid cell (PAGE_CSS):
    during a run a refresh gives the new figure to one of them only, alternately, and the other one, whose
    figure is unchanged and so stays mounted, shows through while the new one draws. The front one (the
    second, on top) always holds the latest figure once the run has ended.
    """
    fig = go.Figure(data=data, layout=layout)  # validated: a wrong property name fails here, by name
    ss = st.session_state
    pair, turn = ss.charts.get(key, ((fig, fig), 0))
    snap = ss.snap
    if snap is not None and snap.active:
        turn = 1 - turn
    else:
        turn = 1  # nothing will refresh: the front one must show fig
    pair = (fig, pair[1]) if turn == 0 else (pair[0], fig)
    ss.charts[key] = (pair, turn)
    with st.container(key=f"{key}_stack", gap=None):
        for i, figure in enumerate(pair):
            st.plotly_chart(figure, theme=None, config=PLOT_CONFIG, key=f"{key}_{i}")


def _line_layout(snap: Snapshot, y_title: str, legend: bool) -> dict:
    """A chart over the run's steps, 0 to its total, with the page's sizes."""
    return _layout(
        CHART_HEIGHT,
        margin=dict(l=10, r=24, t=34 if legend else 8, b=10),  # r: room for the last step's label
        showlegend=legend,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, font=dict(size=15)),
        hoverlabel=dict(font=dict(size=15)),
        # no x title: the panel's heading says "per step", and a projector's 800 rows are precious
        xaxis=AXIS | dict(range=[0, snap.total_steps], automargin=True),
        yaxis=AXIS | dict(title=dict(text=y_title, standoff=6), automargin=True),
    )


def _positive(history) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of a series, without 0, negatives or inf: a log axis has no place for them."""
    steps = np.array([s for s, _ in history], dtype=np.int64)
    values = np.array([v for _, v in history], dtype=np.float64)
    keep = np.isfinite(values) & (values > 0)
    return steps[keep], values[keep]


def _log_axis(axis: dict, values: list[float]) -> None:
    ticks = report.log_ticks(values)
    labels = [f"10<sup>{round(np.log10(t))}</sup>" for t in ticks]  # 10², 10⁻³: powers of ten
    # plotly draws a <sup> at 70 %: a larger size keeps the exponent readable on a projector
    axis.update(type="log", tickvals=ticks, ticktext=labels, tickfont=TICK_FONT | dict(size=17))


def loss_ui(snap: Snapshot | None) -> None:
    """Loss per step on a log axis, optionally smoothed, with this session's earlier runs behind it."""
    ss = st.session_state
    st.subheader("Loss per step")
    if snap is None or not snap.loss_history:
        st.caption("The loss of every batch appears here once a run starts.")
        return
    series = []  # (name, history, kind), drawn in this order: earlier runs, raw, this run on top
    if ss.overlay:
        series += [(label, history, "earlier run") for label, history in ss.past]
    steps, losses = zip(*snap.loss_history)
    if ss.smoothing > 0:
        series.append((f"{snap.run_id} (raw)", snap.loss_history, "raw"))
        losses = report.smooth(losses, ss.smoothing)
    series.append((snap.run_id, tuple(zip(steps, losses)), "this run"))
    layout = _line_layout(snap, "loss (MSE)", legend=True)  # the run's name; level with the parameters
    data, drawn = [], []
    for i, (name, history, kind) in enumerate(series):
        x, y = _positive(history)
        drawn += y.tolist()
        if kind == "this run":
            line = dict(color=COLOURS[0], width=3)
        elif kind == "raw":
            line = dict(color=RAW_COLOUR, width=1.5)
        else:
            line = dict(color=COLOURS[1 + i % (len(COLOURS) - 1)], width=2, dash="dash")
        mode = "lines" if len(x) > 1 else "markers"  # a line of one point would not show
        data.append(dict(
            type="scatter", x=x, y=y, mode=mode, name=name, line=line,
            marker=dict(color=line["color"], size=8), hovertemplate="step %{x}: %{y:.4g}",
        ))  # fmt: skip
    _log_axis(layout["yaxis"], drawn)
    _plot(data, layout, "loss_chart")


def params_ui(snap: Snapshot | None) -> None:
    """Each learned weight and the bias per step, with the true and least-squares values as lines."""
    st.subheader("Parameters per step")
    if snap is None or not snap.param_history:
        st.caption("Each learned weight and the bias appear here, with their true values.")
        return
    cfg = snap.config
    names = report.parameter_names(cfg.n_features)
    steps = np.array([s for s, _ in snap.param_history], dtype=np.int64)
    values = np.array([v for _, v in snap.param_history], dtype=np.float64)  # (points, d + 1)
    true = list(cfg.weights) + [cfg.bias]
    lstsq = list(snap.lstsq_weights) + [snap.lstsq_bias] if snap.lstsq_weights is not None else None
    layout = _line_layout(snap, "value", legend=True)
    layout["yaxis"]["exponentformat"] = "e"  # a diverging run's values reach 1e30 and more
    data, lines = [], []
    for i, name in enumerate(names):
        colour = COLOURS[i % len(COLOURS)]
        data.append(dict(
            type="scatter", x=steps, y=values[:, i], mode="lines", name=name,
            line=dict(color=colour, width=3),
            hovertemplate=f"{name} at step %{{x}}: %{{y:.4g}}<extra></extra>",
        ))  # fmt: skip
        lines.append(_hline(true[i], colour, "dash"))
        if lstsq is not None and cfg.noise > 0:
            lines.append(_hline(lstsq[i], colour, "dot"))
    _plot(data, layout | dict(shapes=lines), "params_chart")
    reference = "dashed: true value; dotted: least squares" if cfg.noise > 0 else "dashed: true value"
    st.caption(f"{reference} (without noise the least-squares answer is the true one).")


def _split_picture(blocks: list[tuple[str, int, int]], batch: int) -> None:
    """The batch as one bar cut into a coloured block per device, labelled with its rows."""
    data = []
    for i, (device, start, stop) in enumerate(blocks):
        short = device.split(" ")[0]
        rows = stop - start
        bar = dict(
            type="bar",
            y=[""],
            x=[rows],
            base=[start],
            orientation="h",
            name=short,
            marker=dict(color=COLOURS[i % len(COLOURS)], line=dict(color="white", width=2)),
            text=[f"{short}: {rows} row{'s' if rows != 1 else ''} ({start}–{stop - 1})"],
            textposition="inside",
            insidetextanchor="middle",
            textfont=dict(color="white", size=15),
            hovertemplate=f"{device}<br>rows {start}–{stop - 1} ({rows})<extra></extra>",
        )
        data.append(bar)
    layout = _layout(
        56,
        barmode="overlay",
        showlegend=False,
        uniformtext=dict(minsize=10, mode="hide"),
        margin=dict(l=10, r=10, t=0, b=0),
        xaxis=dict(range=[0, batch], visible=False),
        yaxis=dict(visible=False),
    )
    _plot(data, layout, "split_chart")


def _split_source(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> tuple[str, list[dict]] | None:
    """What the split panels show: the latest batch of the run, or the planned first batch before a run."""
    if snap is not None and snap.latest is not None:
        step = snap.latest
        n = len(step.replicas)
        where = ", emulated on the CPU" if snap.emulated else ""
        chunks = f"{n} chunk{'s' if n != 1 else ''}"
        rows = step.input_shape[0]
        title = f"The split of step {step.step}: {rows} rows cut into {chunks}, one per device{where}"
        return title, report.split_table(step)
    if cfg is not None:
        rows = report.planned_split(cfg, list(gpus.values()))
        return f"The split each batch will get: {rows[-1]['Rows']} rows over {len(rows) - 1} devices", rows
    return None


def _shows_ddp(snap: Snapshot | None, cfg: FitConfig | None) -> bool:
    """The split panels show the run's strategy, or before any run the controls' one."""
    if snap is not None:
        return report.is_ddp(snap)
    return cfg is not None and report.is_ddp(cfg)


def _shards_source(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> tuple[str, dict, str] | None:
    """(title, Detail('shards') value, which epoch): the run's latest shards, or epoch 1's before them."""
    if snap is not None and snap.extra.get("shards"):
        value = snap.extra["shards"]
        return "Each rank's shard of the dataset. " + report.shards_title(value, "latest"), value, "latest"
    config = snap.config if snap is not None else cfg
    if config is None:
        return None
    value = report.planned_shards(config, list(gpus.values()))
    return "The shards each rank will get. " + report.shards_title(value, "first"), value, "first"


def _shards_picture(value: dict, which: str) -> None:
    """A strip per rank over the dataset's rows: a cell where the rank got the row, pale for padding."""
    n, k = value["data_size"], value["world_size"]
    if report.row_owners(value, which) is None or n > MAX_SHARD_PICTURE_ROWS:
        st.caption(f"{n} rows are too many to draw one by one; the table below counts them.")
        return
    ranks = report.shard_table(value, which)
    names = [f"rank {r['rank']} ({r['rows']} rows)" for r in ranks]
    own = [[None] * n for _ in range(k)]  # (K, N): the rank's number where it got the row, else a gap
    pad = [[None] * n for _ in range(k)]  # the same for the rows repeated to pad its shard
    for r in ranks:
        for i in r["indices"]:
            own[r["rank"]][i] = r["rank"]
        for i in r["padded"]:
            own[r["rank"]][i], pad[r["rank"]][i] = None, r["rank"]
    # one flat colour per rank: value r falls in the band [r / K, (r + 1) / K] of the colour scale
    scale = [[(r + edge) / k, COLOURS[r % len(COLOURS)]] for r in range(k) for edge in (0, 1)]
    text = [[str(i) for i in range(n)]] * k
    data = []
    for z, opacity, colour, what in ((own, 1.0, "white", "got"), (pad, 0.35, "#111418", "repeated to pad")):
        data.append(dict(
            type="heatmap",
            x=list(range(n)), y=names, z=z, zmin=-0.5, zmax=k - 0.5, colorscale=scale, showscale=False,
            opacity=opacity, xgap=1 if n <= 400 else 0, ygap=4, hoverongaps=False,
            text=text, texttemplate="%{text}" if n <= 40 else None, textfont=dict(color=colour, size=15),
            hovertemplate=f"dataset row %{{x}}: {what} by %{{y}}<extra></extra>",
        ))  # fmt: skip
    rows = AXIS | dict(range=[-0.5, n - 0.5], title=dict(text="dataset row", standoff=4), showgrid=False)
    layout = _layout(
        60 + 36 * k,
        showlegend=False,
        margin=dict(l=10, r=10, t=4, b=10),
        xaxis=rows | dict(automargin=True, showline=False, ticks=""),
        yaxis=AXIS | dict(autorange="reversed", showgrid=False, showline=False, automargin=True),
    )
    _plot(data, layout, "shards_chart")


def shards_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> None:
    """DDP's split: which dataset rows each rank got from the sampler this epoch, padding marked."""
    source = _shards_source(snap, cfg, gpus)
    if source is None:
        return
    title, value, which = source
    st.markdown(f"**{report.escape_markdown(title)}**")
    _shards_picture(value, which)
    if value["padding"]:
        st.caption(
            "Pale cells are padding: rows repeated from the start of the epoch's order, so that every rank "
            "has the same number of rows (DDP needs the same steps on every rank); they count twice."
        )


def split_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> None:
    """The picture of the latest batch cut into one block per device (for ddp: each rank's shard)."""
    if _shows_ddp(snap, cfg):
        shards_ui(snap, cfg, gpus)
        return
    source = _split_source(snap, cfg, gpus)
    if source is None:
        st.subheader("The split")
        st.caption("Fix the settings to see how a batch would be split.")
        return
    title, rows = source
    st.markdown(f"**{title}**")
    _split_picture(report.split_blocks(rows), rows[-1]["Rows"])
    idle = report.idle_devices(snap) if snap is not None else []
    if idle:
        st.caption(f"Idle on this step, no rows left for them: {', '.join(idle)}.")


def rank_tables_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> None:
    """DDP: each rank's dataset rows this epoch, and each rank's shapes in the latest step."""
    source = _shards_source(snap, cfg, gpus)
    if source is None:
        return
    _, value, which = source
    st.subheader("Each rank's rows and shapes")
    st.table(pd.DataFrame(report.shard_rows(value, which)).astype({"Rank": str}), hide_index=True)
    if snap is not None and snap.latest is not None:
        step = snap.latest
        rows = report.rank_table(step)
        caption = (
            f"Step {step.step}: each rank runs forward on its own rows and computes its own loss; the loss "
            f"charted is their mean ({step.loss:.6g}). Nothing is gathered: DDP all-reduces the gradients."
        )
    else:
        rows = report.planned_rank_table(snap.config if snap is not None else cfg, list(gpus.values()))
        caption = "Step 1, planned: each rank takes ceil(batch size / ranks) rows of its shard per step."
    st.table(pd.DataFrame(rows).astype({"Rank": str}), hide_index=True)
    st.caption(caption)


def split_table_ui(snap: Snapshot | None, cfg: FitConfig | None, gpus: dict) -> None:
    """Each replica's input and output shape, and the gathered `Outside` shape (for ddp: each rank's)."""
    if _shows_ddp(snap, cfg):
        rank_tables_ui(snap, cfg, gpus)
        return
    source = _split_source(snap, cfg, gpus)
    if source is None:
        return
    st.subheader("Shapes inside and outside the model")
    st.table(pd.DataFrame(source[1]), hide_index=True)


def console_ui(snap: Snapshot | None) -> None:
    st.subheader("Console")
    if snap is None or not snap.recent:
        lines = (
            "each rank's In Model lines"
            if snap is not None and report.is_ddp(snap)
            else ("the tutorial's In Model / Outside lines")
        )
        st.caption(f"The console shows {lines} for the latest steps.")
        return
    # a tab as 4 spaces keeps the tutorial's lines on one line at the page's width
    st.code(report.console_text(snap).expandtabs(4), language="text", wrap_lines=True)


def results_ui(snap: Snapshot | None) -> None:
    if snap is None or not snap.weights:
        return
    title = "Results" if not snap.active else f"Parameters so far (step {snap.step})"
    st.subheader(title)
    rows = report.results_table(snap)
    table = pd.DataFrame(rows)
    for column in ("Learned", "True", "Least squares"):
        table[column] = table[column].map(lambda v: "" if v is None else f"{v:.4f}")
    for column in ("Learned − true", "Learned − least squares"):
        table[column] = table[column].map(lambda v: "" if v is None else f"{v:+.4f}")
    st.table(table, hide_index=True)
    if snap.final_loss is not None:
        st.caption(f"Loss of the last batch: {snap.final_loss:.6g}")
    if report.is_ddp(snap):
        ranks_results_ui(snap)


def ranks_results_ui(snap: Snapshot) -> None:
    """DDP: every rank's own parameters after the last step, which the all-reduce keeps identical."""
    rows = report.final_rows(snap)
    if not rows:
        if not snap.active:
            st.caption("The ranks did not report their final parameters.")
        return
    st.markdown("**Every rank's parameters after the last step**")
    table = pd.DataFrame(rows)
    for name in report.parameter_names(snap.config.n_features):
        table[name] = table[name].map(lambda v: f"{v:.6f}")
    st.table(table.astype({"Rank": str}), hide_index=True)
    agreement = report.final_agreement(snap)
    (st.success if snap.extra["final"]["identical"] else st.warning)(agreement)


def downloads_ui(snap: Snapshot | None) -> None:
    if snap is None or snap.active or not snap.loss_history:
        return
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        "Download history (CSV)",
        report.history_csv(snap),
        file_name=f"fitcore-{snap.run_id}-history.csv",
        mime="text/csv",
        key="download_csv",
        on_click="ignore",
    )
    right.download_button(
        "Download result (JSON)",
        report.result_json(snap),
        file_name=f"fitcore-{snap.run_id}-result.json",
        mime="application/json",
        key="download_json",
        on_click="ignore",
    )


def live_panels(was_active: bool, cfg: FitConfig | None, gpus: dict) -> None:
    """Everything that changes while a run trains; a fragment that reruns on a timer only during a run."""
    snap = refresh_snapshot()
    if was_active and (snap is None or not snap.active):
        st.rerun()  # the run has ended: a full rerun redraws the buttons and turns the timer off
    values = control_values()
    status_ui(snap, cfg)
    differences_ui(snap, values)
    split_ui(snap, cfg, gpus)
    left, right = st.columns(2)
    with left:
        loss_ui(snap)
    with right:
        params_ui(snap)
    split_table_ui(snap, cfg, gpus)
    console_ui(snap)
    results_ui(snap)
    downloads_ui(snap)


def live_ui(cfg: FitConfig | None, gpus: dict) -> None:
    """Decide at each full rerun whether the live panels refresh on a timer: only while a run is active."""
    snap = st.session_state.snap
    every = None
    if snap is not None and snap.active:
        every = PAUSED_REFRESH_SECONDS if snap.status in (Status.PAUSED, Status.QUEUED) else REFRESH_SECONDS
    st.fragment(run_every=every)(live_panels)(every is not None, cfg, gpus)


def explain_ui(strategy: str) -> None:
    with st.expander("How DataParallel splits a batch", expanded=False):
        st.markdown(strategies.STRATEGIES["dataparallel"].markdown)
    ddp = strategies.STRATEGIES["ddp"]
    with st.expander("DataParallel versus DistributedDataParallel", expanded=strategy == ddp.name):
        st.markdown(ddp.markdown)


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
    refresh_snapshot()
    sidebar_ui(gpus)

    values = control_values()
    try:
        cfg, config_error = (
            report.config_from_controls(values, pool.settings.limits, list(gpus.values())),
            None,
        )
    except ConfigError as exc:
        cfg, config_error = None, report.error_text(exc)
    want = report.to_query(values, st.session_state.pace)
    if st.query_params.to_dict() != {**st.query_params.to_dict(), **want}:
        st.query_params.update(want)  # the link reproduces the setup

    strategy = st.session_state.strategy
    st.title(strategies.strategy(strategy).title)
    messages_ui(values, config_error)
    run_controls_ui(gpus, can_start=cfg is not None)
    live_ui(cfg, gpus)
    explain_ui(strategy)


# Streamlit runs this file as __main__; a spawned DDP rank imports the same file as __mp_main__ (spawn
# re-imports the parent's main module) and must not build a page.
if __name__ == "__main__":
    main()
