// fitcore_live: the dashboard's live centre, drawn in the browser (st.components.v2; component.js loads
// this module from the app's own route).
//
// Streamlit calls the default export on mount and again on every script rerun with new `data`; it only
// calls the returned cleanup when the component unmounts. So all state lives on `parentElement`
// (one state per mount), and a rerun updates it instead of building a second poller or DOM.
//
// data = {payload, owner, endpoint, bye, poll_ms, queued_poll_ms, smoothing, overlay, plotly, lang, texts, push}:
// app.py's live_data; payload is fitcore/kit/live.py's payload with since=0; texts are the view's words in
// the page's language (words.js).

import { chartFigure, chartRoomChanged, disposeCharts, renderCharts } from "./charts.js";
import { el, svgEl } from "./dom.js";
import { isNum } from "./format.js";
import { currentLang, setTexts, tr } from "./words.js";
import {
  clientNowSeconds, isActive, mergePayload, resetRun, startPollingIfActive, stopPolling,
} from "./poll.js";
import {
  postWalk, renderQuestion, renderTally, renderTeacherQuestion, revealKind, revealText,
} from "./follow.js";
import { onDrawer } from "./drawers.js";
import { renderPicture } from "./step_view.js";
import { newStepper, togglePlay, walkPhase } from "./stepper.js";
import { renderTimeline } from "./timeline.js";

const LOST_AFTER_MS = 3000;  // no answer for this long: say the connection is lost
const PLOTLY_URL = "/fitcore/static/plotly.min.js";  // where the preview has it too

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

function createState(parentElement) {
  const state = {
    parentElement, disposed: false, setTriggerValue: null,
    endpoint: "/fitcore/live", byeEndpoint: null, pollMs: 400, queuedPollMs: 1000, overlay: [], smoothing: 0,
    follow: null, teach: null, room: null, questionShown: null, walkPosted: null,
    plotlyUrl: PLOTLY_URL, dataVersion: 0, lang: "en",
    run: null, names: [], trueValues: [], lstsq: null, loss: [], params: [],
    picture: null,
    poll: { timer: null, inFlight: false, failures: 0, lastAnswerAt: performance.now(), stopped: true,
            gone: false, controller: null },
    clock: { offset: null, bestRtt: Infinity },       // server time - client time, in seconds
    reportedStatus: null,                              // the status Streamlit last heard about
    stepper: newStepper(performance.now()),
    charts: { loading: false },
    width: 0, raf: null, connTimer: null,
    dirty: { charts: true, picture: true, timeline: true },
  };
  state.redraw = () => render(state);
  state.showConnection = () => renderConnection(state);
  state.dom = buildDom(state);
  state.dom.veil = addVeil(state.dom.picture);
  state.dom.answer = el("div", "fl-answer");  // a student's page, after the reveal: the answer, and theirs
  state.dom.answer.hidden = true;
  state.dom.picture.append(state.dom.answer);
  parentElement.appendChild(state.dom.root);
  state.resizeObserver = new ResizeObserver(() => onResize(state));
  state.resizeObserver.observe(state.dom.root);
  state.connTimer = setInterval(() => renderConnection(state), 500);
  state.onPageHide = () => sayGoodbye(state);
  window.addEventListener("pagehide", state.onPageHide);
  state.onScreenResize = () => onScreenResize(state);  // a taller or shorter screen: the charts' room
  window.addEventListener("resize", state.onScreenResize);
  state.onPress = (event) => pauseAtOnce(state, event);
  document.addEventListener("pointerdown", state.onPress, true);
  // a strategy's drawer from outside frontend/ arrives after its first picture: draw that picture again
  state.stopDrawers = onDrawer(() => {
    Object.assign(state.dirty, { picture: true, timeline: true });
    render(state);
  });
  return state;
}

