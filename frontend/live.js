// fitcore_live: the dashboard's live centre, drawn in the browser (st.components.v2 module).
//
// Streamlit calls the default export on mount and again on every script rerun with new `data`; it only
// calls the returned cleanup when the component unmounts. So all state lives on `parentElement`
// (one State per mount), and a rerun updates it instead of building a second poller or DOM.
//
// data = {payload, endpoint, poll_ms, paused_poll_ms, overlay}: see docs in live-schema (payload with
// since=0). While the run is active the component polls `endpoint?run=<id>&since=<last step>` itself, so
// the server's cost per page is one small JSON answer, not a script rerun.

const COLOURS = ["#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#e8590c", "#0c8599", "#c2255c", "#5c940d"];
const PHASE_COLOURS = {
  scatter: "#1f6feb", load: "#1f6feb", replicate: "#7048e8", parallel_apply: "#2f9e44",
  forward: "#2f9e44", gather: "#0c8599", loss: "#e8590c", backward: "#c92a2a", reduce: "#ae3ec9",
  allreduce: "#ae3ec9", optimizer: "#343a40",
};
const SLOW_PACE = 5;            // steps/s: at or below this the phases play in order over each step
const DEMO_PHASE_MS = 900;      // one phase's time when the teacher presses play on a still run
const LOST_AFTER_MS = 3000;     // no answer for this long: say the connection is lost
const MAX_BACKOFF_MS = 5000;    // the slowest retry after errors
const FETCH_TIMEOUT_MS = 8000;  // a request that hangs this long counts as an error
const FONT = '"Source Sans", "Source Sans Pro", "Liberation Sans", "Helvetica Neue", Arial, sans-serif';
const SVG_NS = "http://www.w3.org/2000/svg";
const RAW_COLOUR = "#9aa5b1";  // the unsmoothed loss, behind the smoothed one
const ALL_DONE = Number.MAX_SAFE_INTEGER;  // the stepper's phase index for "the whole step, all done"

// ---------------------------------------------------------------- entry point

export default function fitcoreLive(component) {
  const { data, parentElement, setTriggerValue } = component;
  let state = parentElement.fitcoreLiveState;
  if (!state || state.disposed) {
    state = createState(parentElement);
    parentElement.fitcoreLiveState = state;
  }
  state.setTriggerValue = setTriggerValue;
  acceptMountData(state, data || {});
  return () => dispose(state);
}

// ---------------------------------------------------------------- small helpers

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function isNum(v) {
  return typeof v === "number" && Number.isFinite(v);
}

// The server's clock is what picture.time is on; performance.now() never jumps, Date.now() may.
function clientNowSeconds() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

let measureContext = null;
// Text widths from the same font the SVG uses, so labels are fitted, not guessed.
function textWidth(text, size = 15, weight = 400) {
  if (!measureContext) measureContext = document.createElement("canvas").getContext("2d");
  measureContext.font = `${weight} ${size}px ${FONT}`;
  return measureContext.measureText(text).width;
}

// The longest prefix of `items` (joined by ", ") that fits, with "…" when some are left out.
function fitList(items, maxWidth, size = 15, tail = "") {
  for (let n = items.length; n >= 1; n--) {
    const text = items.slice(0, n).join(", ") + (n < items.length ? " …" : "") + tail;
    if (textWidth(text, size) <= maxWidth) return text;
  }
  return "";
}

function fitText(text, maxWidth, size = 15, weight = 400) {
  if (textWidth(text, size, weight) <= maxWidth) return text;
  for (let n = text.length - 1; n > 0; n--) {
    const cut = text.slice(0, n).trimEnd() + "…";
    if (textWidth(cut, size, weight) <= maxWidth) return cut;
  }
  return "";
}

