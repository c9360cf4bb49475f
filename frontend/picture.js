// The step picture's common part: where the boxes sit, the device boxes with the marks the phases leave
// on them, arrows, chips and the footer. What is particular to a strategy (what sits above the boxes,
// each phase's marks and arrows, the phases' words and colours) comes from its drawer (drawers.js).
//
// A drawer is a plain object:
//   key          the strategy's drawer key, as the payload's picture.drawer names it
//   title        the strategy's name in the footer ("bytes as DataParallel on GPUs")
//   colours      {phase name: colour}
//   names        optional {phase name: its live.json key}, for a phase whose name is not a code name
//                ("loss"); scatter, gather ... stay as torch names them
//   phaseText    {phase name: (picture, group) => the phase's title line}
//   phases       {phase name: (ctx, group) => marks and, while it is the current phase, arrows}
//   drawTop      (ctx) => what sits above the boxes (a batch, or each rank's shard)
//   rowLabels    optional (picture) => {batch, out}: the labels left of the bars above and below the boxes
//   boxName      optional (picture, box, room) => a device box's title
//   marksFirst   the first device gathers: its box is starred and drawn thicker
//   showsIds     a busy box lists its rows' dataset ids when no phase wrote a note there
//   footer       (picture) => the footer's left line

import { COLOURS, clear, fitList, fitText, label, svgEl, textWidth } from "./dom.js";
import { isNum, shape } from "./format.js";
import { tr, trCount } from "./words.js";

export const SIDE = 6;
const BOX_GAP = 10;
const NEUTRAL = "#495057";

export function phaseColour(drawer, name) {
  return (drawer && drawer.colours[name]) || NEUTRAL;
}

// A phase's name as the pills, the timeline and the bytes list show it.
export function phaseName(drawer, name) {
  const key = drawer && drawer.names && drawer.names[name];
  return key ? tr(key) : name;
}

export function busy(pic) {
  return (pic.devices || []).filter((d) => d.busy);
}

export function busyBoxes(ctx) {
  return ctx.layout.boxes.filter((b) => b.device.busy);
}

export function bytesOf(group, device) {
  const entry = group.entries.find((e) => e.device === device.label);
  return entry && isNum(entry.bytes) ? entry.bytes : 0;
}

export function deviceColour(index) {
  return COLOURS[index % COLOURS.length];
}

// Where everything sits, in px of the real width (no viewBox scaling: 15 px text stays 15 px).
export function pictureLayout(pic, width, drawer) {
  const devices = pic.devices || [];
  const k = Math.max(1, devices.length);
  const gap = k > 6 ? BOX_GAP / 2 : BOX_GAP;  // eight boxes still fit a 780 px picture
  const boxW = Math.max(72, (width - 2 * SIDE - (k - 1) * gap) / k);
  // shapes on two lines when "[67, 2] → [67, 1]" does not fit the box
  const wide = busy(pic).every((d) => textWidth(`${shape(d.input_shape)} → ${shape(d.output_shape)}`, 14)
    <= boxW - 14);
  const boxH = wide ? 112 : 129;
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
  const layout = { width, barY, barH, boxY, boxH, outY, outH, footY, height: footY + 8, boxes,
                   narrow: !wide };
  layout.rowLabels = rowLabels(pic, drawer);
  layout.segments = segments(pic, barRange(layout));
  return layout;
}

function rowLabels(pic, drawer) {
  const texts = drawer.rowLabels ? drawer.rowLabels(pic) : null;
  if (!texts) return null;
  return { ...texts, width: Math.max(textWidth(texts.batch, 15, 700), textWidth(texts.out, 15, 700)) + 14 };
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

export function drawStepPicture(svg, pic, groups, phase, width, drawer) {
  clear(svg);
  const layout = pictureLayout(pic, width, drawer);
  svg.setAttribute("width", layout.width);
  svg.setAttribute("height", layout.height);
  svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  svg.append(arrowDefs(drawer));
  const names = groups.map((g) => g.name);
  const ctx = {
    svg, pic, layout, groups, phase, drawer,
    colour: (name) => phaseColour(drawer, name),
    done: (name) => phase.done || names.indexOf(name) < phase.index,
    now: (name) => !phase.done && names[phase.index] === name,
    seen: (name) => phase.done || names.indexOf(name) <= phase.index,
    layer: { back: svgEl("g"), boxes: svgEl("g"), front: svgEl("g") },
    boxState: layout.boxes.map(() => ({ chips: [], glow: null, note: null })),
  };
  svg.append(ctx.layer.back, ctx.layer.boxes, ctx.layer.front);
  // 1. what sits at the top: the batch on the first device, or each rank's own shard
  if (drawer.drawTop) drawer.drawTop(ctx);
  // 2. every phase adds its mark (chips, glow) and, while it is the current one, its arrows
  for (const group of groups) {
    const draw = drawer.phases[group.name];
    if (draw && ctx.seen(group.name)) draw(ctx, group);
  }
  // 3. the boxes last in their layer, with the marks the phases left on them
  layout.boxes.forEach((box, i) => drawDeviceBox(ctx, box, ctx.boxState[i]));
  drawFooter(ctx);
}

function arrowDefs(drawer) {
  const defs = svgEl("defs");
  for (const [name, colour] of Object.entries(drawer.colours)) {
    const marker = svgEl("marker", { id: `fl-arrow-${name}`, viewBox: "0 0 10 10", refX: 8, refY: 5,
                                     markerWidth: 4.5, markerHeight: 4.5, orient: "auto-start-reverse" });
    marker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: colour }));
    defs.append(marker);
  }
  return defs;
}

