"""The equivalence lab and the what-if projection (fitcore.lab.compare, fitcore.lab.whatif), below the first
screen."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard.panels import PLOT_CONFIG
from fitcore.core import links, projection
from fitcore.core.config import Checked, ConfigError, FitConfig, check
from fitcore.core.i18n import t
from fitcore.lab import whatif
from fitcore.protocols import registry
from fitcore.view import controls

COMPARE_MAX_STEPS = 5_000  # the lab trains in the page's own script run: three models, and more per toggle
WHATIF_STEPS = 50  # steps the what-if measures its starting point on
WHATIF_WIDTHS = {  # the what-if table's columns, in px: the longest cell of each, in either language
    "lab.col.strategy": 160, "lab.col.devices": 64, "lab.col.memory": 76, "lab.col.sent": 76,
    "lab.col.step": 76, "lab.col.share": 100, "lab.col.note": 235,
}  # fmt: skip
# the toggles a form can get wrong, or ask together: their catalog keys
TOGGLE_LABELS = {
    "loss_reduction": "lab.reduction",
    "accumulate": "lab.accumulate",
    "batchnorm": "lab.batchnorm",
    "uneven": "lab.uneven",
}


def lab_ui(checked: Checked | None) -> None:
    """Two questions after a run: does DDP give the same model, and what would 1,024 devices do? Both of
    the controls' settings, as the page checked them."""
    if checked is None:
        return
    compare_tab, whatif_tab = st.tabs([t("lab.compare.tab"), t("lab.whatif.tab")])
    with compare_tab:
        compare_ui(checked)
    with whatif_tab:
        whatif_ui(checked.config)


def compare_ui(checked: Checked) -> None:
    from fitcore.kit import equivalence
    from fitcore.lab import compare

    st.caption(t("lab.compare.caption"))
    cols = st.columns(5)
    reduction = cols[0].selectbox(
        t("lab.reduction"), equivalence.LOSS_REDUCTIONS, key="cmp_reduction", help=t("lab.reduction.help"),
        format_func=lambda r: t(f"lab.reduction.{r}"),
    )  # fmt: skip
    drop_last = cols[1].checkbox("drop_last", key="cmp_drop_last", help=t("lab.drop_last.help"))
    no_set_epoch = cols[2].checkbox(
        t("lab.no_set_epoch"), key="cmp_no_set_epoch", help=t("lab.no_set_epoch.help")
    )
    per_rank = cols[3].checkbox(t("lab.per_rank"), key="cmp_per_rank", help=t("lab.per_rank.help"))
    scale_lr = cols[4].checkbox(t("lab.scale_lr"), key="cmp_scale_lr", help=t("lab.scale_lr.help"))
    traps = traps_ui()
    if st.button(t("lab.compare"), key="cmp_run"):
        try:
            toggles = equivalence.Toggles(reduction, drop_last, not no_set_epoch, per_rank, scale_lr)
            with st.spinner(t("lab.running")):
                result = compare.run(
                    checked.config, toggles, checked.plan, max_steps=COMPARE_MAX_STEPS, traps=traps()
                )
            st.session_state.cmp_result = result
        except ConfigError as exc:
            st.session_state.cmp_result = None
            label = TOGGLE_LABELS.get(exc.field)
            st.error(exc.named(t(label)) if label else controls.error_text(exc))
    result = st.session_state.get("cmp_result")
    if not result:
        return
    rows, engines = result["results"], result["config"]["engines"]
    # the answer to the class's question first, in one sentence; the table and the chart are its evidence
    said = compare.verdict(result, _name)
    (st.success if compare.same_as_one_device(result) else st.warning)(said)
    st.dataframe(
        pd.DataFrame(
            {
                t("lab.col.strategy"): [_name(r["strategy"]) for r in rows],
                t("lab.col.devices"): [r["devices"] for r in rows],
                t("lab.col.result"): [t(f"cli.compare.status.{r['status']}") for r in rows],
                t("lab.col.max_diff"): [f"{r['max_abs_diff']:.3g}" for r in rows],
                t("lab.col.first_step"): [str(r["first_divergent_step"] or "-") for r in rows],
                t("lab.col.final_diff"): [f"{r['final_abs_diff']:.3g}" for r in rows],
                t("lab.col.engine"): [r.get("engine") or engines[r["strategy"]] for r in rows],
                t("lab.col.time"): [_real_time(r) for r in rows],
            }
        ),
        hide_index=True,
        key="cmp_table",
        column_config={t("lab.col.engine"): st.column_config.TextColumn(width="large")},
    )
    for r in rows:
        for cause in r["causes"]:
            st.markdown(t("lab.cause", strategy=_name(r["strategy"]), cause=cause))
    floor = 1e-12  # a log axis has no 0: identical parameters are drawn at the floor
    tol = result["config"]["tolerance"]
    # lines that lie on each other stay apart to the eye: each its own dash and marker, the later ones thinner
    dashes, symbols = ("solid", "dash", "dot", "dashdot"), ("circle", "square", "diamond", "triangle-up")
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": _name(r["strategy"]),
            "y": [max(v, floor) for v in r["per_step"]],
            "line": {"dash": dashes[i % len(dashes)], "width": 3 - min(i, 2) * 0.75},
            "marker": {"symbol": symbols[i % len(symbols)], "size": 6},
        }
        for i, r in enumerate(rows)
    ]
    layout = {
        "height": 260, "margin": {"l": 60, "r": 10, "t": 10, "b": 40},
        # 1e-12, not plotly's SI "1p", which reads as a unit
        "yaxis": {"type": "log", "title": t("lab.chart.y"), "exponentformat": "e", "showexponent": "all"},
        "xaxis": {"title": t("lab.chart.x")},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": tol, "y1": tol,
                    "line": {"dash": "dot", "width": 1}}],
        "annotations": [{"xref": "paper", "x": 0, "y": math.log10(tol), "yanchor": "bottom",
                         "xanchor": "left", "showarrow": False,
                         "text": t("lab.chart.tolerance", tol=format(tol, "g"))}],
    }  # fmt: skip
    st.plotly_chart(go.Figure(data, layout), config=PLOT_CONFIG, key="cmp_chart")