export function formatBytes(bytes) {
  if (!isNum(bytes)) return "–";
  if (bytes < 1000) return `${Math.round(bytes)} B`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(bytes < 1e4 ? 1 : 0)} kB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(bytes < 1e7 ? 1 : 0)} MB`;
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

export function formatSeconds(seconds) {
  if (!isNum(seconds)) return "–";
  if (seconds === 0) return "0";
  if (seconds < 1e-3) return `${(seconds * 1e6).toFixed(seconds < 1e-5 ? 1 : 0)} µs`;
  if (seconds < 1) return `${(seconds * 1e3).toFixed(seconds < 1e-2 ? 2 : 1)} ms`;
  return `${seconds.toFixed(2)} s`;
}

function formatNumber(v) {
  if (!isNum(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2).replace("e+", "e");
  return String(Number(v.toPrecision(4)));
}

function shape(s) {
  return Array.isArray(s) ? `[${s.join(", ")}]` : "";
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// ---------------------------------------------------------------- state

function createState(parentElement) {
  const state = {
    parentElement, disposed: false, setTriggerValue: null,
    endpoint: "/fitcore/live", byeEndpoint: null, pollMs: 400, queuedPollMs: 1000, overlay: [], smoothing: 0,
    run: null, names: [], trueValues: [], lstsq: null, loss: [], params: [],
    picture: null,
    poll: { timer: null, inFlight: false, failures: 0, lastAnswerAt: performance.now(), stopped: true,
            gone: false, controller: null },
    clock: { offset: null, bestRtt: Infinity },       // server time - client time, in seconds
    reportedStatus: null,                              // the status Streamlit last heard about
    stepper: { playing: true, phase: 0, held: null, stepShownAt: performance.now(), loopStart: 0,
               drawnKey: "" },
    width: 0, raf: null, connTimer: null,
    dirty: { charts: true, picture: true, timeline: true },
  };
  state.dom = buildDom(state);
  parentElement.appendChild(state.dom.root);
  state.resizeObserver = new ResizeObserver(() => onResize(state));
  state.resizeObserver.observe(state.dom.root);
  state.connTimer = setInterval(() => renderConnection(state), 500);
  state.onPageHide = () => sayGoodbye(state);
  window.addEventListener("pagehide", state.onPageHide);
  return state;
}

// The browser's owner id lives in a cookie, sent with the page's websocket and with every poll: a reload,
// or the address opened again in this browser, finds this browser's runs; another browser has its own.
function keepOwner(owner) {
  if (!/^[0-9a-f]{32}$/.test(owner)) return;
  if (document.cookie.split("; ").includes(`fitcore_owner=${owner}`)) return;
  document.cookie = `fitcore_owner=${owner}; path=/; max-age=${30 * 24 * 3600}; SameSite=Strict`;
}

// A closing (or reloading) page says so, and the server frees its run a few seconds later unless a page
// reads it again: a reload does at once, a closed tab never will.
function sayGoodbye(state) {
  if (!state.byeEndpoint || !isActive(state) || !navigator.sendBeacon) return;
  navigator.sendBeacon(`${state.byeEndpoint}?run=${encodeURIComponent(state.run.id)}`);
}

function dispose(state) {
  if (state.disposed) return;
  state.disposed = true;
  stopPolling(state);
  clearInterval(state.connTimer);
  window.removeEventListener("pagehide", state.onPageHide);
  if (state.raf) cancelAnimationFrame(state.raf);
  state.resizeObserver.disconnect();
  state.dom.root.remove();
  if (state.parentElement.fitcoreLiveState === state) delete state.parentElement.fitcoreLiveState;
}

function buildDom(state) {
  const root = el("div", "fl-root");
  const status = el("div", "fl-status");
  const badge = el("span", "fl-badge");
  const statusText = el("span", "fl-status-text");
  const conn = el("span", "fl-conn");
  status.append(badge, statusText, conn);
  const progress = el("div", "fl-progress");
  const progressFill = el("div", "fl-progress-fill");
  progress.append(progressFill);

  const picture = el("section", "fl-picture");
  const head = el("div", "fl-head");
  const phaseTitle = el("div", "fl-phase-title");
  const controls = el("div", "fl-controls");
  const prev = el("button", "fl-btn", "◀");
  prev.title = "previous phase";
  const play = el("button", "fl-btn fl-play", "play");
  const next = el("button", "fl-btn", "▶");
  next.title = "next phase";
  controls.append(prev, play, next);
  head.append(phaseTitle, controls);
  const pillsRow = el("div", "fl-pills-row");
  const pills = el("div", "fl-pills");
  const stepInfo = el("div", "fl-step-info");
  pillsRow.append(pills, stepInfo);
  const pictureSvg = svgEl("svg", { class: "fl-svg" });
  const pictureEmpty = el("div", "fl-empty", "The picture of a step appears here once the run has made one.");
  picture.append(head, pillsRow, pictureSvg, pictureEmpty);

  const charts = el("div", "fl-charts");
  const lossFig = chartFigure("Loss per step");
  const paramFig = chartFigure("Parameters per step");
  charts.append(lossFig.figure, paramFig.figure);

  const timeline = el("section", "fl-timeline");
  const gantt = el("div", "fl-gantt");
  const ganttTitle = el("div", "fl-subtitle");
  const ganttSvg = svgEl("svg", { class: "fl-gantt-svg" });
  gantt.append(ganttTitle, ganttSvg);
  const bytes = el("div", "fl-bytes");
  timeline.append(gantt, bytes);

  root.append(status, progress, picture, charts, timeline);
  prev.addEventListener("click", () => walkPhase(state, -1));
  next.addEventListener("click", () => walkPhase(state, +1));
  play.addEventListener("click", () => togglePlay(state));
  return {
    root, status, badge, statusText, conn, progressFill, picture, phaseTitle, prev, play, next,
    pills, stepInfo, pictureSvg, pictureEmpty, lossFig, paramFig, ganttTitle, ganttSvg, bytes, timeline,
  };
}

function chartFigure(title) {
  const figure = el("figure", "fl-chart");
  const caption = el("figcaption", "fl-chart-head");
  const heading = el("span", "fl-chart-title", title);
  const legend = el("span", "fl-legend");
  caption.append(heading, legend);
  const svg = svgEl("svg", { class: "fl-chart-svg" });
  figure.append(caption, svg);
  return { figure, legend, svg };
}

// ---------------------------------------------------------------- data in

// A script rerun brings the whole history again (since=0): it is the truth for what it covers, and any
// newer points this page already polled are kept on top of it.
function acceptMountData(state, data) {
  if (data.endpoint) state.endpoint = data.endpoint;
  if (data.bye) state.byeEndpoint = data.bye;
  if (isNum(data.poll_ms)) state.pollMs = data.poll_ms;
  if (isNum(data.queued_poll_ms)) state.queuedPollMs = data.queued_poll_ms;
  state.smoothing = isNum(data.smoothing) ? data.smoothing : 0;
  state.overlay = Array.isArray(data.overlay) ? data.overlay : [];
  if (data.owner) keepOwner(data.owner);
  state.dirty.charts = true;
  const payload = data.payload;
  if (!payload || !payload.run) {
    resetRun(state, null);
    render(state);
    return;
  }
  if (!state.run || state.run.id !== payload.run.id) resetRun(state, payload);
  if (state.clock.offset === null && isNum(payload.run.server_time)) {
    // no request timed yet: the payload was made at most a rerun ago, a rough first estimate
    state.clock.offset = payload.run.server_time - clientNowSeconds();
  }
  mergePayload(state, payload, { replace: true });
  state.reportedStatus = state.run.status;
  state.poll.gone = false;
  startPollingIfActive(state);
  render(state);
}

function resetRun(state, payload) {
  stopPolling(state);
  state.run = payload ? { ...payload.run } : null;
  state.loss = [];
  state.params = [];
  state.picture = null;
  state.names = [];
  state.trueValues = [];
  state.lstsq = null;
  state.stepper = { playing: true, phase: 0, held: null, stepShownAt: performance.now(), loopStart: 0,
                    drawnKey: "" };
  state.poll.failures = 0;
  state.poll.gone = false;
  state.dirty = { charts: true, picture: true, timeline: true };
  if (payload) applyStatusDefaults(state, null, payload.run.status);
}

function mergePayload(state, payload, { replace }) {
  const run = payload.run;
  const previousStatus = state.run ? state.run.status : null;
  // Run facts only move forward in server time: a rerun's older payload must not undo a newer poll.
  if (!state.run || !isNum(state.run.server_time) || !isNum(run.server_time)
      || run.server_time >= state.run.server_time) {
    state.run = { ...run };
  }
  if (Array.isArray(payload.names)) state.names = payload.names;
  if (Array.isArray(payload.true)) state.trueValues = payload.true;
  if (payload.lstsq !== undefined) state.lstsq = payload.lstsq;
  state.loss = mergeSeries(state.loss, payload.loss || [], replace);
  state.params = mergeSeries(state.params, payload.params || [], replace);
  if ((payload.loss || []).length || (payload.params || []).length) state.dirty.charts = true;
  const pic = payload.picture;
  if (pic && (!state.picture || pic.step >= state.picture.step)) {
    const isNew = !state.picture || pic.step !== state.picture.step || pic.time !== state.picture.time;
    state.picture = pic;
    if (isNew) onNewStep(state);
  }
  if (previousStatus !== state.run.status) applyStatusDefaults(state, previousStatus, state.run.status);
}

// Points are [step, value] in ascending step order; the incoming ones have step > since.
export function mergeSeries(existing, incoming, replace) {
  if (replace) {
    const last = incoming.length ? incoming[incoming.length - 1][0] : -Infinity;
    return incoming.concat(existing.filter((p) => p[0] > last));
  }
  const last = existing.length ? existing[existing.length - 1][0] : -Infinity;
  const fresh = incoming.filter((p) => p[0] > last);
  return fresh.length ? existing.concat(fresh) : existing;
}

function lastStep(state) {
  const a = state.loss.length ? state.loss[state.loss.length - 1][0] : 0;
  const b = state.params.length ? state.params[state.params.length - 1][0] : 0;
  return Math.max(a, b);
}

// ---------------------------------------------------------------- polling

function isActive(state) {
  return !!(state.run && state.run.active) && !state.poll.gone;
}

// A queued run changes only its place in the queue; a paused one can still take a single Step.
function pollInterval(state) {
  return state.run.status === "queued" ? state.queuedPollMs : state.pollMs;
}

function startPollingIfActive(state) {
  if (!isActive(state)) {
    stopPolling(state);
    return;
  }
  if (state.poll.stopped) {
    state.poll.stopped = false;
    state.poll.lastAnswerAt = performance.now();
    schedulePoll(state, pollInterval(state));
  }
}

function stopPolling(state) {
  state.poll.stopped = true;
  clearTimeout(state.poll.timer);
  state.poll.timer = null;
  if (state.poll.controller) state.poll.controller.abort();
}

function schedulePoll(state, delayMs) {
  clearTimeout(state.poll.timer);
  if (state.poll.stopped || state.disposed) return;
  state.poll.timer = setTimeout(() => pollOnce(state), delayMs);
}

// Errors back off (doubling, up to MAX_BACKOFF_MS) so a restarting server is not hammered.
function nextDelay(state) {
  const base = pollInterval(state);
  if (state.poll.failures) return Math.min(MAX_BACKOFF_MS, base * 2 ** state.poll.failures);
  return Math.min(base, untilNextStepMs(state));
}

// When steps come slower than the polls, ask just after the next one is due rather than up to a whole
// poll interval later: a 2 steps/s run then shows each step within a round trip, not within 0.4 s.
function untilNextStepMs(state) {
  const { run, picture, clock } = state;
  if (!run || run.status !== "running" || !isNum(run.pace) || run.pace <= 0) return Infinity;
  if (!picture || !isNum(picture.time) || clock.offset === null) return Infinity;
  const stepMs = 1000 / run.pace;
  if (stepMs < state.pollMs) return Infinity;  // faster steps: every poll finds a fresh one anyway
  const dueClient = (picture.time + run.pace ** -1 - clock.offset) * 1000 - performance.timeOrigin;
  const wait = dueClient - performance.now() + 25;  // 25 ms: the server has written the step by then
  return wait > 0 ? wait : Infinity;
}

async function pollOnce(state) {
  if (state.poll.stopped || state.disposed) return;
  if (state.poll.inFlight) {
    // an aborted request of an earlier run has not settled yet: one request at a time, so try again soon
    schedulePoll(state, 50);
    return;
  }
  const runId = state.run.id;
  const url = `${state.endpoint}?run=${encodeURIComponent(runId)}&since=${lastStep(state)}`;
  const controller = new AbortController();
  const timeout = setTimeout(() => controller.abort(), FETCH_TIMEOUT_MS);
  state.poll.inFlight = true;
  state.poll.controller = controller;
  const sentAt = performance.now();
  try {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store",
                                        signal: controller.signal });
    if (response.status === 404) {
      onGone(state);
      return;
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const payload = await response.json();
    const receivedAt = performance.now();
    if (state.disposed || !state.run || payload.run.id !== state.run.id) return;
    updateClock(state, payload.run.server_time, sentAt, receivedAt);
    state.poll.failures = 0;
    state.poll.lastAnswerAt = receivedAt;
    applyLivePayload(state, payload);
  } catch (error) {
    if (!state.poll.stopped) state.poll.failures += 1;
  } finally {
    clearTimeout(timeout);
    state.poll.inFlight = false;
    state.poll.controller = null;
    if (!isActive(state)) stopPolling(state);
    schedulePoll(state, nextDelay(state));
    renderConnection(state);
  }
}

// NTP-style: the server made the payload somewhere between sending and receiving; the fastest round
// trip bounds that best, so its estimate is kept.
function updateClock(state, serverTime, sentAt, receivedAt) {
  if (!isNum(serverTime)) return;
  const rtt = receivedAt - sentAt;
  if (rtt > state.clock.bestRtt && state.clock.offset !== null) return;
  const midClient = (performance.timeOrigin + (sentAt + receivedAt) / 2) / 1000;
  state.clock.offset = serverTime - midClient;
  state.clock.bestRtt = rtt;
}

function onGone(state) {
  state.poll.gone = true;
  stopPolling(state);
  renderStatus(state);
}

function applyLivePayload(state, payload) {
  const stepBefore = state.picture ? state.picture.step : null;
  const seriesBefore = lastStep(state);
  mergePayload(state, payload, { replace: false });
  const status = state.run.status;
  if (status !== state.reportedStatus) {
    // Streamlit reruns the script once, so its buttons (start / pause / resume) match the run again.
    state.reportedStatus = status;
    if (state.setTriggerValue) state.setTriggerValue("status", status);
  }
  render(state);
  const stepAfter = state.picture ? state.picture.step : null;
  if (stepAfter !== stepBefore && stepAfter !== null) {
    recordLatency(state, state.picture.time, stepAfter);
  } else if (lastStep(state) > seriesBefore) {
    recordLatency(state, payload.run.server_time, lastStep(state));
  }
}

// Display latency of a live step: from the server's step time to now, both on the server's clock.
// The offset's error is about half the best round trip, so a tiny negative result is clamped to 0.
function recordLatency(state, serverStepTime, step) {
  if (!isNum(serverStepTime) || state.clock.offset === null) return;
  const latencyMs = Math.max(0, (clientNowSeconds() + state.clock.offset - serverStepTime) * 1000);
  const metrics = window.fitcoreLive || { updates: 0, lastLatencyMs: null, maxLatencyMs: 0, lastStep: null };
  metrics.updates += 1;
  metrics.lastLatencyMs = Math.round(latencyMs * 10) / 10;
  metrics.maxLatencyMs = Math.max(metrics.maxLatencyMs, metrics.lastLatencyMs);
  metrics.lastStep = step;
  window.fitcoreLive = metrics;
}

// ---------------------------------------------------------------- the phase stepper

function phaseGroups(pic) {
  const groups = [];
  const byName = new Map();
  for (const entry of (pic && pic.phases) || []) {
    let group = byName.get(entry.name);
    if (!group) {
      group = { name: entry.name, entries: [], bytes: 0, start: Infinity, end: 0 };
      byName.set(entry.name, group);
      groups.push(group);
    }
    group.entries.push(entry);
    group.bytes += isNum(entry.bytes) ? entry.bytes : 0;
    group.start = Math.min(group.start, entry.start);
    group.end = Math.max(group.end, entry.start + entry.duration);
  }
  return groups;
}

function isSlow(run) {
  return isNum(run.pace) && run.pace <= SLOW_PACE;
}

// What the stepper does by itself when the run's status changes; the teacher's clicks override it.
function applyStatusDefaults(state, before, after) {
  const stepper = state.stepper;
  if (after === "running") {
    stepper.playing = true;
    stepper.held = null;
  } else if (after === "paused") {
    // freeze where the motion is now: the current phase (the first one if it showed the whole step)
    const shown = currentPhase({ ...state, run: { ...state.run, status: before || "running" } });
    stepper.playing = false;
    stepper.held = state.picture;
    stepper.phase = shown.done ? 0 : shown.index;
  } else if (after === "queued") {
    stepper.playing = true;  // nothing to show yet: follow the first step when it comes
    stepper.held = null;
  } else {
    stepper.playing = false;  // finished, stopped, diverged, failed: the whole last step, still
    stepper.held = state.picture;
    stepper.phase = ALL_DONE;
  }
  state.dirty.picture = true;
}

function onNewStep(state) {
  if (state.run && state.run.status === "paused" && !state.stepper.playing) {
    // a step taken with Step while paused: hold it at its first phase, for ◀ / ▶ to walk through
    state.stepper.held = state.picture;
    state.stepper.phase = 0;
  }
  state.stepper.stepShownAt = performance.now();
  state.dirty.picture = true;
  state.dirty.timeline = true;
  scheduleFrame(state);
}

function shownPicture(state) {
  return state.stepper.playing ? state.picture : state.stepper.held || state.picture;
}

// {index, done, animating}: the phase highlighted now. index === groups.length means "all done".
function currentPhase(state) {
  const pic = shownPicture(state);
  const n = phaseGroups(pic).length;
  const { stepper, run } = state;
  if (!pic || !run || n === 0) return { index: n, done: true, animating: false };
  if (!stepper.playing) {
    const index = Math.max(0, Math.min(n, stepper.phase));
    return { index, done: index >= n, animating: false };
  }
  if (run.status === "running" && isSlow(run)) {
    const stepMs = 1000 / run.pace;
    const elapsed = performance.now() - stepper.stepShownAt;
    const index = Math.min(n, Math.floor(elapsed / (stepMs / n)));
    return { index, done: index >= n, animating: index < n };
  }
  if (run.status === "running") return { index: n, done: true, animating: false };
  // the teacher pressed play on a run that stands still: loop over the step's phases
  const index = Math.floor((performance.now() - stepper.loopStart) / DEMO_PHASE_MS) % (n + 1);
  return { index, done: index >= n, animating: true };
}

function walkPhase(state, delta) {
  const pic = shownPicture(state);
  const n = phaseGroups(pic).length;
  if (!n) return;
  const now = currentPhase(state);
  state.stepper.playing = false;
  state.stepper.held = pic;
  state.stepper.phase = (now.index + delta + n + 1) % (n + 1);  // wraps: … optimizer, all done, scatter …
  state.dirty.picture = true;
  render(state);
}

function togglePlay(state) {
  const stepper = state.stepper;
  stepper.playing = !stepper.playing;
  if (stepper.playing) {
    stepper.held = null;
    stepper.loopStart = performance.now();
    stepper.stepShownAt = performance.now();
  } else {
    const shown = currentPhase({ ...state, stepper: { ...stepper, playing: true } });
    stepper.held = state.picture;
    stepper.phase = shown.index;
  }
  state.dirty.picture = true;
  render(state);
}

function scheduleFrame(state) {
  if (state.raf || state.disposed) return;
  state.raf = requestAnimationFrame(() => {
    state.raf = null;
    renderPicture(state);
    if (currentPhase(state).animating) scheduleFrame(state);
  });
}

// ---------------------------------------------------------------- rendering

function onResize(state) {
  const width = Math.floor(state.dom.root.clientWidth);
  if (!width || width === state.width) return;
  state.width = width;
  state.dirty = { charts: true, picture: true, timeline: true };
  render(state);
}

function render(state) {
  if (state.disposed) return;
  if (!state.width) state.width = Math.floor(state.dom.root.clientWidth) || 960;
  renderStatus(state);
  renderPicture(state);
  if (state.dirty.timeline) renderTimeline(state);
  if (state.dirty.charts) renderCharts(state);
  state.dirty.timeline = false;
  state.dirty.charts = false;
}

function renderStatus(state) {
  const { dom, run } = state;
  const status = run ? run.status : "idle";
  dom.root.dataset.status = status;
  dom.root.dataset.kind = run ? run.kind || "info" : "info";
  const badges = { paused: "Paused", queued: "Queued", diverged: "Diverged", failed: "Failed" };
  dom.badge.textContent = badges[status] || "";
  dom.badge.hidden = !badges[status];
  dom.statusText.textContent = run ? run.status_line || status : "No run yet: start one from the controls.";
  const fraction = run && run.total_steps ? Math.min(1, (run.step || 0) / run.total_steps) : 0;
  dom.progressFill.style.width = `${(fraction * 100).toFixed(2)}%`;
  renderConnection(state);
}

function renderConnection(state) {
  if (state.disposed) return;
  const conn = state.dom.conn;
  if (state.poll.gone) {
    conn.textContent = "this run is no longer on the server";
  } else if (isActive(state) && performance.now() - state.poll.lastAnswerAt > LOST_AFTER_MS) {
    conn.textContent = "connection lost, retrying…";
  } else {
    conn.textContent = "";
  }
  conn.hidden = !conn.textContent;
}

function renderPicture(state) {
  const pic = shownPicture(state);
  const groups = phaseGroups(pic);
  const phase = currentPhase(state);
  const key = [pic ? `${pic.step}/${pic.time}` : "none", phase.index, state.width, state.stepper.playing,
               state.run ? state.run.status : ""].join("|");
  if (key === state.stepper.drawnKey && !state.dirty.picture) {
    if (phase.animating) scheduleFrame(state);
    return;
  }
  state.stepper.drawnKey = key;
  state.dirty.picture = false;
  const { dom } = state;
  dom.pictureEmpty.hidden = !!pic;
  dom.pictureSvg.style.display = pic ? "" : "none";
  // frozen while the run is paused and the teacher has not pressed play: a picture, not a movie
  const paused = state.run && state.run.status === "paused" && !state.stepper.playing;
  dom.picture.classList.toggle("fl-still", phase.done || paused);
  dom.play.textContent = state.stepper.playing ? "❚❚ hold" : "▷ play";
  dom.play.classList.toggle("fl-on", state.stepper.playing);
  dom.prev.disabled = dom.next.disabled = !groups.length;
  renderPills(state, pic, groups, phase);
  dom.phaseTitle.textContent = pic ? phaseTitle(pic, groups, phase) : "The step picture";
  if (pic) drawStepPicture(dom.pictureSvg, pic, groups, phase, pictureWidth(state));
  if (state.dirty.timeline !== true && state.lastTimelinePhase !== phase.index) renderTimeline(state);
  if (phase.animating) scheduleFrame(state);
}

// The section's inner width (its padding is 6 px a side): the SVG is drawn at exactly that size.
function pictureWidth(state) {
  const inner = state.dom.picture.clientWidth - 12;
  return inner > 0 ? inner : state.width - 24;
}

function renderPills(state, pic, groups, phase) {
  const { pills, stepInfo } = state.dom;
  clear(pills);
  groups.forEach((group, i) => {
    const pill = el("span", "fl-pill", group.name);
    pill.style.setProperty("--phase", PHASE_COLOURS[group.name] || "#495057");
    if (i < phase.index) pill.classList.add("fl-done");
    if (i === phase.index) pill.classList.add("fl-now");
    pill.addEventListener("click", () => {
      state.stepper.playing = false;
      state.stepper.held = shownPicture(state);
      state.stepper.phase = i;
      state.dirty.picture = true;
      render(state);
    });
    pills.append(pill);
  });
  if (!pic) {
    stepInfo.textContent = "";
    return;
  }
  const latest = state.picture && state.picture.step !== pic.step ? ` (latest ${state.picture.step})` : "";
  stepInfo.textContent = `step ${pic.step}${latest} · epoch ${pic.epoch}, batch ${pic.batch}`;
}

// The big line: which phase, in words a student can read off the projector.
function phaseTitle(pic, groups, phase) {
  if (phase.done) {
    const loss = isNum(pic.loss) ? ` · loss ${formatNumber(pic.loss)}` : "";
    if (!groups.length) return `Step ${pic.step}${loss}`;  // a single device records no phases
    return `Step ${pic.step}: all ${groups.length} phases done${loss}`;
  }
  const group = groups[phase.index];
  const describe = PHASE_TEXT[group.name];
  return describe ? describe(pic, group) : group.name;
}

const PHASE_TEXT = {
  scatter: (p) => `scatter: the batch ${shape(p.input_shape)} is cut into ${busy(p).length} chunks, `
    + `copied from ${p.first_device}`,
  replicate: (p) => `replicate: W, b copied from ${p.first_device} to every busy device`,
  parallel_apply: (p) => `parallel_apply: ${busy(p).length} replicas run their chunks at once`,
  gather: (p) => `gather: outputs copied to ${p.first_device} → ${shape(p.output_shape)}`,
  loss: (p) => (p.strategy === "ddp" ? "loss: every rank computes the loss of its own shard"
    : `loss on ${p.first_device}: ${formatNumber(p.loss)}`),
  backward: (p) => (p.strategy === "ddp" ? "backward: every rank computes its own gradients"
    : "backward: output gradients go back, every replica computes ∇W, ∇b"),
  reduce: (p) => `reduce: the replicas' gradients are summed on ${p.first_device}`,
  optimizer: (p) => (p.strategy === "ddp" ? "optimizer: every rank takes the same step"
    : `optimizer step on ${p.first_device}; the replicas are thrown away`),
  load: () => "load: every rank reads its own shard (nothing moves between devices)",
  forward: () => "forward: every rank runs its own rows",
  allreduce: (p, g) => `all-reduce: gradients averaged around the ring, ${formatBytes(
    g.entries[0] ? g.entries[0].bytes : 0)} sent per rank`,
};

