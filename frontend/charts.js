// The loss and parameter charts, drawn by plotly.js (served by the app's own route, loaded once per page):
// hover shows each point's step and value, zoom and a PNG download come with it. New points are appended
// with Plotly.extendTraces; the whole chart is drawn again (Plotly.react, keeping the reader's zoom) only
// when what it stands on changes: another run, a rerun's data, the width, an axis's range, a divergence.

import { COLOURS, FONT, VIEW_BOTTOM, clear, el, fitText, textWidth, topOnPage } from "./dom.js";
import { formatNumber, isNum } from "./format.js";
import { tr } from "./words.js";
import {
  divergenceStep, forLogAxis, lastStepOf, lossRange, paramCaps, paramDomain, paramSeries, positive,
  smoothLog, thin,
} from "./series.js";

const CHART_H = 180;
const HEAD_H = 22;  // a chart's title line (live.css .fl-chart-head)
const CHART_MIN = 130;  // the lowest the plots go to stay on the first screen: a loss curve still reads
const MARGIN = { l: 58, r: 14, t: 14, b: 26, pad: 0 };
const PRESENTER_MARGIN = { ...MARGIN, t: 8, b: 22 };  // the least that holds the ticks' labels: more plot
const COLUMNS = 500;         // a history longer than two points a column is thinned to each column's extremes
const MAX_TRACE = 2000;      // appended points up to this many in a trace; then it is thinned again
const RAW_COLOUR = "#9aa5b1";  // the unsmoothed loss, behind the smoothed one
const GRID = "#eef0f3";
const AXIS = "#8a94a0";
const DIVERGED = "#c92a2a";
const CONFIG = {
  displaylogo: false, displayModeBar: "hover", responsive: false, doubleClick: "reset",
  modeBarButtons: [["toImage", "zoom2d", "pan2d", "resetScale2d"]],
};

// `name` names the PNG download ("fitcore-loss-per-step.png"); the heading's words come with the texts.
export function chartFigure(name) {
  const figure = el("figure", "fl-chart");
  const caption = el("figcaption", "fl-chart-head");
  const heading = el("span", "fl-chart-title");
  const legend = el("span", "fl-legend");
  caption.append(heading, legend);
  const plot = el("div", "fl-plot");
  figure.append(caption, plot);
  return { figure, heading, legend, plot, name, drawn: null };
}

// ---------------------------------------------------------------- plotly, once per page

let loading = null;

// url: plotly.js's address, or a function that promises one (a notebook's widget asks its kernel for the
// file once per page, fitcore/notebook/widget.py, as Jupyter serves no file of a package).
export function loadPlotly(url) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!loading) {
    const where = typeof url === "function" ? Promise.resolve().then(url) : Promise.resolve(url);
    loading = where.then((url) => new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = url;
      script.async = true;
      script.onload = () => (window.Plotly ? resolve(window.Plotly) : reject(new Error(`${url}: no Plotly`)));
      script.onerror = () => {
        loading = null;  // a later render tries again
        script.remove();
        reject(new Error(`${url} did not load`));
      };
      document.head.append(script);
    }), (error) => {
      loading = null;
      throw error;
    });
  }
  return loading;
}

// plotly.js puts its rules (the layered SVGs, the mode bar, the hover label) in the document's head, which
// a shadow root does not see: the component's root gets a copy (the live view's, and each figure's).
export function adoptPlotlyStyles(root) {
  if (!(root instanceof ShadowRoot) || root.querySelector("style[data-fl-plotly]")) return;
  const sheet = document.getElementById("plotly.js-style-global");
  if (!sheet || !sheet.sheet) return;
  const style = document.createElement("style");
  style.dataset.flPlotly = "";
  style.textContent = [...sheet.sheet.cssRules].map((rule) => rule.cssText).join("\n");
  root.prepend(style);
}

