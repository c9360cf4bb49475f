// node --test frontend/tests/: the phase stepper, on a fake clock (`now` in ms).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ALL_DONE, DEMO_PHASE_MS, applyStatusDefaults, currentPhase, newStepper, onNewStep, phaseGroups, pickPhase,
  togglePlay, walkPhase,
} from "../stepper.js";

const DP = ["scatter", "replicate", "parallel_apply", "gather", "loss", "backward", "reduce", "optimizer"];

// Two devices: every phase on each, in DataParallel's order; bytes only off the first device.
function picture(step = 1) {
  const phases = [];
  let t = 0;
  for (const name of DP) {
    for (const device of ["virtual:0", "virtual:1"]) {
      phases.push({ name, device, start: t, duration: 1e-5, bytes: device === "virtual:1" ? 12 : 0 });
      t += 1e-5;
    }
  }
  return { step, time: 100 + step, phases };
}

function state(status, pace, now = 0) {
  return { run: { status, pace }, picture: picture(), stepper: newStepper(now) };
}

test("phases come in the order they first ran, with their entries, bytes and span", () => {
  const groups = phaseGroups(picture());
  assert.deepEqual(groups.map((g) => g.name), DP);
  assert.equal(groups[0].entries.length, 2);
  assert.equal(groups[0].bytes, 12);
  assert.ok(Math.abs(groups[1].start - 2e-5) < 1e-12 && Math.abs(groups[1].end - 4e-5) < 1e-12);
  assert.deepEqual(phaseGroups(null), []);
});

test("a slow run plays each step's phases in order over the step's time", () => {
  const s = state("running", 2);  // 500 ms a step, 8 phases: 62.5 ms each
  assert.deepEqual(currentPhase(s, 0), { index: 0, done: false, animating: true });
  assert.equal(currentPhase(s, 130).index, 2);
  assert.deepEqual(currentPhase(s, 600), { index: 8, done: true, animating: false });
  onNewStep(s, 600);
  assert.equal(currentPhase(s, 600).index, 0);  // the next step starts over
});

test("a fast run shows the whole step; a still run loops when the teacher presses play", () => {
  assert.deepEqual(currentPhase(state("running", 20), 0), { index: 8, done: true, animating: false });
  const s = state("finished", 2);
  applyStatusDefaults(s, "running", "finished", 0);
  assert.equal(s.stepper.phase, ALL_DONE);
  assert.equal(currentPhase(s, 0).done, true);
  togglePlay(s, 1000);
  assert.equal(currentPhase(s, 1000 + 3 * DEMO_PHASE_MS + 1).index, 3);
  assert.equal(currentPhase(s, 1000 + 9 * DEMO_PHASE_MS + 1).index, 0);  // 8 phases and "all done", then again
});

test("pausing freezes the phase shown; ◀ ▶ walk and wrap through all done", () => {
  const s = state("running", 2);
  s.run = { status: "paused", pace: 2 };
  applyStatusDefaults(s, "running", "paused", 140);  // phase 2 was showing
  assert.equal(s.stepper.playing, false);
  assert.equal(currentPhase(s, 99_999).index, 2);
  walkPhase(s, -1, 0);
  assert.equal(currentPhase(s, 0).index, 1);
  pickPhase(s, 7);
  walkPhase(s, +1, 0);
  assert.deepEqual(currentPhase(s, 0), { index: 8, done: true, animating: false });
  walkPhase(s, +1, 0);
  assert.equal(currentPhase(s, 0).index, 0);  // … optimizer, all done, scatter
  s.picture = picture(2);  // Step while paused: the new step held at its first phase
  pickPhase(s, 5);
  onNewStep(s, 0);
  assert.equal(s.stepper.held.step, 2);
  assert.equal(currentPhase(s, 0).index, 0);
});

test("a lesson pace (one step per 8 phases x 2 s, fitcore/view/controls.py) holds each phase 2 s", () => {
  const s = state("running", 1 / 16);
  for (let i = 0; i < DP.length; i++) {
    assert.deepEqual(currentPhase(s, 2000 * i + 1), { index: i, done: false, animating: true });
    assert.equal(currentPhase(s, 2000 * (i + 1) - 1).index, i);
  }
  assert.equal(currentPhase(s, 16000).done, true);
  // the next step starts its walk from its first phase; ◀ ▶ still walk it by hand
  onNewStep(s, 16500);
  assert.equal(currentPhase(s, 16501).index, 0);
  walkPhase(s, 1, 17000);
  assert.deepEqual(currentPhase(s, 30000), { index: 1, done: false, animating: false });
});