function busy(pic) {
  return (pic.devices || []).filter((d) => d.busy);
}

// ---------------------------------------------------------------- the step picture

const BOX_GAP = 10;
const SIDE = 6;

// Where everything sits, in px of the real width (no viewBox scaling: 15 px text stays 15 px).
function pictureLayout(pic, width) {
  const devices = pic.devices || [];
  const k = Math.max(1, devices.length);
  const gap = k > 6 ? BOX_GAP / 2 : BOX_GAP;  // eight boxes still fit a 780 px picture
  const boxW = Math.max(72, (width - 2 * SIDE - (k - 1) * gap) / k);
  // shapes on two lines when "[67, 2] → [67, 1]" does not fit the box
  const wide = busy(pic).every((d) => textWidth(`${shape(d.input_shape)} → ${shape(d.output_shape)}`, 14)
    <= boxW - 14);
  const narrow = !wide;
  const boxH = narrow ? 129 : 112;
  const barY = 2;
  const barH = 26;
  const boxY = barY + barH + 24;
  const outY = boxY + boxH + 22;
  const outH = 26;
  const footY = outY + outH + 19;
  const boxes = devices.map((device, i) => ({
    device, index: i, x: SIDE + i * (boxW + gap), y: boxY, w: boxW, h: boxH,
    cx: SIDE + i * (boxW + gap) + boxW / 2,
  }));
  const layout = { width, barY, barH, boxY, boxH, outY, outH, footY, height: footY + 8, boxes, narrow };
  layout.rowLabels = rowLabels(pic);
  layout.segments = segments(pic, barRange(layout));
  return layout;
}