// plotly.js is 4.8 MB that the browser compiles and runs on the page's one thread: 0.7 s of a loaded 2-core
// machine, in which the page draws nothing and handles no message, a click on Start included. It is asked
// for after the frame that first draws the view (each plot shows its hint until then), before any run: a run
// that started first would stall that long in its first second. The page's Start is shown once it is in
// (app.py's PAGE_CSS hides it until the document says fitcore-ready, and shows it after 4 s regardless), so
// that a Start pressed at any moment it can be pressed shows its run at once.
function ensurePlotly(state) {
  if (state.charts.loading) return;
  state.charts.loading = true;
  requestAnimationFrame(() => setTimeout(() => loadCharts(state), 0));
}

const saysReady = () => document.body && document.body.classList.add("fitcore-ready");

function loadCharts(state) {
  loadPlotly(state.plotlyUrl).then(() => {
    saysReady();
    state.charts.loading = state.charts.failed = false;
    state.dirty.charts = true;
    if (!state.disposed) state.redraw();
  }, (error) => {
    saysReady();  // no charts, said in their place; the run's buttons work all the same
    state.charts.loading = false;
    state.charts.failed = true;  // its words stay until a later render's try succeeds
    for (const fig of [state.dom.lossFig, state.dom.paramFig]) {
      fig.plot.textContent = tr("live.chart.no_plotly", { error: error.message });
    }
  });
}

export function disposeCharts(state) {
  if (!window.Plotly) return;
  for (const fig of [state.dom.lossFig, state.dom.paramFig]) window.Plotly.purge(fig.plot);
}

// ---------------------------------------------------------------- drawing

export function renderCharts(state) {
  const width = Math.max(260, Math.floor(((state.width || 960) - 16) / 2));
  renderLegend(state.dom.lossFig, lossLegend(state), width);
  renderLegend(state.dom.paramFig, paramLegend(state), width, { all: true });
  fitLegendLines(state);
  const Plotly = window.Plotly;
  if (!Plotly) {
    if (!state.charts.failed) showEmpty(state);
    ensurePlotly(state);
    return;
  }
  adoptPlotlyStyles(state.parentElement);
  update(Plotly, state.dom.lossFig, lossChart(state, width));
  update(Plotly, state.dom.paramFig, paramChart(state, width));
}

// Until plotly.js is in: each plot's hint, in its place, at its height.
function showEmpty(state) {
  const hints = [[state.dom.lossFig, "live.chart.loss.empty"], [state.dom.paramFig, "live.chart.params.empty"]];
  for (const [fig, key] of hints) {
    const text = tr(key);
    if (fig.plot.firstChild && fig.plot.firstChild.textContent === text) continue;
    clear(fig.plot);
    fig.plot.append(el("div", "fl-plot-empty", text));
  }
}

// A chart is {key, full(), extend(drawn)}: the same key and room left in the traces append the new
// points; anything else draws the whole chart again.
function update(Plotly, fig, chart) {
  const drawn = fig.drawn;
  if (drawn && drawn.key === chart.key) {
    const more = chart.extend(drawn);
    if (!more) return;
    if (drawn.length + more.added <= MAX_TRACE) {
      Plotly.extendTraces(fig.plot, { x: more.x, y: more.y }, more.indices);
      drawn.length += more.added;
      return;
    }
  }
  const whole = chart.full();
  if (!fig.drawn) fig.plot.querySelector(":scope > .fl-plot-empty")?.remove();  // the hint before plotly.js
  const draw = fig.drawn ? Plotly.react : Plotly.newPlot;
  draw(fig.plot, whole.traces, whole.layout, { ...CONFIG, toImageButtonOptions: {
    filename: `fitcore-${fig.name}`, scale: 2 } });
  fig.drawn = { ...whole.drawn, key: chart.key };
}

function xRange(state) {
  const total = state.run && state.run.total_steps;
  return [0, isNum(total) && total > 0 ? total : Math.max(1, lastStepOf(state.loss, state.params))];
}

function line(points, name, colour, { width = 2.5, dash, hover = ".4~g" } = {}) {
  return { type: "scatter", mode: "lines", name, x: points.map((p) => p[0]), y: points.map((p) => p[1]),
           line: { color: colour, width, dash, simplify: false }, yhoverformat: hover, connectgaps: false };
}

