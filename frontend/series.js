// The charts' data: merging polled points into what the page holds, the loss's smoothing, the axes'
// domains, and thinning a long history to what a chart's width can show. Pure functions, tested by
// frontend/tests/series.test.js.

import { isNum } from "./format.js";

// Points are [step, value] in ascending step order; the incoming ones have step > since. A rerun's whole
// history (replace) is the truth for what it covers; newer points this page already polled stay on top.
export function mergeSeries(existing, incoming, replace) {
  if (replace) {
    const last = incoming.length ? incoming[incoming.length - 1][0] : -Infinity;
    return incoming.concat(existing.filter((p) => p[0] > last));
  }
  const last = existing.length ? existing[existing.length - 1][0] : -Infinity;
  const fresh = incoming.filter((p) => p[0] > last);
  return fresh.length ? existing.concat(fresh) : existing;
}

export function lastStepOf(...series) {
  return Math.max(0, ...series.map((s) => (s.length ? s[s.length - 1][0] : 0)));
}

// TensorBoard's smoothing: an exponential moving average of log10(loss) with its start-up bias corrected;
// gaps stay gaps. `carry` ({acc, n}, updated in place) continues an earlier call, so the points appended
// to a chart are smoothed without going over the whole history again.
export function smoothLog(points, weight, carry = { acc: 0, n: 0 }) {
  if (!(weight > 0)) return points;
  return points.map(([s, v]) => {
    if (!(isNum(v) && v > 0)) return [s, v];
    carry.n += 1;
    carry.acc = weight * carry.acc + (1 - weight) * Math.log10(v);
    return [s, 10 ** (carry.acc / (1 - weight ** carry.n))];
  });
}

export function positive(points) {
  return points.filter(([, v]) => isNum(v) && v > 0);
}

// A log axis shows no zero, negative or missing value: each is a gap in the line.
export function forLogAxis(points) {
  return points.map(([s, v]) => [s, isNum(v) && v > 0 ? v : null]);
}

// The loss axis's range, in log10 units, from the current run's own losses (earlier runs are clipped to
// it, not allowed to stretch it): the lowest positive loss to the highest, a margin of 4 % of the span
// (0.05 to 0.5 decade) on each side, widened outward to a quarter decade, so that the chart is drawn
// again only when the loss crosses one. At least one decade (a flat loss sits in its middle), at most
// forty (a run that reached 1e-300 shows its top forty decades). Zero, negative and missing losses have
// no place on a log axis: they are left out here and drawn as gaps.
export function lossRange(values) {
  const logs = values.filter((v) => isNum(v) && v > 0).map(Math.log10);
  if (!logs.length) return [-4, 2];
  let lo = Math.min(...logs);
  let hi = Math.max(...logs);
  if (hi - lo < 1) {
    const mid = (lo + hi) / 2;
    [lo, hi] = [mid - 0.5, mid + 0.5];
  }
  const margin = Math.min(0.5, Math.max(0.05, 0.04 * (hi - lo)));
  lo = Math.floor((lo - margin) * 4) / 4;
  hi = Math.ceil((hi + margin) * 4) / 4;
  if (hi - lo > 40) lo = hi - 40;
  return [lo, hi];
}

// How far a parameter may go before it is drawn as off the chart: three spans of the reference values
// beyond them, so a diverging run's huge values cannot squash the true values into a flat line.
export function paramCaps(trueValues, lstsq) {
  const refs = trueValues.concat(lstsq || []).filter(isNum);
  if (!refs.length) return [-Infinity, Infinity];
  const lo = Math.min(...refs, 0);
  const hi = Math.max(...refs, 0);
  const span = Math.max(1, hi - lo);
  return [lo - 3 * span, hi + 3 * span];
}

// The y range: the true and least-squares values and the finite data, within the caps, padded 6 %.
export function paramDomain(trueValues, lstsq, params) {
  const refs = trueValues.concat(lstsq || []).filter(isNum);
  let lo = refs.length ? Math.min(...refs, 0) : Infinity;
  let hi = refs.length ? Math.max(...refs, 0) : -Infinity;
  const [capLo, capHi] = paramCaps(trueValues, lstsq);
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

// Parameter i's line: a value beyond the caps is a gap, not a stroke to the chart's edge and back.
export function paramSeries(params, i, caps) {
  return params.map(([s, values]) => {
    const v = values ? values[i] : null;
    return [s, isNum(v) && v >= caps[0] && v <= caps[1] ? v : null];
  });
}

// Where the run diverged: the server's one value (fitcore.view.status.diverged_at, the first step whose
// loss is not finite), which the status line and the picture's note say too; never guessed here.
export function divergenceStep(run) {
  return run && isNum(run.diverged_at) ? run.diverged_at : null;
}

// Many points per column of `columns` across [x0, x1] are kept as that column's lowest and highest, in
// step order: the same line with fewer points, every one of them a real point (hover shows it exactly).
// A gap (a missing value) is kept where it is.
export function thin(points, columns, [x0, x1]) {
  if (points.length <= 2 * columns) return points;
  const width = (x1 - x0) / columns || 1;
  const out = [];
  let column = null;
  let lo = null;
  let hi = null;
  const flush = () => {
    if (lo) out.push(...(lo === hi ? [lo] : lo[0] <= hi[0] ? [lo, hi] : [hi, lo]));
    lo = hi = null;
  };
  for (const p of points) {
    if (!isNum(p[1])) {
      flush();
      out.push(p);
      column = null;
      continue;
    }
    const c = Math.floor((p[0] - x0) / width);
    if (c !== column || !lo) {
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