// What the batch row and the output row are called, left of their bars (DataParallel only).
function rowLabels(pic) {
  if (pic.strategy === "ddp") return null;
  const batch = `X ${shape(pic.input_shape)} on ${pic.first_device}`;
  const out = `outputs ${shape(pic.output_shape)}`;
  const width = Math.max(textWidth(batch, 15, 700), textWidth(out, 15, 700)) + 14;
  return { batch, out, width };
}

// The bars span the busy boxes (right of their labels), so each chunk sits roughly above its device.
function barRange(layout) {
  const busyBoxes = layout.boxes.filter((b) => b.device.busy);
  if (!busyBoxes.length) return { x0: SIDE, x1: layout.width - SIDE };
  const last = busyBoxes[busyBoxes.length - 1];
  const labelEnd = SIDE + (layout.rowLabels ? layout.rowLabels.width : 0);
  const x0 = Math.max(labelEnd, busyBoxes[0].x);
  const x1 = Math.max(x0 + 120, last.x + last.w);
  return { x0, x1: Math.min(x1, layout.width - SIDE) };
}

// The batch bar cut in proportion to each busy device's rows (the rows tensor.chunk gave it).
function segments(pic, range) {
  const rows = pic.batch_rows || busy(pic).reduce((s, d) => s + d.rows, 0) || 1;
  const inner = range.x1 - range.x0;
  return (pic.devices || []).map((d) => {
    if (!d.busy) return null;
    const start = isNum(d.start) ? d.start : 0;
    return { x: range.x0 + (inner * start) / rows, w: (inner * d.rows) / rows, device: d };
  });
}

function drawStepPicture(svg, pic, groups, phase, width) {
  clear(svg);
  const layout = pictureLayout(pic, width);
  svg.setAttribute("width", layout.width);
  svg.setAttribute("height", layout.height);
  svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  svg.append(arrowDefs());
  const names = groups.map((g) => g.name);
  const ctx = {
    svg, pic, layout, groups, phase,
    done: (name) => phase.done || names.indexOf(name) < phase.index,
    now: (name) => !phase.done && names[phase.index] === name,
    seen: (name) => phase.done || names.indexOf(name) <= phase.index,
    group: (name) => groups.find((g) => g.name === name),
    layer: { back: svgEl("g"), boxes: svgEl("g"), front: svgEl("g") },
    boxState: layout.boxes.map(() => ({ chips: [], glow: null, note: null })),
  };
  svg.append(ctx.layer.back, ctx.layer.boxes, ctx.layer.front);
  const drawers = pic.strategy === "ddp" ? DDP_PHASES : DP_PHASES;
  // 1. what sits at the top: the batch on the first device, or each rank's own shard
  (pic.strategy === "ddp" ? drawShardStrips : drawBatchBar)(ctx);
  // 2. every phase adds its mark (chips, glow) and, while it is the current one, its arrows
  for (const group of groups) {
    const drawer = drawers[group.name];
    if (drawer && ctx.seen(group.name)) drawer(ctx, group);
  }
  // 3. the boxes last in their layer, with the marks the phases left on them
  layout.boxes.forEach((box, i) => drawDeviceBox(ctx, box, ctx.boxState[i]));
  drawFooter(ctx);
}

function arrowDefs() {
  const defs = svgEl("defs");
  for (const [name, colour] of Object.entries(PHASE_COLOURS)) {
    const marker = svgEl("marker", { id: `fl-arrow-${name}`, viewBox: "0 0 10 10", refX: 8, refY: 5,
                                     markerWidth: 4.5, markerHeight: 4.5, orient: "auto-start-reverse" });
    marker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: colour }));
    defs.append(marker);
  }
  return defs;
}

function arrow(ctx, d, phaseName, { live, faint } = {}) {
  const path = svgEl("path", {
    d, fill: "none", stroke: PHASE_COLOURS[phaseName], "stroke-width": live ? 3 : 2,
    "marker-end": `url(#fl-arrow-${phaseName})`,
    class: live ? "fl-flow" : faint ? "fl-faint" : "",
  });
  ctx.layer.back.append(path);
  return path;
}

