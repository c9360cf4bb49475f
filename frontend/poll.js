// The live view's data and its polling: what a mount (a script rerun) brings, what each poll of
// GET <endpoint>?run=<id>&since=<last step>&lang=<en|zh> adds, the server's clock, and the page's own
// latency figures.
// While the run is active the page asks by itself, so a page costs the server one small JSON answer a
// poll, not a script rerun; the status trigger reruns the script only when the run's status changes.

import { FOLLOW_IDLE_MS, applyFollow, followUrl, teachQuery } from "./follow.js";
import { isNum } from "./format.js";
import { lastStepOf, mergeSeries } from "./series.js";
import { applyStatusDefaults, newStepper, onNewStep } from "./stepper.js";

const MAX_BACKOFF_MS = 5000;    // the slowest retry after errors
const FETCH_TIMEOUT_MS = 8000;  // a request that hangs this long counts as an error

// The server's clock is what picture.time is on; performance.now() never jumps, Date.now() may.
export function clientNowSeconds() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

export function lastStep(state) {
  return lastStepOf(state.loss, state.params);
}

// A student's page in a room follows the teacher's run for as long as it is open (follow.js).
export function isActive(state) {
  if (state.follow) return !state.poll.gone;
  return !!(state.run && state.run.active) && !state.poll.gone;
}

export function resetRun(state, payload) {
  stopPolling(state);
  state.run = payload ? { ...payload.run } : null;
  state.loss = [];
  state.params = [];
  state.picture = null;
  state.names = [];
  state.trueValues = [];
  state.lstsq = null;
  state.stepper = newStepper(performance.now());
  state.poll.failures = 0;
  state.poll.gone = false;
  state.dirty = { charts: true, picture: true, timeline: true };
  if (payload) applyStatusDefaults(state, null, payload.run.status, performance.now());
}

export function mergePayload(state, payload, { replace }) {
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
    if (isNew) {
      onNewStep(state, performance.now());
      state.dirty.picture = true;
      state.dirty.timeline = true;
    }
  }
  if (previousStatus !== state.run.status) {
    applyStatusDefaults(state, previousStatus, state.run.status, performance.now());
    state.dirty.picture = true;
  }
}

// A queued run changes only its place in the queue; a paused one can still take a single Step.
function pollInterval(state) {
  if (state.follow) return state.run && state.run.active && state.run.status !== "paused" ? state.pollMs : FOLLOW_IDLE_MS;
  return state.run.status === "queued" ? state.queuedPollMs : state.pollMs;
}

export function startPollingIfActive(state) {
  if (!isActive(state) || state.push) {  // a notebook's kernel pushes its payloads (pushPayload): no polls
    stopPolling(state);
    return;
  }
  if (state.poll.stopped) {
    state.poll.stopped = false;
    state.poll.lastAnswerAt = performance.now();
    schedulePoll(state, pollInterval(state));
  }
}

export function stopPolling(state) {
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
  const url = state.follow ? followUrl(state, lastStep(state))
    : `${state.endpoint}?run=${encodeURIComponent(state.run.id)}&since=${lastStep(state)}`
      + `&lang=${encodeURIComponent(state.lang || "en")}${teachQuery(state)}`;
  const controller = new AbortController();
  const timeout = setTimeout(() => controller.abort(), FETCH_TIMEOUT_MS);
  state.poll.inFlight = true;
  state.poll.controller = controller;
  const sentAt = performance.now();
  try {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store",
                                        signal: controller.signal });
    if (response.status === 204) {
      // this page pressed Reset while the poll was on its way: the rerun it asked for brings the new view
      stopPolling(state);
      return;
    }
    if (response.status === 404) {
      onGone(state);  // a room's page: the room is closed; the rerun gives the student a page of its own
      return;
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const payload = await response.json();
    const receivedAt = performance.now();
    if (state.follow) {
      if (!state.disposed) applyFollowed(state, payload, sentAt, receivedAt);
      return;
    }
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
    state.showConnection();
  }
}

// NTP-style: the server made the payload somewhere between sending and receiving; the fastest round
// trip bounds that best, so its estimate is kept.
export function updateClock(state, serverTime, sentAt, receivedAt) {
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
  state.redraw();
  askRerun(state);
}

// The server no longer has the run (it restarted, or freed it): the script reruns once, so that the page
// says so and offers Start, with Pause and Stop gone. A server that restarted answers this poll before the
// page's websocket is back, and a request sent then is lost: it is asked again every GONE_RETRY_MS until a
// rerun brings the page new data (acceptMountData clears `gone`).
export const GONE_RETRY_MS = 2000;

function askRerun(state) {
  clearTimeout(state.poll.goneTimer);
  if (!state.poll.gone || state.disposed || !state.setTriggerValue || (!state.run && !state.follow)) return;
  state.setTriggerValue("status", "gone");
  state.poll.goneTimer = setTimeout(() => askRerun(state), GONE_RETRY_MS);
}

// A student's page: the teacher's run as the room answers it, whichever run that is now.
function applyFollowed(state, payload, sentAt, receivedAt) {
  state.poll.failures = 0;
  state.poll.lastAnswerAt = receivedAt;
  if (!payload.run) {
    if (state.run) {
      resetRun(state, null);
      state.poll.stopped = false;  // resetRun stopped the polls: a room's page goes on waiting
    }
  } else {
    updateClock(state, payload.run.server_time, sentAt, receivedAt);
    const fresh = !state.run || payload.run.id !== state.run.id;
    if (fresh) {
      resetRun(state, payload);
      state.poll.stopped = false;
    }
    mergePayload(state, payload, { replace: fresh });
  }
  applyFollow(state, payload.follow);
  state.redraw();
}

function applyLivePayload(state, payload) {
  if (payload.teach !== undefined) state.teachRoom = payload.teach;  // the teacher's room: its counts
  const stepBefore = state.picture ? state.picture.step : null;
  const seriesBefore = lastStep(state);
  mergePayload(state, payload, { replace: false });
  const status = state.run.status;
  if (status !== state.reportedStatus) {
    // Streamlit reruns the script once, so its buttons (start / pause / resume) match the run again.
    state.reportedStatus = status;
    if (state.setTriggerValue) state.setTriggerValue("status", status);
  }
  state.redraw();
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