// The browser's owner id lives in a cookie, sent with the page's websocket and with every poll: a reload,
// or the address opened again in this browser, finds this browser's runs; another browser has its own.
// The server's signature of it (fitcore/core/identity.py) lives beside it: a room counts a signed browser's answer.
function keepOwner(owner, signed) {
  if (!/^[0-9a-f]{32}$/.test(owner)) return;
  const cookies = document.cookie.split("; ");
  if (!cookies.includes(`fitcore_owner=${owner}`)) {
    document.cookie = `fitcore_owner=${owner}; path=/; max-age=${30 * 24 * 3600}; SameSite=Strict`;
  }
  if (/^[0-9a-f]{32}$/.test(signed || "") && !cookies.includes(`fitcore_signed=${signed}`)) {
    document.cookie = `fitcore_signed=${signed}; path=/; max-age=${30 * 24 * 3600}; SameSite=Strict`;
  }
}

// The run this page shows live, in a cookie of this browser session, sent with the page's websocket: a page
// whose server no longer has the run (it restarted) says so once (dashboard/state.py's run_gone), where it
// would otherwise show Ready as if nothing had run. Kept while the run is active, also once the server
// stopped answering for it; cleared once the page shows a run that ended, another one, or none.
function keepLiveRun(run) {
  const live = run && run.active && /^run-[0-9]{1,12}$/.test(run.id) ? run.id : null;
  const held = document.cookie.split("; ").find((c) => c.startsWith("fitcore_run="));
  if (live && held !== `fitcore_run=${live}`) {
    document.cookie = `fitcore_run=${live}; path=/; SameSite=Strict`;
  } else if (!live && held) {
    document.cookie = "fitcore_run=; path=/; max-age=0; SameSite=Strict";
  }
}

// A closing (or reloading) page says so, and the server frees its run a few seconds later unless a page
// reads it again: a reload does at once, a closed tab never will.
function sayGoodbye(state) {
  // a room's student never owned the run it shows: the teacher's page keeps it
  if (state.follow || !state.byeEndpoint || !isActive(state) || !navigator.sendBeacon) return;
  navigator.sendBeacon(`${state.byeEndpoint}?run=${encodeURIComponent(state.run.id)}`);
}

// The page's Pause button (a Streamlit button): its press pauses the run at once through the live route's
// neighbour, POST /fitcore/pause, where the script's rerun would take a few hundred ms (several steps at
// 20 steps/s); the rerun then pauses it again, which changes nothing.
function pauseAtOnce(state, event) {
  if (state.follow || !state.run || !state.run.active || state.run.status !== "running") return;
  if (!event.target || !event.target.closest || !event.target.closest(".st-key-pause button")) return;
  fetch(`/fitcore/pause?run=${encodeURIComponent(state.run.id)}`,
    { method: "POST", credentials: "same-origin", cache: "no-store", keepalive: true }).catch(() => {});
}

function dispose(state) {
  if (state.disposed) return;
  state.disposed = true;
  document.removeEventListener("pointerdown", state.onPress, true);
  state.stopDrawers();
  stopPolling(state);
  clearTimeout(state.poll.goneTimer);
  clearInterval(state.connTimer);
  window.removeEventListener("pagehide", state.onPageHide);
  window.removeEventListener("resize", state.onScreenResize);
  if (state.raf) cancelAnimationFrame(state.raf);
  state.resizeObserver.disconnect();
  disposeCharts(state);
  state.dom.root.remove();
  if (state.parentElement.fitcoreLiveState === state) delete state.parentElement.fitcoreLiveState;
}