// live.css may make the plots lower (the presenter's bigger picture on a short screen): --fl-chart-h; a
// legend's second line comes out of the plots' height, and so does what a tall picture (eight devices, a
// box of many chips) leaves of the first screen, down to CHART_MIN: the charts stay on a projector's screen
function chartHeight(state) {
  const base = parseFloat(getComputedStyle(state.dom.root).getPropertyValue("--fl-chart-h")) || CHART_H;
  const wanted = base - (state.legendExtra || 0);
  return Math.max(Math.min(CHART_MIN, wanted), Math.min(wanted, state.roomLeft ?? Infinity));
}

// The first screen's height less everything above the plots and the live view's bottom edge below them.
function roomLeft(state) {
  return Math.floor(window.innerHeight - topOnPage(state.dom.lossFig.plot) - VIEW_BOTTOM);
}

// Did what lies above the plots (a picture drawn taller or lower) or the screen's height change the room
// the plots have? Then they are drawn again at their new height.
export function chartRoomChanged(state) {
  return state.roomLeft !== undefined && roomLeft(state) !== state.roomLeft;
}

// Both heads as tall as the taller one (the plots stay side by side), the plots lower by what that adds.
function fitLegendLines(state) {
  const heads = [state.dom.lossFig, state.dom.paramFig].map((fig) => fig.heading.parentElement);
  heads.forEach((head) => { head.style.minHeight = ""; });
  const extra = Math.max(0, ...heads.map((head) => head.offsetHeight - HEAD_H));
  heads.forEach((head) => { head.style.minHeight = `${HEAD_H + extra}px`; });
  state.legendExtra = extra;
  state.roomLeft = roomLeft(state);
  // the plots' height follows the legend's lines and live.css's --fl-chart-h (the presenter's screen)
  const height = `${chartHeight(state)}px`;
  for (const fig of [state.dom.lossFig, state.dom.paramFig]) {
    if (fig.plot.style.height === height) continue;
    fig.plot.style.height = height;
    fig.drawn = null;  // drawn again whole, at the new height
  }
}

function layout(state, width, xr, yaxis, extras) {
  return {
    width, height: chartHeight(state), showlegend: false, hovermode: "x unified",
    margin: state.dom.root.classList.contains("fl-presenter") ? PRESENTER_MARGIN : MARGIN,
    uirevision: state.run ? state.run.id || "planned" : "none",  // a reader's zoom survives redraws
    font: { family: FONT, size: 14, color: "#343a40" },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#ffffff",
    hoverlabel: { bgcolor: "#ffffff", bordercolor: "#adb5bd", namelength: -1, font: { family: FONT, size: 14, color: "#111418" } },
    xaxis: { range: xr, showline: true, linecolor: AXIS, gridcolor: GRID, zeroline: false, ticks: "",
             nticks: Math.max(3, Math.floor((width - MARGIN.l - MARGIN.r) / 60)), hoverformat: "d",
             unifiedhovertitle: { text: tr("live.chart.hover_step", { step: "%{x}" }) } },
    yaxis: { showline: true, linecolor: AXIS, gridcolor: GRID, zeroline: false, ticks: "", ...yaxis },
    ...extras,
  };
}

// A dashed red line and its words where the run diverged; a hint while a chart has no points yet.
function marks(xr, diverged, empty) {
  const shapes = [];
  const annotations = [];
  if (diverged !== null) {
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: diverged, x1: diverged, y0: 0, y1: 1,
                  line: { color: DIVERGED, width: 2, dash: "5px,3px" } });
    const right = (diverged - xr[0]) / (xr[1] - xr[0] || 1) < 0.6;
    annotations.push({ xref: "x", yref: "paper", x: diverged, y: 1, yanchor: "top", showarrow: false,
                       xanchor: right ? "left" : "right", xshift: right ? 6 : -6, bgcolor: "#ffffff",
                       text: `<b>${tr("live.chart.diverged_at", { step: diverged })}</b>`,
                       font: { color: DIVERGED, size: 14 } });
  }
  if (empty) {
    annotations.push({ xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false, text: empty,
                       font: { color: "#6c757d", size: 15 } });
  }
  return { shapes, annotations };
}

