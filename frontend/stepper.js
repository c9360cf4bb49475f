// The phase stepper: which phase of the shown step is highlighted, and what the run's status and the
// teacher's clicks (◀ ▶, play / hold, a phase's pill) do to it. State changes only; the caller redraws.
// `now` is performance.now() on the page and a number in frontend/tests/stepper.test.js.

import { isNum } from "./format.js";

export const SLOW_PACE = 5;          // steps/s: at or below this the phases play in order over each step
export const DEMO_PHASE_MS = 900;    // one phase's time when the teacher presses play on a still run
export const ALL_DONE = Number.MAX_SAFE_INTEGER;  // the phase index for "the whole step, all done"

export function newStepper(now) {
  return { playing: true, phase: 0, held: null, stepShownAt: now, loopStart: 0, drawnKey: "" };
}

// The step's phases in the order they first ran, each with its entries (one per device), bytes and span.
// A pipeline's blocks carry their tick in the schedule's unit-time order: they group by tick, in tick order
// (the phase walk steps through the schedule), and the phases with no tick (its loss, its optimizer) follow.
export function phaseGroups(pic) {
  const entries = (pic && pic.phases) || [];
  if (!entries.some((e) => isNum(e.tick))) return namedGroups(pic);
  const ticks = groupBy(entries.filter((e) => isNum(e.tick)), (e) => e.tick, (e) => "tick")
    .sort((a, b) => a.tick - b.tick);
  return [...ticks, ...groupBy(entries.filter((e) => !isNum(e.tick)), (e) => e.name, (e) => e.name)];
}

// The step's phases by name, in the order they first ran: what the bytes list totals.
export function namedGroups(pic) {
  return groupBy((pic && pic.phases) || [], (e) => e.name, (e) => e.name);
}

function groupBy(entries, keyOf, nameOf) {
  const groups = [];
  const byKey = new Map();
  for (const entry of entries) {
    let group = byKey.get(keyOf(entry));
    if (!group) {
      group = { name: nameOf(entry), entries: [], bytes: 0, start: Infinity, end: 0 };
      if (isNum(entry.tick)) group.tick = entry.tick;
      byKey.set(keyOf(entry), group);
      groups.push(group);
    }
    group.entries.push(entry);
    group.bytes += isNum(entry.bytes) ? entry.bytes : 0;
    group.start = Math.min(group.start, entry.start);
    group.end = Math.max(group.end, entry.start + entry.duration);
  }
  return groups;
}

export function isSlow(run) {
  return isNum(run.pace) && run.pace <= SLOW_PACE;
}

export function shownPicture(state) {
  return state.stepper.playing ? state.picture : state.stepper.held || state.picture;
}

// {index, done, animating}: the phase highlighted now. index === the number of phases means "all done".
export function currentPhase(state, now) {
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
    const index = Math.min(n, Math.floor((now - stepper.stepShownAt) / (stepMs / n)));
    return { index, done: index >= n, animating: index < n };
  }
  if (run.status === "running") return { index: n, done: true, animating: false };
  // the teacher pressed play on a run that stands still: loop over the step's phases
  const index = Math.floor((now - stepper.loopStart) / DEMO_PHASE_MS) % (n + 1);
  return { index, done: index >= n, animating: true };
}

// What the stepper does by itself when the run's status changes; the teacher's clicks override it.
export function applyStatusDefaults(state, before, after, now) {
  const stepper = state.stepper;
  if (after === "running" || after === "queued") {
    stepper.playing = true;  // queued: nothing to show yet, follow the first step when it comes
    stepper.held = null;
  } else if (after === "paused") {
    // freeze where the motion is now: the current phase (the first one if it showed the whole step)
    const shown = currentPhase({ ...state, run: { ...state.run, status: before || "running" } }, now);
    stepper.playing = false;
    stepper.held = state.picture;
    stepper.phase = shown.done ? 0 : shown.index;
  } else {
    stepper.playing = false;  // finished, stopped, diverged, failed: the whole last step, still
    stepper.held = state.picture;
    stepper.phase = ALL_DONE;
  }
}

export function onNewStep(state, now) {
  if (state.run && state.run.status === "paused" && !state.stepper.playing) {
    // a step taken with Step while paused: hold it at its first phase, for ◀ / ▶ to walk through
    state.stepper.held = state.picture;
    state.stepper.phase = 0;
  }
  state.stepper.stepShownAt = now;
}

// ◀ / ▶: one phase back or on, wrapping through "all done": … optimizer, all done, scatter …
export function walkPhase(state, delta, now) {
  const pic = shownPicture(state);
  const n = phaseGroups(pic).length;
  if (!n) return;
  const shown = currentPhase(state, now);
  state.stepper.playing = false;
  state.stepper.held = pic;
  state.stepper.phase = (shown.index + delta + n + 1) % (n + 1);
}

export function pickPhase(state, index) {
  state.stepper.playing = false;
  state.stepper.held = shownPicture(state);
  state.stepper.phase = index;
}

export function togglePlay(state, now) {
  const stepper = state.stepper;
  stepper.playing = !stepper.playing;
  if (stepper.playing) {
    stepper.held = null;
    stepper.loopStart = now;
    stepper.stepShownAt = now;
  } else {
    const shown = currentPhase({ ...state, stepper: { ...stepper, playing: true } }, now);
    stepper.held = state.picture;
    stepper.phase = shown.index;
  }
}