function label(parent, x, y, text, { size = 15, weight = 400, anchor = "start", fill = "#111418",
                                      cls, halo } = {}) {
  const node = svgEl("text", { x, y, "font-size": size, "font-weight": weight, "text-anchor": anchor,
                               fill, class: [cls, halo ? "fl-halo" : ""].filter(Boolean).join(" ") },
  text);
  parent.append(node);
  return node;
}

// The bytes an arrow carries, on the arrow's middle (a white halo keeps it readable over the line).
function arrowLabel(ctx, x, y, text, phaseName) {
  label(ctx.layer.front, x, y + 5, text, { size: 14, weight: 700, anchor: "middle",
                                           fill: PHASE_COLOURS[phaseName], halo: true });
}

function chip(state, text, colour, { fresh = false, faded = false } = {}) {
  state.chips.push({ text, colour, fresh, faded });
}

function deviceColour(index) {
  return COLOURS[index % COLOURS.length];
}

// DataParallel: the batch lives on the first device before the scatter.
function drawBatchBar(ctx) {
  const { layout, svg } = ctx;
  const g = svgEl("g");
  svg.insertBefore(g, ctx.layer.back);
  label(g, SIDE, layout.barY + 19, layout.rowLabels.batch, { size: 15, weight: 700 });
  layout.segments.forEach((seg, i) => {
    if (!seg) return;
    g.append(svgEl("rect", { x: seg.x, y: layout.barY, width: Math.max(1, seg.w - 1), height: layout.barH,
                             fill: deviceColour(i), "fill-opacity": 0.16, stroke: deviceColour(i),
                             "stroke-width": 1.5, rx: 3 }));
    const ids = (seg.device.ids || []).map(String);
    const more = seg.device.rows - ids.length;
    const text = fitList(ids, seg.w - 10, 14, more > 0 ? ` +${more}` : "")
      || fitText(`${seg.device.rows}`, seg.w - 6, 14);
    label(g, seg.x + 5, layout.barY + 19, text, { size: 14, fill: "#212529" });
  });
}

// DDP: no central batch; each rank's shard sits above its own box.
function drawShardStrips(ctx) {
  const { layout, svg } = ctx;
  layout.boxes.forEach((box, i) => {
    const d = box.device;
    if (!d.busy) return;
    svg.append(svgEl("rect", { x: box.x, y: layout.barY, width: box.w, height: layout.barH, rx: 3,
                               fill: deviceColour(i), "fill-opacity": 0.16, stroke: deviceColour(i) }));
    const ids = (d.ids || []).map(String);
    const more = d.rows - ids.length;
    label(svg, box.x + 5, layout.barY + 19, fitList(ids, box.w - 10, 14, more > 0 ? ` +${more}` : ""),
      { size: 14 });
  });
}

function drawDeviceBox(ctx, box, mark) {
  const { pic, layout } = ctx;
  const d = box.device;
  const g = svgEl("g", { class: "fl-box" });
  ctx.layer.boxes.append(g);
  const first = box.index === 0 && pic.strategy !== "ddp";
  const colour = d.busy ? deviceColour(box.index) : "#adb5bd";
  g.append(svgEl("rect", {
    x: box.x, y: box.y, width: box.w, height: box.h, rx: 6,
    fill: d.busy ? "#ffffff" : "#f1f3f5", stroke: mark.glow || colour,
    "stroke-width": mark.glow ? 4 : first ? 3 : 1.5, "stroke-dasharray": d.busy ? null : "6 4",
    class: mark.glow ? "fl-glow" : null,
  }));
  g.append(svgEl("rect", { x: box.x, y: box.y, width: box.w, height: 5, rx: 2, fill: colour }));
  const x = box.x + 7;
  const inner = box.w - 14;
  // a rank's label already starts "rank i · ..." where the run names its ranks so
  let name = pic.strategy === "ddp" && !d.label.startsWith("rank ") ? `rank ${box.index} · ${d.label}` : d.label;
  if (textWidth(name, 15, 700) > inner && pic.strategy === "ddp") name = `rank ${box.index}`;
  label(g, x, box.y + 23, fitText((first ? "★ " : "") + name, inner, 15, 700), { size: 15, weight: 700 });
  if (!d.busy) {
    label(g, x, box.y + 45, fitText("idle:", inner, 15), { size: 15, fill: "#495057" });
    label(g, x, box.y + 64, fitText("no rows left", inner, 15), { size: 15, fill: "#495057" });
    return;
  }
  const range = !isNum(d.start) || !d.rows ? "" : d.rows === 1 ? ` (${d.start})` : ` (${d.start}–${d.stop - 1})`;
  const rows = textWidth(`${plural(d.rows, "row")}${range}`, 15) <= inner ? `${plural(d.rows, "row")}${range}`
    : plural(d.rows, "row");  // a narrow box drops the row range rather than cut it
  label(g, x, box.y + 42, fitText(rows, inner, 15), { size: 15 });
  let y = box.y + 60;
  const shapes = `${shape(d.input_shape)} → ${shape(d.output_shape)}`;
  if (textWidth(shapes, 14) <= inner) {
    label(g, x, y, shapes, { size: 14, fill: "#343a40" });
  } else {
    label(g, x, y, `${shape(d.input_shape)} →`, { size: 14, fill: "#343a40" });
    y += 17;
    label(g, x, y, shape(d.output_shape), { size: 14, fill: "#343a40" });
  }
  y += 18;
  if (mark.note) {
    label(g, x, y, fitText(mark.note, inner, 14, 600), { size: 14, weight: 600, fill: PHASE_COLOURS.loss });
  } else if (pic.strategy !== "ddp") {
    const ids = (d.ids || []).map(String);
    label(g, x, y, fitList(ids, inner - textWidth("ids ", 14), 14, "").replace(/^/, "ids "),
      { size: 14, fill: "#495057" });
  }
  drawChips(g, box, mark.chips);
}

// The newest chips win the room: they are what the current phase just did.
function drawChips(g, box, chips) {
  const widths = chips.map((c) => textWidth(c.text, 14, 600) + 12);
  let first = chips.length;
  let used = 0;
  while (first > 0 && used + widths[first - 1] + 4 <= box.w - 8) used += widths[--first] + 4;
  let x = box.x + 6;
  const y = box.y + box.h - 26;
  chips.slice(first).forEach((c, i) => {
    const w = widths[first + i];
    g.append(svgEl("rect", { x, y, width: w, height: 21, rx: 10, fill: c.colour,
                             "fill-opacity": c.faded ? 0.25 : 1, class: c.fresh ? "fl-pop" : null }));
    label(g, x + 6, y + 15, c.text, { size: 14, weight: 600, fill: c.faded ? "#343a40" : "#ffffff" });
    x += w + 4;
  });
}

function drawFooter(ctx) {
  const { pic, layout, svg } = ctx;
  const y = layout.footY;
  let left;
  if (pic.strategy === "ddp") {
    left = "every rank does the same work; no device gathers";
  } else {
    left = `★ ${pic.first_device} also does: gather, loss, reduce, step`;
  }
  label(svg, SIDE, y, left, { size: 15, weight: 600, fill: "#343a40" });
  if (pic.emulated) {
    const who = pic.strategy === "ddp" ? "DDP" : "DataParallel";
    const note = `emulated on ${pic.emulated_on || "the CPU"}: bytes as ${who} on GPUs`;
    const room = layout.width - SIDE - textWidth(left, 15, 600) - 30;
    label(svg, layout.width - SIDE, y, fitText(note, room, 15), { size: 15, anchor: "end",
                                                                   fill: "#5f3dc4" });
  }
}

// ---- DataParallel phases: each marks the boxes it leaves changed and draws its arrows while current.

const DP_PHASES = {
  scatter: drawScatter, replicate: drawReplicate, parallel_apply: drawParallelApply, gather: drawGather,
  loss: drawLoss, backward: drawBackward, reduce: drawReduce, optimizer: drawOptimizer,
};

function busyBoxes(ctx) {
  return ctx.layout.boxes.filter((b) => b.device.busy);
}

function bytesOf(group, device) {
  const entry = group.entries.find((e) => e.device === device.label);
  return entry && isNum(entry.bytes) ? entry.bytes : 0;
}

// Chunk i goes from its segment of the batch down into device i.
function drawScatter(ctx, group) {
  const live = ctx.now("scatter");
  const { layout } = ctx;
  for (const box of busyBoxes(ctx)) {
    const seg = layout.segments[box.index];
    const x0 = seg.x + seg.w / 2;
    const y0 = layout.barY + layout.barH;
    arrow(ctx, `M${x0},${y0 + 1} C${x0},${y0 + 16} ${box.cx},${box.y - 16} ${box.cx},${box.y - 2}`,
      "scatter", { live, faint: !live });
    if (live) {
      const b = bytesOf(group, box.device);
      arrowLabel(ctx, (x0 + box.cx) / 2, (y0 + box.y) / 2, b ? formatBytes(b) : "stays", "scatter");
      ctx.boxState[box.index].glow = PHASE_COLOURS.scatter;
    }
  }
}