def traps_ui():
    """The next traps, grouped under the question each asks; returns a maker of their Traps."""
    from fitcore.lab.traps import MAX_ACCUMULATE, Traps

    bn, acc, uneven = st.columns(3)
    bn.markdown(t("lab.q.batchnorm"))
    batchnorm = bn.checkbox(t("lab.batchnorm"), key="cmp_batchnorm", help=t("traps.help.batchnorm"))
    sync = bn.checkbox("SyncBatchNorm", key="cmp_sync_bn", help=t("traps.help.sync_batchnorm"))
    acc.markdown(t("lab.q.accumulate"))
    n = acc.number_input(
        t("lab.accumulate"), 1, MAX_ACCUMULATE, 1, key="cmp_accumulate", help=t("traps.help.accumulate")
    )
    no_sync = acc.checkbox("no_sync()", True, key="cmp_no_sync", help=t("lab.no_sync.help"))
    scaling = acc.checkbox(
        t("lab.loss_scaling"), True, key="cmp_loss_scaling", help=t("lab.loss_scaling.help")
    )
    uneven.markdown(t("lab.q.uneven"))
    short = uneven.checkbox(t("lab.uneven"), key="cmp_uneven", help=t("traps.help.uneven"))
    join = uneven.checkbox("Join", key="cmp_join", help=t("traps.help.join"))
    return lambda: Traps(batchnorm, sync, int(n), no_sync, scaling, short, join).validate()


def _real_time(row: dict) -> str:
    """A real run's own time and status; '-' for the rows computed in this process."""
    if "seconds" not in row:
        return "-"
    return t("lab.real_time", seconds=f"{row['seconds']:.1f}", status=t(f"lab.status.{row['status']}"))