function buildDom(state) {
  const root = el("div", "fl-root");
  const status = el("div", "fl-status");
  const badge = el("span", "fl-badge");
  const statusText = el("span", "fl-status-text");
  const conn = el("span", "fl-conn");
  // the charts' room on the first screen holds the shown step's timeline and bytes instead, at a press:
  // below the charts they fall under a projector's fold
  const detail = el("button", "fl-detail");
  detail.addEventListener("click", () => toggleDetail(state));
  status.append(badge, statusText, detail, conn);
  const progress = el("div", "fl-progress");
  const progressFill = el("div", "fl-progress-fill");
  progress.append(progressFill);

  const picture = el("section", "fl-picture");
  const head = el("div", "fl-head");
  const phaseTitle = el("div", "fl-phase-title");
  const controls = el("div", "fl-controls");
  const prev = el("button", "fl-btn", "◀");
  const play = el("button", "fl-btn fl-play");
  const next = el("button", "fl-btn", "▶");
  controls.append(prev, play, next);
  head.append(phaseTitle, controls);
  const pillsRow = el("div", "fl-pills-row");
  const pills = el("div", "fl-pills");
  const stepInfo = el("div", "fl-step-info");
  pillsRow.append(pills, stepInfo);
  const pictureSvg = svgEl("svg", { class: "fl-svg" });
  const pictureEmpty = el("div", "fl-empty");
  picture.append(head, pillsRow, pictureSvg, pictureEmpty);

  const charts = el("div", "fl-charts");
  const lossFig = chartFigure("loss-per-step");
  const paramFig = chartFigure("parameters-per-step");
  charts.append(lossFig.figure, paramFig.figure);

  const timeline = el("section", "fl-timeline");
  const gantt = el("div", "fl-gantt");
  const ganttTitle = el("div", "fl-subtitle");
  const ganttSvg = svgEl("svg", { class: "fl-gantt-svg" });
  gantt.append(ganttTitle, ganttSvg);
  const bytes = el("div", "fl-bytes");
  timeline.append(gantt, bytes);

  root.append(status, progress, picture, charts, timeline);
  const clicked = (change) => () => {
    change(performance.now());
    state.dirty.picture = true;
    render(state);
  };
  prev.addEventListener("click", clicked((now) => walkPhase(state, -1, now)));
  next.addEventListener("click", clicked((now) => walkPhase(state, +1, now)));
  play.addEventListener("click", clicked((now) => togglePlay(state, now)));
  return {
    root, status, badge, statusText, conn, progressFill, picture, phaseTitle, prev, play, next,
    pills, stepInfo, pictureSvg, pictureEmpty, lossFig, paramFig, ganttTitle, ganttSvg, bytes, timeline, detail,
  };
}

// The words that do not change with the run; again on every mount, as the language may have changed.
function labelDom(dom) {
  dom.prev.title = tr("live.stepper.previous");
  dom.next.title = tr("live.stepper.next");
  dom.pictureEmpty.textContent = tr("live.picture.empty");
  dom.lossFig.heading.textContent = tr("live.chart.loss.title");
  dom.paramFig.heading.textContent = tr("live.chart.params.title");
}