// A bus above the boxes: the first device's parameters broadcast to every other busy device.
function drawReplicate(ctx, group) {
  const live = ctx.now("replicate");
  const boxes = busyBoxes(ctx);
  boxes.forEach((box, i) => {
    const original = box.index === 0;
    chip(ctx.boxState[box.index], original ? "W, b" : "W, b copy", PHASE_COLOURS.replicate,
      { fresh: live && !original, faded: ctx.done("optimizer") && !original });
  });
  if (!live || boxes.length < 2) return;
  const y = ctx.layout.boxY - 12;
  const first = boxes[0];
  const last = boxes[boxes.length - 1];
  const bus = svgEl("path", { d: `M${first.cx},${first.y - 2} L${first.cx},${y} L${last.cx},${y}`,
                              fill: "none", stroke: PHASE_COLOURS.replicate, "stroke-width": 3,
                              class: "fl-flow" });
  ctx.layer.back.append(bus);
  for (const box of boxes.slice(1)) {
    arrow(ctx, `M${box.cx},${y} L${box.cx},${box.y - 2}`, "replicate", { live: true });
    label(ctx.layer.front, box.cx + 6, y - 4, formatBytes(bytesOf(group, box.device)),
      { size: 14, weight: 600, fill: PHASE_COLOURS.replicate, halo: true });
  }
}

function drawParallelApply(ctx) {
  const live = ctx.now("parallel_apply");
  for (const box of busyBoxes(ctx)) {
    if (live) ctx.boxState[box.index].glow = PHASE_COLOURS.parallel_apply;
  }
}

// Each replica's output rows go down into their place in the output on the first device.
function drawGather(ctx, group) {
  const live = ctx.now("gather");
  const { layout } = ctx;
  const y = layout.outY;
  for (const box of busyBoxes(ctx)) {
    const seg = layout.segments[box.index];
    const x1 = seg.x + seg.w / 2;
    arrow(ctx, `M${box.cx},${box.y + box.h + 1} C${box.cx},${box.y + box.h + 16} ${x1},${y - 14} ${x1},${y - 2}`,
      "gather", { live, faint: !live });
    if (live) {
      const b = bytesOf(group, box.device);
      arrowLabel(ctx, (box.cx + x1) / 2, (box.y + box.h + y) / 2, b ? formatBytes(b) : "stays", "gather");
    }
  }
  drawOutputBar(ctx);
}

// The output on the first device, in the chunks' order: segment i holds device i's output rows.
function drawOutputBar(ctx) {
  const { layout, pic } = ctx;
  const g = svgEl("g");
  ctx.layer.boxes.append(g);
  label(g, SIDE, layout.outY + 19, layout.rowLabels.out, { size: 15, weight: 700 });
  layout.segments.forEach((seg, i) => {
    if (!seg) return;
    g.append(svgEl("rect", { x: seg.x, y: layout.outY, width: Math.max(1, seg.w - 1), height: layout.outH,
                             rx: 3, fill: deviceColour(i), "fill-opacity": 0.16, stroke: deviceColour(i),
                             "stroke-width": 1.5 }));
    const text = fitText(shape(seg.device.output_shape), seg.w - 10, 14);
    label(g, seg.x + 5, layout.outY + 18, text, { size: 14, fill: "#212529" });
  });
  const last = layout.segments.filter(Boolean).pop();
  const room = last ? layout.width - SIDE - (last.x + last.w) - 8 : 0;
  const where = `on ${pic.first_device}`;
  if (room > textWidth(where, 15, 600)) {
    label(g, layout.width - SIDE, layout.outY + 19, where, { size: 15, weight: 600, anchor: "end" });
  }
}

function drawLoss(ctx) {
  const first = ctx.layout.boxes[0];
  if (ctx.now("loss")) ctx.boxState[0].glow = PHASE_COLOURS.loss;
  if (first && isNum(ctx.pic.loss)) {
    chip(ctx.boxState[0], `loss ${formatNumber(ctx.pic.loss)}`, PHASE_COLOURS.loss, { fresh: ctx.now("loss") });
  }
}

// The loss's gradient flows back up: the output gradients are scattered back to the replicas.
function drawBackward(ctx, group) {
  const live = ctx.now("backward");
  const { layout } = ctx;
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], "∇W, ∇b", PHASE_COLOURS.backward,
      { fresh: live, faded: ctx.done("reduce") && box.index !== 0 });
    if (!live) continue;
    ctx.boxState[box.index].glow = PHASE_COLOURS.backward;
    const seg = layout.segments[box.index];
    const x0 = seg.x + seg.w / 2;
    const bottom = box.y + box.h;
    arrow(ctx, `M${x0},${layout.outY - 2} C${x0},${layout.outY - 14} ${box.cx},${bottom + 16} ${box.cx},${bottom + 2}`,
      "backward", { live: true });
  }
  if (live) {
    label(ctx.layer.front, layout.width - SIDE, layout.boxY + layout.boxH + 17,
      `output gradients back to the replicas: ${formatBytes(group.bytes)}`,
      { size: 14, weight: 600, anchor: "end", fill: PHASE_COLOURS.backward, halo: true });
  }
}

// The bus again, the other way: every replica's gradients summed onto the first device's W, b.
function drawReduce(ctx, group) {
  const live = ctx.now("reduce");
  const boxes = busyBoxes(ctx);
  if (boxes.length) {
    chip(ctx.boxState[boxes[0].index], `Σ∇ of ${boxes.length}`, PHASE_COLOURS.reduce, { fresh: live });
  }
  if (!live) return;
  ctx.boxState[0].glow = PHASE_COLOURS.reduce;
  if (boxes.length < 2) return;
  const y = ctx.layout.boxY - 12;
  const first = boxes[0];
  const last = boxes[boxes.length - 1];
  for (const box of boxes.slice(1)) {
    ctx.layer.back.append(svgEl("path", { d: `M${box.cx},${box.y - 2} L${box.cx},${y}`, fill: "none",
                                          stroke: PHASE_COLOURS.reduce, "stroke-width": 3,
                                          class: "fl-flow" }));
    label(ctx.layer.front, box.cx + 6, y - 4, formatBytes(bytesOf(group, box.device)),
      { size: 14, weight: 600, fill: PHASE_COLOURS.reduce, halo: true });
  }
  arrow(ctx, `M${last.cx},${y} L${first.cx},${y} L${first.cx},${first.y - 2}`, "reduce", { live: true });
}

function drawOptimizer(ctx) {
  const live = ctx.now("optimizer");
  if (live) ctx.boxState[0].glow = PHASE_COLOURS.optimizer;
  chip(ctx.boxState[0], "step ✓", PHASE_COLOURS.optimizer, { fresh: live });
}

// ---- DDP phases: every rank does every phase; only the all-reduce moves bytes.

const DDP_PHASES = {
  load: drawLoad, forward: drawRankForward, loss: drawRankLoss, backward: drawRankBackward,
  allreduce: drawAllReduce, optimizer: drawRankOptimizer,
};

function drawLoad(ctx) {
  const live = ctx.now("load");
  const { layout } = ctx;
  for (const box of busyBoxes(ctx)) {
    const y0 = layout.barY + layout.barH;
    arrow(ctx, `M${box.cx},${y0 + 1} L${box.cx},${box.y - 2}`, "load", { live, faint: !live });
    if (live) {
      ctx.boxState[box.index].glow = PHASE_COLOURS.load;
      label(ctx.layer.front, box.cx + 6, box.y - 10, "0 B", { size: 14, weight: 600,
                                                             fill: PHASE_COLOURS.load, halo: true });
    }
  }
  for (const box of busyBoxes(ctx)) chip(ctx.boxState[box.index], "W, b", PHASE_COLOURS.replicate);
}

function drawRankForward(ctx) {
  if (!ctx.now("forward")) return;
  for (const box of busyBoxes(ctx)) ctx.boxState[box.index].glow = PHASE_COLOURS.forward;
}

function drawRankLoss(ctx) {
  const live = ctx.now("loss");
  for (const box of busyBoxes(ctx)) {
    const loss = box.device.loss;
    ctx.boxState[box.index].note = `loss ${isNum(loss) ? formatNumber(loss) : "–"}`;
    if (live) ctx.boxState[box.index].glow = PHASE_COLOURS.loss;
  }
}

function drawRankBackward(ctx) {
  const live = ctx.now("backward");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], ctx.done("allreduce") ? "avg ∇" : "∇W, ∇b", PHASE_COLOURS.backward,
      { fresh: live });
    if (live) ctx.boxState[box.index].glow = PHASE_COLOURS.backward;
  }
}

