// Numbers, bytes, seconds and shapes as a reader on the projector reads them; the timeline's time ticks.
// Pure functions: frontend/tests/format.test.js runs them under `node --test`.

export function isNum(v) {
  return typeof v === "number" && Number.isFinite(v);
}

export function formatBytes(bytes) {
  if (!isNum(bytes)) return "–";
  if (bytes < 1000) return `${Math.round(bytes)} B`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(bytes < 1e4 ? 1 : 0)} kB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(bytes < 1e7 ? 1 : 0)} MB`;
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

// Bytes as a teacher quotes them, exact to the byte below a megabyte ("1,600 B"); with a prefix above.
export function exactBytes(bytes) {
  if (!isNum(bytes)) return "–";
  if (bytes < 1e6) return `${Math.round(bytes).toLocaleString("en-US")} B`;
  return formatBytes(bytes);
}

// A phase's bytes: "800 B each × 2 = 1,600 B" where every device that moves bytes moves the same, or
// "1,624 B in all" (the sum over the devices, never a rounded share of it).
export function bytesSplit(entries, tr) {
  const moving = entries.map((e) => (isNum(e.bytes) ? e.bytes : 0)).filter((b) => b > 0);
  const total = moving.reduce((a, b) => a + b, 0);
  if (moving.length > 1 && moving.every((b) => b === moving[0])) {
    return tr("live.bytes.each", { each: exactBytes(moving[0]), n: moving.length, total: exactBytes(total) });
  }
  return tr("live.bytes.all", { total: exactBytes(total) });
}

export function formatSeconds(seconds) {
  if (!isNum(seconds)) return "–";
  if (seconds === 0) return "0";
  if (seconds < 1e-3) return `${(seconds * 1e6).toFixed(seconds < 1e-5 ? 1 : 0)} µs`;
  if (seconds < 1) return `${(seconds * 1e3).toFixed(seconds < 1e-2 ? 2 : 1)} ms`;
  return `${seconds.toFixed(2)} s`;
}

// Four significant digits, or a short exponent for very large and very small values.
export function formatNumber(v) {
  if (!isNum(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2).replace("e+", "e");
  return String(Number(v.toPrecision(4)));
}

export function shape(s) {
  return Array.isArray(s) ? `[${s.join(", ")}]` : "";
}

// 1, 2, 2.5, 5 × 10^k steps: ticks a reader can add in their head (the timeline's time axis).
export function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  // (a hair of tolerance: 1e-4 / 5 must give steps of 2e-5, not 2.5e-5 for a rounding error)
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9)) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)));
  }
  return ticks;
}
