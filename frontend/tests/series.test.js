// node --test frontend/tests/: the charts' data, from merging polls to the axes' ranges and thinning.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  divergenceStep, forLogAxis, lastStepOf, lossRange, mergeSeries, paramCaps, paramDomain, paramSeries,
  smoothLog, thin,
} from "../series.js";

test("a poll appends only the steps after the last one held", () => {
  const held = [[1, 10], [2, 9]];
  assert.deepEqual(mergeSeries(held, [[2, 99], [3, 8]], false), [[1, 10], [2, 9], [3, 8]]);
  assert.equal(mergeSeries(held, [[1, 5]], false), held);  // nothing new: the same array
});

test("a rerun's whole history replaces what it covers and keeps newer polled steps", () => {
  const polled = [[1, 10], [2, 9], [3, 8], [4, 7]];
  assert.deepEqual(mergeSeries(polled, [[1, 11], [2, 10]], true), [[1, 11], [2, 10], [3, 8], [4, 7]]);
  assert.deepEqual(mergeSeries(polled, [], true), polled);
  assert.equal(lastStepOf([[1, 0], [7, 0]], [[1, [0]], [5, [0]]]), 7);
  assert.equal(lastStepOf([], []), 0);
});

test("smoothing averages log10(loss), starts unbiased and continues where it left off", () => {
  assert.deepEqual(smoothLog([[1, 100], [2, 100]], 0.9).map((p) => p[1]), [100, 100]);
  const [[, first], [, second]] = smoothLog([[1, 100], [2, 1]], 0.5);
  assert.ok(Math.abs(first - 100) < 1e-9);
  // (0.5·0.5·2 + 0.5·0) / (1 - 0.25) = 2/3 of a decade: 10^(2/3)
  assert.ok(Math.abs(second - 10 ** (2 / 3)) < 1e-9);
  const points = [[1, 50], [2, null], [3, 20], [4, 3], [5, 0.5], [6, 0.2]];
  const whole = smoothLog(points, 0.6);
  const carry = { acc: 0, n: 0 };
  const halves = smoothLog(points.slice(0, 3), 0.6, carry).concat(smoothLog(points.slice(3), 0.6, carry));
  assert.deepEqual(halves, whole);
  assert.equal(whole[1][1], null);  // a gap stays a gap
  assert.equal(smoothLog(points, 0), points);
});

test("a log axis gets a gap for a zero, negative or missing loss", () => {
  assert.deepEqual(forLogAxis([[1, 2], [2, 0], [3, -1], [4, null]]), [[1, 2], [2, null], [3, null], [4, null]]);
});

// `python -m fitcore --epochs 400 --devices cpu`: the tutorial's losses at steps 1, 2, 50, 100, 200, 300, 400
const CONVERGED = [158.06906127929688, 137.4885711669922, 0.5225189328193665, 0.0036835703067481518,
  4.3158006945986926e-08, 1.5663914392990974e-12, 1.460094306744708e-12];

test("the loss axis follows the loss: from its lowest to its highest, a small margin either side", () => {
  // log10: 2.199 down to -11.836; a margin of 0.5 decade, out to the next quarter decade
  assert.deepEqual(lossRange(CONVERGED), [-12.5, 2.75]);
  // the same run at step 50 and at step 200: the axis goes down with it
  assert.deepEqual(lossRange(CONVERGED.slice(0, 3)), [-0.5, 2.5]);
  assert.deepEqual(lossRange(CONVERGED.slice(0, 5)), [-7.75, 2.75]);
  // every loss inside, none closer than 0.05 decade to an edge
  for (let n = 1; n <= CONVERGED.length; n++) {
    const [lo, hi] = lossRange(CONVERGED.slice(0, n));
    for (const v of CONVERGED.slice(0, n)) {
      assert.ok(Math.log10(v) >= lo + 0.05 && Math.log10(v) <= hi - 0.05, `${n}: ${v} in [${lo}, ${hi}]`);
    }
  }
  // the first step alone: a decade around it, not a speck at the top of six
  assert.deepEqual(lossRange([158.06906127929688]), [1.5, 2.75]);
  assert.deepEqual(lossRange([5, 5]), [0, 1.25]);
  assert.deepEqual(lossRange([158, 0.02]), [-2, 2.5]);
});

test("the loss axis: zero, negative and missing losses are left out; at most forty decades", () => {
  assert.deepEqual(lossRange([]), [-4, 2]);
  assert.deepEqual(lossRange([0, -1, null, NaN, Infinity]), [-4, 2]);
  assert.deepEqual(lossRange([0, -1, null, 3.2]), [-0.25, 1.25]);
  assert.deepEqual(lossRange([0, 158.06906127929688, 1.460094306744708e-12]), [-12.5, 2.75]);
  assert.deepEqual(lossRange([1e3, 1e-300]), [-36.5, 3.5]);
});

test("parameters: the range covers the references, the data within three spans, and pads 6 %", () => {
  const truth = [5.2, 9.6, 3.4];
  assert.deepEqual(paramCaps(truth, null), [0 - 3 * 9.6, 9.6 + 3 * 9.6]);
  const [lo, hi] = paramDomain(truth, null, [[1, [0.1, 0.2, 0.3]]]);
  assert.ok(Math.abs(lo - -0.576) < 1e-9 && Math.abs(hi - 10.176) < 1e-9, `${lo} ${hi}`);
  // a diverging run's 1e30 may widen the range only up to the cap
  const [, capped] = paramDomain(truth, null, [[1, [1e30, 0, 0]]]);
  assert.ok(Math.abs(capped - (38.4 + 0.06 * 38.4)) < 1e-9, `${capped}`);
  assert.deepEqual(paramDomain([], null, []), [-1, 1]);
  assert.deepEqual(paramSeries([[1, [1e30, 2]], [2, [4, null]]], 0, paramCaps(truth, null)), [[1, null], [2, 4]]);
});

test("divergence: the server's one step (diverged_at), nothing guessed from the points", () => {
  assert.equal(divergenceStep({ status: "diverged", step: 42, diverged_at: 43 }), 43);
  assert.equal(divergenceStep({ status: "running", step: 1, diverged_at: null }), null);
  assert.equal(divergenceStep(null), null);
});

test("thinning keeps each column's real lowest and highest points, in step order, and the gaps", () => {
  const short = [[1, 1], [2, 2]];
  assert.equal(thin(short, 10, [0, 100]), short);
  const points = Array.from({ length: 10_000 }, (_, i) => [i + 1, Math.sin(i / 50) + (i === 4321 ? 5 : 0)]);
  points[7000] = [7001, null];
  const out = thin(points, 100, [0, 10_000]);
  // two a column (101 of them: the range's end starts one), and a gap splits its column: 3 more
  assert.ok(out.length <= 2 * 101 + 3, `${out.length}`);
  const byStep = new Map(points.map((p) => [p[0], p[1]]));
  for (const [s, v] of out) assert.equal(byStep.get(s), v);  // every kept point is a real one
  assert.deepEqual(out.map((p) => p[0]), [...out.map((p) => p[0])].sort((a, b) => a - b));
  assert.ok(out.some(([s]) => s === 4322));  // the spike survives
  assert.ok(out.some(([s, v]) => s === 7001 && v === null));  // and the gap
});