def whatif_ui(cfg: FitConfig) -> None:
    st.caption(t("lab.whatif.caption"))
    cols = st.columns(4)
    params = cols[0].select_slider(
        t("lab.params"), [3, 1e6, 1e8, 1e9, 7e9, 13e9, 70e9], value=7e9, key="wi_params",
        format_func=whatif.params_text, help=t("lab.sources"),
    )  # fmt: skip
    link = cols[1].selectbox(
        t("lab.link"), list(links.LINKS), key="wi_link", format_func=links.link_name,
        help=t("lab.link.help", sources=t("lab.sources")),
    )  # fmt: skip
    memory = cols[2].number_input(t("lab.memory"), 1.0, 10_000.0, 80.0, key="wi_memory")
    precision = cols[3].selectbox(
        t("lab.precision"), projection.PRECISIONS, key="wi_precision",
        format_func=lambda p: t(f"cli.whatif.precision.{p}"),
    )  # fmt: skip
    state = projection.state_bytes(cfg.optimizer, precision)  # the run's own optimizer
    if st.button(t("lab.measure"), key="wi_run"):
        try:
            one = dataclasses.replace(cfg, strategy=whatif.measured_strategy())
            measured = whatif.measure(check(one), WHATIF_STEPS)
            st.session_state.wi_measured = measured
            # a strategy that runs a projected row for real (FSDP's ZeRO-3): its measured bytes beside it
            calibrate = registry.of(cfg).calibrate
            st.session_state.wi_calibration = calibrate(cfg, max(2, cfg.workers)) if calibrate else None
        except ConfigError as exc:
            st.error(controls.error_text(exc))
    measured = st.session_state.get("wi_measured")
    if measured is None:
        return
    st.metric(t("lab.measured"), f"{measured.compute_seconds * 1e6:.0f} µs", help=measured.where)
    rows = whatif.table(measured, params, link=link, device_memory=memory * 1e9, state=state)
    st.caption(t("lab.projected"))
    st.caption(t("lab.per_device") + " " + whatif.state_text(state))
    moves = t("cli.whatif.what_moves")
    st.caption(moves[:1].upper() + moves[1:] + ".")
    # the notes as short tags, each explained once below the table: a sentence a row would be cut at 1280 px
    st.dataframe(
        pd.DataFrame(
            {
                t("lab.col.strategy"): [whatif.page_title(r["strategy"]) for r in rows],
                t("lab.col.devices"): [r["devices"] for r in rows],
                t("lab.col.memory"): [whatif.memory_text(r["memory_per_device_bytes"]) for r in rows],
                t("lab.col.sent"): [whatif.human(r["comm_bytes_per_device"], "B") for r in rows],
                t("lab.col.step"): [whatif.seconds_text(r["step_seconds"]) for r in rows],
                t("lab.col.share"): [whatif.share_text(r["comm_share"]) for r in rows],
                t("lab.col.note"): [t("lab.tag.join").join(_tag(r, tag) for tag in r["tags"]) for r in rows],
            }
        ),
        hide_index=True,
        key="wi_table",
        # widths that hold every cell at 1280 px (787 of the table's 791 px); a wider page spreads the rest
        column_config={t(key): st.column_config.Column(width=width) for key, width in WHATIF_WIDTHS.items()},
    )
    if links.LINKS[link].extremes():  # a measured link: what its repeats spanned, not one alpha
        st.caption(whatif.spread_text(dataclasses.asdict(links.LINKS[link]), "lab.spread"))
    shown = {tag for r in rows for tag in r["tags"]}
    for tag in whatif.NOTE_TAGS:
        if tag in shown:
            st.caption(t(f"lab.legend.{tag}", n=whatif.DEVICES_PER_MACHINE, have=f"{memory:.3g}"))
    calibration = st.session_state.get("wi_calibration")
    if calibration:
        st.caption(t("cli.whatif.calibration.head", name=whatif.page_title(calibration["strategy"])))
        st.caption(calibration["note"])


def _tag(row: dict, tag: str) -> str:
    """A what-if row's note in a few words (its sentence is the command line's `note`)."""
    excess = row["device0_excess_bytes"]
    return t(f"lab.tag.{tag}", bytes=whatif.memory_text(excess) if excess is not None else "",
             share=whatif.share_text(row.get("bubble_share")))  # fmt: skip


def _name(strategy: str) -> str:
    """A strategy's name in the lab's table, chart and causes: its own word for it."""
    return t(registry.strategy(strategy).words["lab"])