// The ring: rank i sends to rank i+1, the last one back to rank 0 along the bottom.
function drawAllReduce(ctx, group) {
  const live = ctx.now("allreduce");
  const boxes = busyBoxes(ctx);
  const { layout } = ctx;
  const yBox = layout.boxY + layout.boxH;
  if (boxes.length < 2) {
    if (live) label(ctx.layer.front, SIDE, layout.outY + 20, "one rank: nothing to all-reduce",
      { size: 15, weight: 600, fill: PHASE_COLOURS.allreduce });
    return;
  }
  const opts = { live, faint: !live };
  for (let i = 0; i + 1 < boxes.length; i++) {
    const a = boxes[i];
    const b = boxes[i + 1];
    const [xa, xb] = [a.cx + 10, b.cx - 10];
    arrow(ctx, `M${xa},${yBox + 2} C${xa},${yBox + 26} ${xb},${yBox + 26} ${xb},${yBox + 4}`,
      "allreduce", opts);
  }
  const first = boxes[0];
  const last = boxes[boxes.length - 1];
  const yBack = layout.outY + 2;
  const [xLast, xFirst] = [last.cx + 14, first.cx - 14];
  arrow(ctx, `M${xLast},${yBox + 2} L${xLast},${yBack} L${xFirst},${yBack} L${xFirst},${yBox + 4}`,
    "allreduce", opts);
  if (live) {
    for (const box of boxes) ctx.boxState[box.index].glow = PHASE_COLOURS.allreduce;
    const per = group.entries[0] ? group.entries[0].bytes : 0;
    const text = `all-reduce ring: each rank sends ${formatBytes(per)} = 2·(K−1)/K·(d+1)·itemsize`;
    label(ctx.layer.front, (first.cx + last.cx) / 2, yBack + 20, fitText(text, layout.width - 40, 15, 600),
      { size: 15, weight: 600, anchor: "middle", fill: PHASE_COLOURS.allreduce, halo: true });
  }
}

function drawRankOptimizer(ctx) {
  const live = ctx.now("optimizer");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], "same step ✓", PHASE_COLOURS.optimizer, { fresh: live });
    if (live) ctx.boxState[box.index].glow = PHASE_COLOURS.optimizer;
  }
}

// ---------------------------------------------------------------- timeline and bytes

function renderTimeline(state) {
  const pic = shownPicture(state);
  const { dom } = state;
  const phase = currentPhase(state);
  state.lastTimelinePhase = phase.index;
  dom.timeline.hidden = !pic;
  if (!pic) return;
  const groups = phaseGroups(pic);
  const total = Math.max(1e-9, ...groups.map((g) => g.end));
  dom.ganttTitle.textContent = `Timeline of step ${pic.step} (measured, ${formatSeconds(total)} in all)`;
  const width = Math.max(320, Math.floor(state.width * 0.6));
  drawGantt(dom.ganttSvg, pic, groups, phase, width, total);
  renderBytes(dom.bytes, pic, groups);
}

function drawGantt(svg, pic, groups, phase, width, total) {
  clear(svg);
  const devices = (pic.devices || []).map((d) => d.label);
  const labelW = Math.max(...devices.map((d) => textWidth(d, 14)), 60) + 12;
  const rowH = 22;
  const top = 4;
  const plotW = width - labelW - 16;
  const height = top + devices.length * rowH + 24;
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const x = (t) => labelW + (plotW * t) / total;
  devices.forEach((name, r) => {
    label(svg, labelW - 8, top + r * rowH + 16, name, { size: 14, anchor: "end" });
    svg.append(svgEl("line", { x1: labelW, x2: labelW + plotW, y1: top + (r + 1) * rowH,
                               y2: top + (r + 1) * rowH, stroke: "#e9ecef" }));
  });
  groups.forEach((group, gi) => {
    for (const entry of group.entries) {
      // "" is not device-specific: drawn on the first device's row, where that work runs
      const row = Math.max(0, devices.indexOf(entry.device));
      const x0 = x(entry.start);
      const w = Math.max(2, x(entry.start + entry.duration) - x0);
      const current = !phase.done && gi === phase.index;
      const rect = svgEl("rect", { x: x0, y: top + row * rowH + 3, width: w, height: rowH - 6, rx: 2,
                                   fill: PHASE_COLOURS[group.name] || "#495057",
                                   "fill-opacity": phase.done || current ? 0.9 : 0.3,
                                   stroke: current ? "#111418" : "none" });
      const tip = svgEl("title", {}, `${group.name} on ${entry.device || pic.first_device}: `
        + `${formatSeconds(entry.duration)} from ${formatSeconds(entry.start)}`
        + (entry.bytes ? `, ${formatBytes(entry.bytes)}` : ""));
      rect.append(tip);
      svg.append(rect);
    }
  });
  for (const t of niceTicks(0, total, 5)) {
    const tx = x(t);
    svg.append(svgEl("line", { x1: tx, x2: tx, y1: top, y2: top + devices.length * rowH, stroke: "#dee2e6" }));
    label(svg, tx, height - 6, formatSeconds(t), { size: 14, anchor: "middle", fill: "#495057" });
  }
}

function renderBytes(container, pic, groups) {
  clear(container);
  const verb = pic.emulated ? "would move" : "moved";
  container.append(el("div", "fl-subtitle", `Bytes this step ${verb}`));
  const list = el("div", "fl-bytes-list");
  for (const group of groups) {
    if (!group.bytes) continue;
    const row = el("div", "fl-bytes-row");
    const key = el("span", "fl-key");
    key.style.background = PHASE_COLOURS[group.name] || "#495057";
    row.append(key, el("span", "", group.name), el("span", "fl-num", formatBytes(group.bytes)));
    list.append(row);
  }
  if (!list.childElementCount) list.append(el("div", "", "nothing moves between devices"));
  container.append(list);
  const b = pic.bytes || {};
  const headline = pic.emulated
    ? `this step would move ${formatBytes(b.dataparallel)} with DataParallel, ${formatBytes(b.ddp)} with DDP`
    : `this step moved ${formatBytes(b.dataparallel)} with DataParallel, ${formatBytes(b.ddp)} with DDP`;
  container.append(el("div", "fl-bytes-total", headline));
}

// ---------------------------------------------------------------- charts

const CHART_H = 180;
const MARGIN = { left: 58, right: 14, top: 14, bottom: 26 };

function renderCharts(state) {
  const width = state.width || 960;
  const chartW = Math.max(260, Math.floor((width - 16) / 2));
  drawLossChart(state, chartW);
  drawParamChart(state, chartW);
}

function chartFrame(svg, width) {
  clear(svg);
  svg.setAttribute("width", width);
  svg.setAttribute("height", CHART_H);
  const plot = { x: MARGIN.left, y: MARGIN.top, w: width - MARGIN.left - MARGIN.right,
                 h: CHART_H - MARGIN.top - MARGIN.bottom };
  const id = `fl-clip-${Math.random().toString(36).slice(2, 8)}`;
  const clip = svgEl("clipPath", { id });
  clip.append(svgEl("rect", { x: plot.x, y: plot.y - 2, width: plot.w, height: plot.h + 4 }));
  svg.append(clip);
  plot.clip = `url(#${id})`;
  return plot;
}

function xRange(state) {
  const total = state.run && state.run.total_steps;
  return [0, isNum(total) && total > 0 ? total : Math.max(1, lastStep(state))];
}

function drawXAxis(svg, plot, xs) {
  for (const t of niceTicks(xs.domain[0], xs.domain[1], Math.max(3, Math.floor(plot.w / 90)))) {
    const x = xs(t);
    svg.append(svgEl("line", { x1: x, x2: x, y1: plot.y, y2: plot.y + plot.h, stroke: "#eef0f3" }));
    label(svg, x, plot.y + plot.h + 20, String(t), { size: 14, anchor: "middle", fill: "#343a40" });
  }
  svg.append(svgEl("line", { x1: plot.x, x2: plot.x + plot.w, y1: plot.y + plot.h, y2: plot.y + plot.h,
                             stroke: "#8a94a0" }));
  svg.append(svgEl("line", { x1: plot.x, x2: plot.x, y1: plot.y, y2: plot.y + plot.h, stroke: "#8a94a0" }));
}

function scale(domain, range) {
  const [d0, d1] = domain;
  const [r0, r1] = range;
  const f = (v) => r0 + ((v - d0) / (d1 - d0 || 1)) * (r1 - r0);
  f.domain = domain;
  return f;
}

// Many points per pixel column are drawn as that column's lowest and highest: the same line, fewer nodes.
function thin(points, xs) {
  if (points.length < 2000) return points;
  const out = [];
  let column = null;
  let lo = null;
  let hi = null;
  const flush = () => {
    if (!lo) return;
    if (lo[0] <= hi[0]) out.push(lo, hi);
    else out.push(hi, lo);
  };
  for (const p of points) {
    const c = Math.round(xs(p[0]));
    if (c !== column) {
      flush();
      column = c;
      lo = hi = p;
    } else {
      if (p[1] < lo[1]) lo = p;
      if (p[1] > hi[1]) hi = p;
    }
  }
  flush();
  return out;
}

// A polyline through finite points; a gap (null, non-finite) breaks it rather than joining across.
function pathOf(points, xs, ys) {
  let d = "";
  let pen = false;
  for (const [s, v] of points) {
    const y = isNum(v) ? ys(v) : NaN;
    if (!Number.isFinite(y)) {
      pen = false;
      continue;
    }
    d += `${pen ? "L" : "M"}${xs(s).toFixed(1)},${y.toFixed(1)}`;
    pen = true;
  }
  return d;
}