function lossChart(state, width) {
  const xr = xRange(state);
  const overlay = state.overlay.filter((o) => o && Array.isArray(o.loss));
  const mine = positive(state.loss);
  const source = mine.length ? mine : overlay.flatMap((o) => positive(o.loss));
  const [lo, hi] = lossRange(source.map(([, v]) => v));
  const diverged = divergenceStep(state.run);
  const weight = state.smoothing;
  const own = ownName(state);
  const key = [state.run && state.run.id, state.dataVersion, width, chartHeight(state), xr, lo, hi, diverged,
               weight, state.loss.length === 0].join("|");
  const ownIndex = overlay.length + (weight > 0 ? 1 : 0);
  return {
    key,
    full() {
      const carry = { acc: 0, n: 0 };
      const raw = forLogAxis(state.loss);
      const traces = overlay.map((o, i) => line(thin(forLogAxis(o.loss), COLUMNS, xr), o.label,
        COLOURS[(i + 1) % COLOURS.length], { width: 1.5, dash: "6px,4px" }));
      if (weight > 0) {
        traces.push(line(thin(raw, COLUMNS, xr), tr("live.chart.loss.raw"), RAW_COLOUR, { width: 1.5 }));
      }
      const shown = thin(smoothLog(raw, weight, carry), COLUMNS, xr);
      traces.push(line(shown, weight > 0 ? tr("live.chart.loss.smoothed", { run: own }) : own, COLOURS[0],
        { width: 3 }));
      // a log axis's range is in decades: a tick every `every` decades leaves room for its label; under two
      // decades, 2 and 5 between the decades where their labels fit (26 px each), else the decades alone
      const fit = Math.max(2, Math.floor((chartHeight(state) - 40) / 26));
      const every = Math.max(1, Math.ceil((hi - lo) / fit));
      const between = 3 * (hi - lo) + 1 <= fit;
      const ticks = hi - lo < 2 && between ? { dtick: "D2" } : { dtick: every, tick0: 0 };
      const yaxis = { type: "log", range: [lo, hi], ...ticks, exponentformat: "power" };
      const empty = state.loss.length ? "" : tr("live.chart.loss.empty");
      return { traces, layout: layout(state, width, xr, yaxis, marks(xr, diverged, empty)),
               drawn: { count: state.loss.length, length: shown.length, carry } };
    },
    extend(drawn) {
      const fresh = forLogAxis(state.loss.slice(drawn.count));
      if (!fresh.length) return null;
      drawn.count = state.loss.length;
      const smoothed = smoothLog(fresh, weight, drawn.carry);
      const series = weight > 0 ? [fresh, smoothed] : [smoothed];
      const indices = weight > 0 ? [ownIndex - 1, ownIndex] : [ownIndex];
      return { x: series.map((s) => s.map((p) => p[0])), y: series.map((s) => s.map((p) => p[1])), indices,
               added: fresh.length };
    },
  };
}

function paramNames(state) {
  if (state.names.length) return state.names;
  return state.params[0] ? state.params[0][1].map((_, i) => `p${i}`) : [];
}

