// node --test frontend/tests/: the live view's formatting, as the picture and the timeline print it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { bytesSplit, exactBytes, formatBytes, formatNumber, formatSeconds, isNum, niceTicks, shape } from "../format.js";

test("bytes: B below 1000, then kB, MB, GB with one decimal below ten", () => {
  assert.equal(formatBytes(24), "24 B");
  assert.equal(formatBytes(999), "999 B");
  assert.equal(formatBytes(1600), "1.6 kB");  // the tutorial's DataParallel step
  assert.equal(formatBytes(12_345), "12 kB");
  assert.equal(formatBytes(2_500_000), "2.5 MB");
  assert.equal(formatBytes(3.2e9), "3.2 GB");
  assert.equal(formatBytes(null), "–");
  assert.equal(formatBytes(NaN), "–");
});

test("seconds: µs, ms and s with the digits a reader needs", () => {
  assert.equal(formatSeconds(0), "0");
  assert.equal(formatSeconds(6e-6), "6.0 µs");
  assert.equal(formatSeconds(30e-6), "30 µs");
  assert.equal(formatSeconds(0.0042), "4.20 ms");
  assert.equal(formatSeconds(0.25), "250.0 ms");
  assert.equal(formatSeconds(1.5), "1.50 s");
  assert.equal(formatSeconds(undefined), "–");
});

test("numbers: four significant digits, a short exponent when very large or small", () => {
  assert.equal(formatNumber(158.0693), "158.1");
  assert.equal(formatNumber(5.19999), "5.2");
  assert.equal(formatNumber(0), "0");
  assert.equal(formatNumber(123456), "1.23e5");
  assert.equal(formatNumber(0.00012), "1.20e-4");
  assert.equal(formatNumber(-0.5), "-0.5");
  assert.equal(formatNumber(Infinity), "Infinity");
});

test("shapes and what counts as a number", () => {
  assert.equal(shape([67, 2]), "[67, 2]");
  assert.equal(shape(null), "");
  assert.equal(isNum(0), true);
  assert.equal(isNum(NaN), false);
  assert.equal(isNum("1"), false);
});

test("ticks step by 1, 2, 2.5 or 5 times a power of ten and stay inside the range", () => {
  assert.deepEqual(niceTicks(0, 200, 5), [0, 50, 100, 150, 200]);
  assert.deepEqual(niceTicks(0, 1e-4, 5), [0, 2e-5, 4e-5, 6e-5, 8e-5, 1e-4]);
  assert.deepEqual(niceTicks(0, 7, 3), [0, 2.5, 5]);
  assert.deepEqual(niceTicks(3, 3, 5), [3]);
});

test("bytes a teacher quotes are exact, per device and in all", () => {
  const tr = (key, v) => (key === "live.bytes.each" ? `${v.each} each × ${v.n} = ${v.total}` : `${v.total} in all`);
  assert.equal(exactBytes(1600), "1,600 B");
  assert.equal(exactBytes(999999), "999,999 B");
  assert.equal(exactBytes(2.5e6), formatBytes(2.5e6));
  assert.equal(bytesSplit([{ bytes: 800 }, { bytes: 800 }], tr), "800 B each × 2 = 1,600 B");
  // DDP on 3 ranks: 16 B each, 48 in all, never a rounded share
  assert.equal(bytesSplit([{ bytes: 16 }, { bytes: 16 }, { bytes: 16 }], tr), "16 B each × 3 = 48 B");
  // DataParallel's scatter: device 0 keeps its rows, so the devices differ
  assert.equal(bytesSplit([{ bytes: 0 }, { bytes: 800 }, { bytes: 1067 }], tr), "1,867 B in all");
  assert.equal(bytesSplit([{ bytes: 0 }], tr), "0 B in all");
});