function line(svg, plot, d, colour, { width = 2.5, dash } = {}) {
  if (!d) return;
  svg.append(svgEl("path", { d, fill: "none", stroke: colour, "stroke-width": width,
                             "stroke-dasharray": dash, "clip-path": plot.clip,
                             "stroke-linejoin": "round" }));
}

function divergenceStep(state) {
  for (const [s, v] of state.loss) if (!isNum(v)) return s;
  for (const [s, values] of state.params) {
    if ((values || []).some((v) => !isNum(v) || Math.abs(v) > 1e12)) return s;
  }
  if (state.run && state.run.status === "diverged") return state.run.step;
  return null;
}

function markDivergence(svg, plot, xs, step) {
  if (step === null) return;
  const x = Math.min(plot.x + plot.w, Math.max(plot.x, xs(step)));
  svg.append(svgEl("line", { x1: x, x2: x, y1: plot.y, y2: plot.y + plot.h, stroke: "#c92a2a",
                             "stroke-width": 2, "stroke-dasharray": "5 3" }));
  const text = `diverged at step ${step}`;
  const right = x + 6 + textWidth(text, 14, 600) < plot.x + plot.w;
  label(svg, right ? x + 6 : x - 6, plot.y + 16, text, { size: 14, weight: 600, fill: "#c92a2a",
                                                         anchor: right ? "start" : "end", halo: true });
}

// TensorBoard's smoothing: an exponential moving average of log10(loss) with its start-up bias corrected
// (fitcore.report.smooth does the same on the server); gaps stay gaps.
export function smoothLog(points, weight) {
  if (!(weight > 0)) return points;
  let acc = 0;
  let n = 0;
  return points.map(([s, v]) => {
    if (!(isNum(v) && v > 0)) return [s, v];
    n += 1;
    acc = weight * acc + (1 - weight) * Math.log10(v);
    return [s, 10 ** (acc / (1 - weight ** n))];
  });
}

function positive(points) {
  return points.filter(([, v]) => isNum(v) && v > 0);
}

// Decades from the current run's own losses; earlier runs are clipped to them, not allowed to stretch.
export function logDomain(values) {
  if (!values.length) return [-4, 2];
  let lo = Math.floor(Math.log10(Math.min(...values)));
  let hi = Math.ceil(Math.log10(Math.max(...values)));
  if (hi <= lo) hi = lo + 1;
  if (hi - lo > 40) lo = hi - 40;  // a run that reached 1e-300 still shows its top forty decades
  return [lo, hi];
}

function drawLossChart(state, width) {
  const { svg, legend } = state.dom.lossFig;
  const plot = chartFrame(svg, width);
  const xs = scale(xRange(state), [plot.x, plot.x + plot.w]);
  const mine = positive(state.loss);
  const overlay = state.overlay.filter((o) => o && Array.isArray(o.loss));
  const source = mine.length ? mine : overlay.flatMap((o) => positive(o.loss));
  const [lo, hi] = logDomain(source.map(([, v]) => v));
  const ly = scale([lo, hi], [plot.y + plot.h, plot.y]);
  const ys = (v) => (v > 0 ? ly(Math.log10(v)) : NaN);
  const every = Math.max(1, Math.ceil((hi - lo) / Math.max(2, Math.floor(plot.h / 26))));
  for (let e = lo; e <= hi; e += every) {
    const y = ly(e);
    svg.append(svgEl("line", { x1: plot.x, x2: plot.x + plot.w, y1: y, y2: y, stroke: "#eef0f3" }));
    // text-anchor "end" covers the tspan too, so "10" and its exponent end at the axis together
    const t = label(svg, plot.x - 8, y + 5, "10", { size: 15, anchor: "end", fill: "#343a40" });
    const sup = svgEl("tspan", { dy: -7, "font-size": 14 }, String(e).replace("-", "−"));
    t.append(sup);
  }
  drawXAxis(svg, plot, xs);
  overlay.forEach((o, i) => {
    line(svg, plot, pathOf(thin(positive(o.loss), xs), xs, ys), COLOURS[(i + 1) % COLOURS.length],
      { width: 1.5, dash: "6 4" });
  });
  const own = state.loss.map(([s, v]) => [s, v > 0 ? v : null]);
  if (state.smoothing > 0) {  // the raw loss stays behind the smoothed one, pale
    line(svg, plot, pathOf(thin(own, xs), xs, ys), RAW_COLOUR, { width: 1.5 });
  }
  line(svg, plot, pathOf(thin(smoothLog(own, state.smoothing), xs), xs, ys), COLOURS[0], { width: 3 });
  markDivergence(svg, plot, xs, divergenceStep(state));
  if (!state.loss.length) {
    label(svg, plot.x + plot.w / 2, plot.y + plot.h / 2, "the loss of every step appears here",
      { size: 15, anchor: "middle", fill: "#6c757d" });
  }
  const entries = [{ text: state.run ? state.run.label || state.run.id : "this run", colour: COLOURS[0] }];
  overlay.forEach((o, i) => entries.push({ text: o.label, colour: COLOURS[(i + 1) % COLOURS.length],
                                           dash: true }));
  renderLegend(legend, entries, width - textWidth("Loss per step", 16, 700) - 16);
}

function renderLegend(container, entries, room) {
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
    if (i > 0 && used + w > room - more) {
      container.append(el("span", "fl-legend-more", `+${entries.length - i} more`));
      break;
    }
    const item = el("span", "fl-legend-item");
    const swatch = el("span", `fl-swatch${e.dash ? " fl-dash" : ""}${e.dot ? " fl-dot" : ""}`);
    swatch.style.setProperty("--c", e.colour);
    item.append(swatch, el("span", "", fitText(text, room - 30, 14)));
    container.append(item);
    used += w;
  }
}

// The y range: the true and least-squares values and the finite data, but a diverging run's huge
// values may not push the true values into a flat line at the bottom: the window is capped.
export function paramDomain(trueValues, lstsq, params) {
  const refs = trueValues.concat(lstsq || []).filter(isNum);
  let lo = refs.length ? Math.min(...refs, 0) : Infinity;
  let hi = refs.length ? Math.max(...refs, 0) : -Infinity;
  const span = refs.length ? Math.max(1, hi - lo) : Infinity;
  const capLo = lo - 3 * span;
  const capHi = hi + 3 * span;
  for (const [, values] of params) {
    for (const v of values || []) {
      if (!isNum(v)) continue;
      lo = Math.min(lo, Math.max(v, capLo));
      hi = Math.max(hi, Math.min(v, capHi));
    }
  }
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [-1, 1];
  if (hi - lo < 1e-9) return [lo - 1, hi + 1];
  const pad = 0.06 * (hi - lo);
  return [lo - pad, hi + pad];
}

function drawParamChart(state, width) {
  const { svg, legend } = state.dom.paramFig;
  const plot = chartFrame(svg, width);
  const xs = scale(xRange(state), [plot.x, plot.x + plot.w]);
  const domain = paramDomain(state.trueValues, state.lstsq, state.params);
  const inside = scale(domain, [plot.y + plot.h, plot.y]);
  // a value off the (capped) axis is a gap, not a vertical stroke to the edge and back
  const ys = (v) => (v >= domain[0] && v <= domain[1] ? inside(v) : NaN);
  for (const t of niceTicks(domain[0], domain[1], Math.max(3, Math.floor(plot.h / 34)))) {
    const y = ys(t);
    svg.append(svgEl("line", { x1: plot.x, x2: plot.x + plot.w, y1: y, y2: y, stroke: "#eef0f3" }));
    label(svg, plot.x - 8, y + 5, formatNumber(t).replace("-", "−"), { size: 14, anchor: "end",
                                                                      fill: "#343a40" });
  }
  drawXAxis(svg, plot, xs);
  const names = state.names.length ? state.names
    : (state.params[0] ? state.params[0][1].map((_, i) => `p${i}`) : []);
  names.forEach((name, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const yTrue = ys(state.trueValues[i]);
    if (isNum(state.trueValues[i])) {
      line(svg, plot, `M${plot.x},${yTrue} L${plot.x + plot.w},${yTrue}`, colour, { width: 1.5, dash: "7 5" });
    }
    if (state.lstsq && isNum(state.lstsq[i])) {
      const y = ys(state.lstsq[i]);
      line(svg, plot, `M${plot.x},${y} L${plot.x + plot.w},${y}`, colour, { width: 2, dash: "1.5 4" });
    }
    const series = state.params.map(([s, values]) => [s, values ? values[i] : null]);
    line(svg, plot, pathOf(thin(series, xs), xs, ys), colour, { width: 2.5 });
  });
  markDivergence(svg, plot, xs, divergenceStep(state));
  const entries = names.map((name, i) => ({ text: name, colour: COLOURS[i % COLOURS.length] }));
  entries.push({ text: "true", colour: "#495057", dash: true });
  if (state.lstsq) entries.push({ text: "least squares", short: "lstsq", colour: "#495057", dot: true });
  renderLegend(legend, entries, width - textWidth("Parameters per step", 16, 700) - 16);
}

// 1, 2, 5 × 10^k steps: ticks a reader can add in their head.
export function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)));
  }
  return ticks;
}