function paramChart(state, width) {
  const xr = xRange(state);
  const names = paramNames(state);
  const caps = paramCaps(state.trueValues, state.lstsq);
  const [lo, hi] = paramDomain(state.trueValues, state.lstsq, state.params);
  const diverged = divergenceStep(state.run);
  const key = [state.run && state.run.id, state.dataVersion, width, chartHeight(state), xr, lo, hi, diverged,
               names.join(","),
               JSON.stringify(state.trueValues), JSON.stringify(state.lstsq)].join("|");
  return {
    key,
    full() {
      const traces = names.map((name, i) => {
        const trace = line(thin(paramSeries(state.params, i, caps), COLUMNS, xr), name,
          COLOURS[i % COLOURS.length], { hover: ".5~g" });
        const refs = [["live.chart.hover_true", state.trueValues[i]],
          ["live.chart.hover_lstsq", state.lstsq && state.lstsq[i]]]
          .filter(([, v]) => isNum(v)).map(([key, v]) => tr(key, { value: formatNumber(v) }));
        if (refs.length) trace.hovertemplate = `%{y:.5~g}  (${refs.join(", ")})`;
        return trace;
      });
      const { shapes, annotations } = marks(xr, diverged, "");
      names.forEach((name, i) => {
        const colour = COLOURS[i % COLOURS.length];
        const across = (y, dash, w) => ({ type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: y, y1: y,
                                          layer: "below", line: { color: colour, width: w, dash } });
        if (isNum(state.trueValues[i])) shapes.push(across(state.trueValues[i], "7px,5px", 1.5));
        if (state.lstsq && isNum(state.lstsq[i])) shapes.push(across(state.lstsq[i], "1.5px,4px", 2));
      });
      const yaxis = { range: [lo, hi], nticks: Math.max(3, Math.floor((CHART_H - 40) / 34)), tickformat: "~r" };
      const longest = traces.reduce((n, t) => Math.max(n, t.x.length), 0);
      return { traces, layout: layout(state, width, xr, yaxis, { shapes, annotations }),
               drawn: { count: state.params.length, length: longest } };
    },
    extend(drawn) {
      const fresh = state.params.slice(drawn.count);
      if (!fresh.length) return null;
      drawn.count = state.params.length;
      const series = names.map((_, i) => paramSeries(fresh, i, caps));
      return { x: series.map((s) => s.map((p) => p[0])), y: series.map((s) => s.map((p) => p[1])),
               indices: names.map((_, i) => i), added: fresh.length };
    },
  };
}

// ---------------------------------------------------------------- legends, above the charts

function ownName(state) {
  return (state.run && (state.run.label || state.run.id)) || tr("live.chart.this_run");
}

function lossLegend(state) {
  // the run's short name (a replay's source and a CSV file's words are in the status line), its whole title
  // on hover
  const run = state.run || {};
  const entries = [{ text: run.legend || ownName(state), full: ownName(state), colour: COLOURS[0] }];
  state.overlay.filter((o) => o && Array.isArray(o.loss)).forEach((o, i) => {
    entries.push({ text: o.label, colour: COLOURS[(i + 1) % COLOURS.length], dash: true });
  });
  return entries;
}

function paramLegend(state) {
  const entries = paramNames(state).map((name, i) => ({ text: name, colour: COLOURS[i % COLOURS.length] }));
  // a CSV file has no true parameters: no true line, and no legend entry for one
  if (state.trueValues.some(isNum)) entries.push({ text: tr("live.chart.legend_true"), colour: "#495057", dash: true });
  if (state.lstsq) {
    entries.push({ text: tr("live.chart.legend_lstsq"), short: tr("live.chart.legend_lstsq_short"),
                   colour: "#495057", dot: true });
  }
  return entries;
}

// `all`: every entry, on a second line where the first is full (the parameters' true and lstsq lines are what
// the noisy-data lesson is about: never behind "+2 more"); otherwise "+N more" for those that do not fit.
function renderLegend(fig, entries, width, { all = false } = {}) {
  const container = fig.legend;
  const room = width - textWidth(fig.heading.textContent, 16, 700) - 16;
  clear(container);
  let used = 0;
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    let text = e.text;
    let w = 27 + textWidth(text, 14) + 10;  // swatch 22 + gap 5, text, gap 10 (live.css)
    if (used + w > room && e.short) {
      text = e.short;
      w = 27 + textWidth(text, 14) + 10;
    }
    const more = i < entries.length - 1 ? 64 : 0;  // keep room for "+N more" unless this is the last
    if (!all && i > 0 && used + w > room - more) {
      container.append(el("span", "fl-legend-more", tr("live.chart.legend_more", { n: entries.length - i })));
      break;
    }
    const item = el("span", "fl-legend-item");
    if (e.full && e.full !== text) item.title = e.full;
    const swatch = el("span", `fl-swatch${e.dash ? " fl-dash" : ""}${e.dot ? " fl-dot" : ""}`);
    swatch.style.setProperty("--c", e.colour);
    item.append(swatch, el("span", "", fitText(text, room - 30, 14)));
    container.append(item);
    used += w;
  }
}
