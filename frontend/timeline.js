// Below the picture: the measured timeline of the shown step, a row per device, and the bytes each phase
// moved, with DataParallel's and DDP's totals for the same step side by side.

import { VIEW_BOTTOM, clear, el, label, svgEl, textWidth, topOnPage } from "./dom.js";
import { drawerFor } from "./drawers.js";
import { bytesSplit, formatBytes, formatSeconds, niceTicks } from "./format.js";
import { tr } from "./words.js";
import { phaseColour, phaseName } from "./picture.js";
import { currentPhase, namedGroups, phaseGroups, shownPicture } from "./stepper.js";

export function renderTimeline(state) {
  const pic = shownPicture(state);
  const { dom } = state;
  const phase = currentPhase(state, performance.now());
  state.lastTimelinePhase = phase.index;
  dom.timeline.hidden = !pic;
  if (!pic) return;
  const groups = phaseGroups(pic);
  const drawer = drawerFor(pic);
  const total = Math.max(1e-9, ...groups.map((g) => g.end));
  // no phase timed (a step not run yet, or one device, which runs the step as one piece): say so, no "0 µs"
  const untimed = pic.planned ? "live.timeline.planned" : "live.timeline.untimed";
  dom.ganttTitle.textContent = groups.length
    ? tr("live.timeline.title", { step: pic.step, total: formatSeconds(total) }) : tr(untimed, { step: pic.step });
  const width = Math.max(320, Math.floor(state.width * (state.detailShown ? 0.5 : 0.6)));  // live.css's columns
  dom.ganttSvg.style.display = groups.length ? "" : "none";  // nothing timed: no rows of nothing under it
  drawGantt(dom.ganttSvg, pic, groups, phase, width, total, drawer, ganttRowHeight(state, pic));
  renderBytes(dom.bytes, pic, namedGroups(pic), drawer);
}

const ROW_H = 22;
const ROW_MIN = 15;  // its 14 px label (10 px of ink) still apart from the next row's
const AXIS_H = 28;  // the time axis under the rows, and the gap above it

// A row's height: 22 px, or in the charts' room on the first screen (mount.js's applyDetail) as much as
// the screen leaves each rank, down to 15 px, so that eight ranks' rows and their axis stay on it.
function ganttRowHeight(state, pic) {
  if (!state.detailShown) return ROW_H;
  const room = window.innerHeight - topOnPage(state.dom.ganttSvg) - AXIS_H - VIEW_BOTTOM;
  const rows = Math.max(1, (pic.devices || []).length);
  return Math.max(ROW_MIN, Math.min(ROW_H, Math.floor(room / rows)));
}

function drawGantt(svg, pic, groups, phase, width, total, drawer, rowH) {
  clear(svg);
  const devices = (pic.devices || []).map((d) => d.label);
  const rows = rowLabels(pic);
  const labelW = Math.max(...rows.map((d) => textWidth(d, 14)), 60) + 12;
  const top = 4;
  const plotW = width - labelW - 16;
  const height = top + devices.length * rowH + AXIS_H - 4;
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const x = (t) => labelW + (plotW * t) / total;
  const hostEnds = hostBoundaries(pic);
  rows.forEach((name, r) => {
    label(svg, labelW - 8, top + r * rowH + rowH / 2 + 5, name, { size: 14, anchor: "end" });
    const last = hostEnds.has(r);  // the last rank of a host: a darker line before the next host's ranks
    svg.append(svgEl("line", { x1: last ? 0 : labelW, x2: labelW + plotW, y1: top + (r + 1) * rowH,
                               y2: top + (r + 1) * rowH, stroke: last ? "#868e96" : "#e9ecef" }));
  });
  groups.forEach((group, gi) => {
    for (const entry of group.entries) {
      // "" is not device-specific: drawn on the first device's row, where that work runs
      const row = Math.max(0, devices.indexOf(entry.device));
      const x0 = x(entry.start);
      const w = Math.max(2, x(entry.start + entry.duration) - x0);
      const current = !phase.done && gi === phase.index;
      const rect = svgEl("rect", { x: x0, y: top + row * rowH + 3, width: w, height: rowH - 6, rx: 2,
                                   fill: phaseColour(drawer, entry.name),
                                   "fill-opacity": phase.done || current ? 0.9 : 0.3,
                                   stroke: current ? "#111418" : "none" });
      const fields = { phase: phaseName(drawer, entry.name), device: entry.device || pic.first_device,
                       duration: formatSeconds(entry.duration), start: formatSeconds(entry.start),
                       bytes: formatBytes(entry.bytes) };
      const hover = tr(entry.bytes ? "live.timeline.hover_bytes" : "live.timeline.hover", fields);
      rect.append(svgEl("title", {}, hover));
      svg.append(rect);
    }
  });
  // no phase timed: no time axis either (its ticks would all read 0.0 µs)
  for (const t of groups.length ? niceTicks(0, total, 5) : []) {
    const tx = x(t);
    svg.append(svgEl("line", { x1: tx, x2: tx, y1: top, y2: top + devices.length * rowH, stroke: "#dee2e6" }));
    label(svg, tx, height - 6, formatSeconds(t), { size: 14, anchor: "middle", fill: "#495057" });
  }
}

// A run across hosts names each rank's host on its row ("node1 · rank 2 · cpu · gloo"); torchrun numbers
// the ranks host by host, so the rows are already grouped.
export function rowLabels(pic) {
  return (pic.devices || []).map((d) => (pic.hosts && d.host ? `${d.host} · ${d.label}` : d.label));
}

export function hostBoundaries(pic) {
  const devices = pic.devices || [];
  const ends = new Set();
  if (!pic.hosts) return ends;
  devices.forEach((d, i) => { if (i + 1 < devices.length && devices[i + 1].host !== d.host) ends.add(i); });
  return ends;
}

function renderBytes(container, pic, groups, drawer) {
  clear(container);
  // an emulated run moves nothing between real devices: its bytes are what the GPUs would move
  const would = !!pic.emulated;
  container.append(el("div", "fl-subtitle", tr(would ? "live.bytes.title_would" : "live.bytes.title")));
  const list = el("div", "fl-bytes-list");
  for (const group of groups) {
    if (!group.bytes) continue;
    const row = el("div", "fl-bytes-row");
    const key = el("span", "fl-key");
    key.style.background = phaseColour(drawer, group.name);
    row.append(key, el("span", "", phaseName(drawer, group.name)),
      el("span", "fl-num", bytesSplit(group.entries, tr)));
    list.append(row);
  }
  // a planned step has no phases yet, but will move bytes: only a run's own phases say "nothing moves"
  if (!list.childElementCount) list.append(el("div", "", tr(pic.planned ? "live.bytes.planned" : "live.bytes.nothing")));
  container.append(list);
  const b = pic.bytes || {};
  // every strategy's bytes for the same step, side by side, in the registry's order
  const labels = pic.strategy_labels || {};
  const each = Object.entries(b).map(([name, n]) =>
    tr("live.bytes.one", { bytes: formatBytes(n), strategy: labels[name] || name }));
  const total = tr(would ? "live.bytes.total_would" : "live.bytes.total", { list: each.join(" · ") });
  container.append(el("div", "fl-bytes-total", total));
}