export function arrow(ctx, d, phaseName, { live, faint } = {}) {
  const path = svgEl("path", {
    d, fill: "none", stroke: ctx.colour(phaseName), "stroke-width": live ? 3 : 2,
    "marker-end": `url(#fl-arrow-${phaseName})`,
    class: live ? "fl-flow" : faint ? "fl-faint" : "",
  });
  ctx.layer.back.append(path);
  return path;
}

// The bytes an arrow carries, on the arrow's middle (a white halo keeps it readable over the line).
export function arrowLabel(ctx, x, y, text, phaseName) {
  label(ctx.layer.front, x, y + 5, text, { size: 14, weight: 700, anchor: "middle",
                                           fill: ctx.colour(phaseName), halo: true });
}

export function chip(mark, text, colour, { fresh = false, faded = false } = {}) {
  mark.chips.push({ text, colour, fresh, faded });
}

function drawDeviceBox(ctx, box, mark) {
  const { pic, drawer } = ctx;
  const d = box.device;
  const g = svgEl("g", { class: "fl-box" });
  ctx.layer.boxes.append(g);
  const first = box.index === 0 && drawer.marksFirst;
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
  const name = drawer.boxName ? drawer.boxName(pic, box, inner) : d.label;
  label(g, x, box.y + 23, fitText((first ? "★ " : "") + name, inner, 15, 700), { size: 15, weight: 700 });
  if (!d.busy) {
    label(g, x, box.y + 45, fitText(tr("live.box.idle"), inner, 15), { size: 15, fill: "#495057" });
    label(g, x, box.y + 64, fitText(tr("live.box.no_rows"), inner, 15), { size: 15, fill: "#495057" });
    return;
  }
  const range = !isNum(d.start) || !d.rows ? "" : d.rows === 1 ? ` (${d.start})` : ` (${d.start}–${d.stop - 1})`;
  const count = trCount("live.count.rows", d.rows);
  // a narrow box drops the row range rather than cut it
  const rows = textWidth(`${count}${range}`, 15) <= inner ? `${count}${range}` : count;
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
    label(g, x, y, fitText(mark.note, inner, 14, 600), { size: 14, weight: 600, fill: ctx.colour("loss") });
  } else if (drawer.showsIds) {
    const ids = (d.ids || []).map(String);
    const prefix = `${tr("live.box.ids")} `;
    label(g, x, y, prefix + fitList(ids, inner - textWidth(prefix, 14), 14, ""),
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
  const { pic, layout, svg, drawer } = ctx;
  const y = layout.footY;
  const left = drawer.footer ? drawer.footer(pic) : "";
  label(svg, SIDE, y, left, { size: 15, weight: 600, fill: "#343a40" });
  if (pic.emulated) {
    const note = tr("live.picture.emulated", { where: pic.emulated_on || tr("live.picture.cpu"),
                                               strategy: drawer.title || tr("live.picture.this_strategy") });
    const room = layout.width - SIDE - textWidth(left, 15, 600) - 30;
    label(svg, layout.width - SIDE, y, fitText(note, room, 15), { size: 15, anchor: "end",
                                                                   fill: "#5f3dc4" });
  }
}

// A bar of segments, one per busy device, each with its text: the batch above, the outputs below.
export function segmentBar(parent, layout, y, height, textOf, textDy = 19) {
  layout.segments.forEach((seg, i) => {
    if (!seg) return;
    parent.append(svgEl("rect", { x: seg.x, y, width: Math.max(1, seg.w - 1), height, rx: 3,
                                  fill: deviceColour(i), "fill-opacity": 0.16, stroke: deviceColour(i),
                                  "stroke-width": 1.5 }));
    label(parent, seg.x + 5, y + textDy, textOf(seg), { size: 14, fill: "#212529" });
  });
}