// A script rerun brings the whole history again (since=0): it is the truth for what it covers, and any
// newer points this page already polled are kept on top of it.
function acceptMountData(state, data) {
  setTexts(data.texts, data.lang);
  if (state.lang !== currentLang()) state.dirty = { charts: true, picture: true, timeline: true };
  state.lang = currentLang();  // polls ask for the run's own words (its status line) in it too
  labelDom(state.dom);
  state.push = data.push === true;  // a notebook's widget: its kernel pushes the payloads, nothing polls
  if (data.endpoint) state.endpoint = data.endpoint;
  if (data.bye) state.byeEndpoint = data.bye;
  if (data.plotly) state.plotlyUrl = data.plotly;
  if (isNum(data.poll_ms)) state.pollMs = data.poll_ms;
  if (isNum(data.queued_poll_ms)) state.queuedPollMs = data.queued_poll_ms;
  state.smoothing = isNum(data.smoothing) ? data.smoothing : 0;
  state.overlay = Array.isArray(data.overlay) ? data.overlay : [];
  if (data.owner) keepOwner(data.owner, data.signed);
  acceptRoom(state, data);
  acceptClassroom(state, data);
  state.dataVersion += 1;  // the charts are drawn again from this data, not appended to
  state.dirty.charts = true;
  const payload = data.payload;
  if (!payload || !payload.run) {
    resetRun(state, null);
    state.poll.gone = false;
    if (state.follow) startPollingIfActive(state);  // a room's page waits for the teacher's run
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

// A notebook's widget (widget.js): what its kernel pushed, as a poll's answer would bring it. `replace`: the
// whole run (since=0), the truth for what it covers, as a rerun's mount data is; else the steps after the
// last one pushed. A payload without a run is the planned step of a config (or nothing).
export function pushPayload(parentElement, payload, replace) {
  const state = parentElement.fitcoreLiveState;
  if (!state || state.disposed || !payload) return;
  if (!payload.run) {
    resetRun(state, null);
  } else {
    if (!state.run || state.run.id !== payload.run.id) resetRun(state, payload);
    mergePayload(state, payload, { replace });
  }
  state.reportedStatus = state.run ? state.run.status : null;
  render(state);
}

function onResize(state) {
  const width = Math.floor(state.dom.root.clientWidth);
  if (!width || width === state.width) return;
  state.width = width;
  state.dirty = { charts: true, picture: true, timeline: true };
  render(state);
}

function onScreenResize(state) {
  if (!chartRoomChanged(state)) return;
  state.dirty.charts = true;
  render(state);
}

// The step's timeline and bytes where the charts were, or the charts again.
function toggleDetail(state) {
  state.detail = !state.detail;
  render(state);
}

// What the charts' place shows: the step's timeline where asked for, unless the step is veiled (its
// question waits: the timeline is veiled with it), then the charts. The button goes with the veil too.
// Hidden, the charts are not drawn (a plot has no size to draw at): they are drawn whole once shown again.
function applyDetail(state) {
  const veiled = state.dom.root.classList.contains("fl-veiled");
  state.dom.detail.hidden = !state.picture || veiled;  // no step yet: no timeline to show
  const words = tr(state.detail ? "live.detail.charts" : "live.detail.step");
  if (state.dom.detail.textContent !== words) state.dom.detail.textContent = words;
  const shown = !!state.detail && !veiled;
  if (shown === !!state.detailShown) return;
  state.detailShown = shown;
  state.dom.root.classList.toggle("fl-detail-on", shown);
  for (const fig of [state.dom.lossFig, state.dom.paramFig]) fig.drawn = null;
  Object.assign(state.dirty, { charts: true, timeline: true });
}

function render(state) {
  if (state.disposed) return;
  if (!state.width) state.width = Math.floor(state.dom.root.clientWidth) || 960;
  renderStatus(state);
  const pictureDrawn = state.dirty.picture;
  renderPicture(state);
  renderVeil(state);
  applyDetail(state);
  postWalk(state, performance.now());
  if (pictureDrawn && !state.dirty.charts && chartRoomChanged(state)) state.dirty.charts = true;
  if (state.dirty.timeline) renderTimeline(state);
  if (state.dirty.charts && !state.detailShown) renderCharts(state);
  state.dirty.timeline = false;
  state.dirty.charts = state.dirty.charts && state.detailShown;
}

function renderStatus(state) {
  const { dom, run } = state;
  const status = run ? run.status : "idle";
  dom.root.dataset.status = status;
  dom.root.dataset.kind = run ? run.kind || "info" : "info";
  const badges = { paused: tr("live.badge.paused"), queued: tr("live.badge.queued"),
                   diverged: tr("live.badge.diverged"), failed: tr("live.badge.failed") };
  dom.badge.textContent = badges[status] || "";
  dom.badge.hidden = !badges[status];
  let line = run ? run.status_line || status : tr("live.status.no_run");
  if (state.follow) {  // whose run this is: the teacher's, read-only (or none yet)
    line = run ? tr("live.follow.line", { line }) : tr(state.poll.gone ? "live.follow.closed" : "live.follow.none");
  }
  dom.statusText.textContent = line;
  const fraction = run && run.total_steps ? Math.min(1, (run.step || 0) / run.total_steps) : 0;
  dom.progressFill.style.width = `${(fraction * 100).toFixed(2)}%`;
  if (!state.follow && !state.push) keepLiveRun(run);  // the teacher's run is not this browser's
  renderConnection(state);
}

function renderConnection(state) {
  if (state.disposed) return;
  const conn = state.dom.conn;
  if (state.push) {  // no requests of its own to time: the widget says what its kernel does
    conn.hidden = true;
    return;
  }
  if (state.poll.gone) {
    conn.textContent = tr("live.connection.gone");
  } else if (isActive(state) && performance.now() - state.poll.lastAnswerAt > LOST_AFTER_MS) {
    conn.textContent = tr("live.connection.lost");
  } else {
    conn.textContent = "";
  }
  conn.hidden = !conn.textContent;
}

// The teacher's tally lies over the picture's footer (the strategy's caption under the boxes), which the
// answer's why says better for this step: so the answer and every choice's count stay on a 1280x720
// projector's first screen under eight devices' boxes. The footer is measured as drawn (zoomed or not).
function placeTally(state) {
  const box = state.dom.answer;
  const tallied = !box.hidden && box.classList.contains("fl-answer-tally");
  const foot = tallied ? state.dom.pictureSvg.querySelector(".fl-foot") : null;
  let lift = 0;
  if (foot) {
    lift = state.dom.pictureSvg.getBoundingClientRect().bottom - foot.getBoundingClientRect().top + 2;
  }
  box.style.marginTop = lift > 0 ? `${-Math.round(lift)}px` : "";
}

// The classroom (app.py's classroom_data): the presenter's bigger picture (live.css zooms the SVG, which
// step_view.js draws at the width divided by that zoom), and a veil over the step while its question waits.
function addVeil(picture) {
  const veil = el("div", "fl-veil");
  veil.hidden = true;
  picture.append(veil);
  return veil;
}

// A room (follow.js): a student's page follows the teacher's run (data.follow, the room's code) and has
// no stepper of its own; the teacher's page (data.teach) posts where its picture stands.
function acceptRoom(state, data) {
  const follow = typeof data.follow === "string" && /^[A-Za-z0-9_-]{22}$/.test(data.follow) ? data.follow : null;
  if (follow !== state.follow) {
    state.follow = follow;
    state.room = null;
    state.questionShown = null;
  }
  state.teach = typeof data.teach === "string" && /^[A-Za-z0-9_-]{22}$/.test(data.teach) ? data.teach : null;
  state.dom.root.classList.toggle("fl-follower", !!follow);
  state.dom.answer.textContent = "";
}

function acceptClassroom(state, data) {
  state.dom.root.classList.toggle("fl-presenter", data.presenter === true);
  state.reveal = data.reveal !== false;
  state.askStep = isNum(data.ask_step) ? data.ask_step : null;
  state.question = data.question && Array.isArray(data.question.choices) ? data.question : null;
  state.tally = data.tally && Array.isArray(data.tally.counts) ? data.tally : null;  // revealed: the answer
  state.questionShown = null;
  if (!state.question) state.dom.veil.textContent = data.veil || "";
  state.dirty.picture = true;
}

// Veiled: the question about the shown step is not answered yet, or a newer step came in while paused
// (the script then reruns once, so that the page asks about that step).
function renderVeil(state) {
  const pic = state.picture;
  if (state.follow) {  // a student's page: veiled while the teacher's question waits for the reveal
    const question = state.room && state.room.question;
    const veiled = !!question && !question.revealed;
    renderQuestion(state);
    state.dom.root.classList.toggle("fl-veiled", veiled);
    state.dom.veil.hidden = !veiled;
    state.dom.answer.textContent = revealText(question);
    state.dom.answer.className = `fl-answer fl-answer-${revealKind(question) || "none"}`;
    state.dom.answer.hidden = !state.dom.answer.textContent;
    return;
  }
  const newer = state.askStep !== null && !!pic && pic.step > state.askStep;
  const veiled = state.reveal === false || newer;
  if (state.teach && state.question && veiled) renderTeacherQuestion(state);
  renderTally(state.dom.answer, !veiled && state.teach ? state.tally : null);
  placeTally(state);
  state.dom.root.classList.toggle("fl-veiled", veiled);
  state.dom.veil.hidden = !veiled;
  if (newer && state.askedFor !== pic.step && state.setTriggerValue) {
    state.askedFor = pic.step;
    state.setTriggerValue("status", state.run.status);
  }
}
