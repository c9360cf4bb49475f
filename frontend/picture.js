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
//   barHeight    optional (picture, box widths) => the bar's height above the boxes (BAR_H unless a drawer's
//                words need a line of their own there: columnsBarHeight)
//   boxName      optional (picture, box, room) => a device box's title
//   marksFirst   the first device gathers: its box is starred and drawn thicker
//   showsIds     a busy box lists its rows' dataset ids when no phase wrote a note there
//   footer       (picture) => the footer's left line
//   whole        optional (ctx) => the marks of a step run as one piece, with no phase (one device)
//   draw         optional (svg, pic, groups, phase, width) => the whole picture, in place of the boxes (a
//                pipeline's schedule: a row per rank, time across)
//   groupName    optional (group) => a phase group's pill, where the groups are a schedule's ticks

import { COLOURS, clear, fitList, fitText, label, svgEl, textWidth } from "./dom.js";
import { formatBytes, isNum, shape } from "./format.js";
import { tr, trCount } from "./words.js";

export const SIDE = 6;
export const BAR_H = 26;  // the bar above the boxes: a batch, a shard's ids, X's columns
const BAR_LINE = 18;  // a line of words above the bar's cells, where they would cover a cell
const BOX_GAP = 10;
const CHIP_H = 21;       // one chip's height; a chip whose words do not fit its box's width takes more lines
const CHIP_LINE = 17;
const CHIP_GAP = 4;
const NAME_LINE = 18;
const FOOT_LINE = 20;
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

// X's columns above a rank's box (tensor parallelism's, a 2-D mesh's): the d columns, its own filled in its
// colour, and which they are ("X[:, 0:2]"). The words sit inside the first cell where it is wide enough for
// them, else on a line of their own above the cells (the drawer's barHeight is columnsBarHeight then): never
// over the cells, whose filled one is the lesson.
export function columnsBarHeight(pic, widths, textOf) {
  const d = pic.features || 0;
  const covers = (pic.devices || []).some((dev, i) => dev.busy && dev.columns && d > 0
    && textWidth(textOf(dev), 14, 600) + 12 > (widths[i] - 10) / d);
  return covers ? BAR_H + BAR_LINE : BAR_H;
}

export function drawColumns(ctx, box, colour, text) {
  const { layout, svg, pic } = ctx;
  const d = pic.features || 0;
  const cols = box.device.columns;
  const apart = layout.barH > BAR_H;
  const y = apart ? layout.barY + BAR_LINE + 2 : layout.barY + 2;
  const cell = (box.w - 10) / d;
  for (let c = 0; c < d; c++) {
    const mine = c >= cols[0] && c < cols[1];
    svg.append(svgEl("rect", {
      x: box.x + 5 + c * cell, y, width: Math.max(1, cell - 2), height: BAR_H - 4, rx: 2,
      fill: mine ? colour : "none", "fill-opacity": mine ? 0.3 : 0,
      stroke: colour, "stroke-opacity": mine ? 1 : 0.35,
      class: mine ? "fl-col fl-own" : "fl-col",
    }));
  }
  label(svg, box.x + (apart ? 5 : 9), apart ? layout.barY + 14 : layout.barY + 19,
    fitText(text, box.w - (apart ? 10 : 18), 14, 600), { size: 14, weight: 600 });
}

export function bytesOf(group, device) {
  const entry = group.entries.find((e) => e.device === device.label);
  return entry && isNum(entry.bytes) ? entry.bytes : 0;
}

export function deviceColour(index) {
  return COLOURS[index % COLOURS.length];
}

// Where everything sits, in px of the real width (no viewBox scaling: 15 px text stays 15 px).
// `chipHeights` are the heights each box's chips need (chipPlan over the whole step), so that no chip is
// dropped; the boxes are as tall as the box whose lines and chips together need the most.
export function pictureLayout(pic, width, drawer, chipHeights = []) {
  const devices = pic.devices || [];
  const k = Math.max(1, devices.length);
  const gap = k > 6 ? BOX_GAP / 2 : BOX_GAP;  // eight boxes still fit a 780 px picture
  // from 4 devices on, the first device (which gathers, and wears five chips) is half as wide again, unless
  // some stay idle: their "no rows left" needs the width then
  const widerFirst = drawer.marksFirst && k >= 4 && busy(pic).length === devices.length;
  const weights = devices.map((d, i) => (i === 0 && widerFirst ? 1.5 : 1));
  const unit = (width - 2 * SIDE - (k - 1) * gap) / Math.max(1, weights.reduce((a, b) => a + b, 0));
  const widths = weights.map((w) => Math.max(60, unit * w));
  // a device's name over two lines ("virtual:" / "7") when a narrow box would cut it
  const nameApart = !drawer.boxName && devices.some((d, i) =>
    textWidth((i === 0 && drawer.marksFirst ? "★ " : "") + d.label, 15, 700) > widths[i] - 14);
  // each box's lines: its shapes on two when "[67, 2] → [67, 1]" does not fit it, its ids on two when fewer
  // than two of them fit beside their name (drawDeviceBox draws them so)
  const idsApart = devices.map((d, i) => idsApartIn(d, widths[i] - 14, drawer));
  const linesH = devices.map((d, i) => (d.busy && !shapesFit(d, widths[i] - 14) ? 129 : 112)
    + (idsApart[i] ? 18 : 0) + (nameApart ? NAME_LINE : 0));
  const boxH = Math.max(...linesH.map((h, i) => h + (chipHeights[i] ?? CHIP_H) - CHIP_H));
  const barY = 2;
  const barH = drawer.barHeight ? drawer.barHeight(pic, widths) : BAR_H;
  const boxY = barY + barH + 24;
  const outY = boxY + boxH + 22;
  const outH = 26;
  const footY = outY + outH + 19;
  let x = SIDE;
  const boxes = devices.map((device, i) => {
    const box = { device, index: i, x, y: boxY, w: widths[i], h: boxH, cx: x + widths[i] / 2 };
    x += widths[i] + gap;
    return box;
  });
  const height = footY + 8 + (footerTexts(pic, width, drawer).own ? FOOT_LINE : 0);
  const layout = { width, barY, barH, boxY, boxH, outY, outH, footY, height, boxes, idsApart, nameApart };
  layout.rowLabels = rowLabels(pic, drawer);
  layout.segments = segments(pic, barRange(layout));
  return layout;
}

const shapes = (d) => `${shape(d.input_shape)} → ${shape(d.output_shape)}`;
const shapesFit = (d, inner) => textWidth(shapes(d), 14) <= inner;
// the ids that fit beside their name on one line of a box `inner` px wide
const idsBeside = (ids, inner) => fitList(ids, inner - textWidth(`${tr("live.box.ids")} `, 14), 14, "");
// the ids on a line of their own when that line would show fewer than two of them
const idsApartIn = (d, inner, drawer) => !!drawer.showsIds && !!d.busy && (d.ids || []).length > 1
  && idsBeside(d.ids.map(String), inner).split(",").length < 2;

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
  if (drawer.draw) return drawer.draw(svg, pic, groups, phase, width);
  clear(svg);
  const chipWidth = (text) => chipTextWidth(svg, text);
  // 0. the boxes are as tall as the whole step's chips need (a dry run of every phase), so that none is
  //    dropped and the picture keeps its height from phase to phase
  const dry = markBoxes(svgEl("svg"), pic, groups, { index: groups.length, done: true },
    pictureLayout(pic, width, drawer), drawer);
  const chipHeights = dry.layout.boxes.map((box, i) =>
    chipPlan(box, chipsOf(dry, box, dry.boxState[i], chipWidth).chips, chipWidth).height);
  const ctx = markBoxes(svg, pic, groups, phase, pictureLayout(pic, width, drawer, chipHeights), drawer);
  ctx.chipWidth = chipWidth;
  const { layout } = ctx;
  svg.setAttribute("width", layout.width);
  svg.setAttribute("height", layout.height);
  svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  // 3. the boxes last in their layer, with the marks the phases left on them
  layout.boxes.forEach((box, i) => drawDeviceBox(ctx, box, ctx.boxState[i]));
  drawFooter(ctx);
}

// Steps 1 and 2: what sits above the boxes, then every phase's marks and the current phase's arrows.
function markBoxes(svg, pic, groups, phase, layout, drawer) {
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
  // a step that ran with no phases (one device does it all): what it left, not an empty box; a planned
  // step has not run
  if (!groups.length && !pic.planned && drawer.whole) drawer.whole(ctx);
  return ctx;
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

// A ring collective between the busy boxes: a hop from each rank to the next under the boxes (dipping `depth`
// px), and the last one back to the first along the bottom. Returns the paths (hops, then the way back) and
// where the way back runs, for the drawer's label under it; fewer than two ranks: nothing to draw.
export function ringArrows(ctx, boxes, name, { live, faint, depth = 26 } = {}) {
  const { layout } = ctx;
  const yBox = layout.boxY + layout.boxH;
  const hops = [];
  for (let i = 0; i + 1 < boxes.length; i++) {
    const [xa, xb] = [boxes[i].cx + 10, boxes[i + 1].cx - 10];
    hops.push(arrow(ctx, `M${xa},${yBox + 2} C${xa},${yBox + depth} ${xb},${yBox + depth} ${xb},${yBox + 4}`,
      name, { live, faint }));
  }
  const [first, last] = [boxes[0], boxes[boxes.length - 1]];
  const yBack = layout.outY + 2;
  const back = arrow(ctx, `M${last.cx + 14},${yBox + 2} L${last.cx + 14},${yBack} L${first.cx - 14},${yBack} `
    + `L${first.cx - 14},${yBox + 4}`, name, { live, faint });
  return { hops, back, yBack, yBox, midX: (first.cx + last.cx) / 2 };
}

export function chip(mark, text, colour, { fresh = false, faded = false } = {}) {
  mark.chips.push({ text, colour, fresh, faded });
}

// What a device or rank holds between steps, as it measured it (its parameters, gradients and optimizer
// state), faded: DataParallel's device 0 holds the optimizer state for all, DDP's ranks the whole model,
// FSDP's and TP's ranks only a part. It sits on the box's title line where the name leaves room (a row of
// chips less: the first screen keeps its height), else among the chips, where it was added. No chip without
// a measure.
export function heldChip(mark, memory, colour) {
  if (!memory) return;
  const total = memory.parameters + memory.gradients + memory.optimizer_state;
  mark.held = { text: tr("live.picture.chip_held", { bytes: formatBytes(total) }), colour, fresh: false,
                faded: true, at: mark.chips.length };
}

function boxName(ctx, box) {
  const first = box.index === 0 && ctx.drawer.marksFirst;
  return (first ? "★ " : "") + (ctx.drawer.boxName ? ctx.drawer.boxName(ctx.pic, box, box.w - 14) : box.device.label);
}

// A box's chips in their rows, and the held chip where it goes on the title line (null: among the chips).
function chipsOf(ctx, box, mark, chipWidth) {
  const held = mark.held;
  if (!held) return { chips: mark.chips, title: null };
  const room = box.w - 14 - textWidth(boxName(ctx, box), 15, 700) - 10;
  if (!ctx.layout.nameApart && chipWidth(held.text) + 12 <= room) return { chips: mark.chips, title: held };
  const chips = mark.chips.slice();
  chips.splice(held.at, 0, held);
  return { chips, title: null };
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
  const name = boxName(ctx, box);
  const cut = name.lastIndexOf(":") + 1;
  let top = box.y;  // where the lines below the name start, one line lower when the name takes two
  if (ctx.layout.nameApart && cut > 0 && textWidth(name, 15, 700) > inner) {
    label(g, x, box.y + 23, fitText(name.slice(0, cut), inner, 15, 700), { size: 15, weight: 700 });
    label(g, x, box.y + 23 + NAME_LINE, name.slice(cut), { size: 15, weight: 700 });
    top += NAME_LINE;
  } else {
    if (ctx.layout.nameApart) top += NAME_LINE;
    label(g, x, box.y + 23, fitText(name, inner, 15, 700), { size: 15, weight: 700 });
  }
  if (!d.busy) {
    label(g, x, top + 45, fitText(tr("live.box.idle"), inner, 15), { size: 15, fill: "#495057" });
    label(g, x, top + 64, fitText(tr("live.box.no_rows"), inner, 15), { size: 15, fill: "#495057" });
    return;
  }
  // the batch positions of its real rows (a padded rank's repeated rows have a chip of their own), named as
  // positions: the ids beside them are dataset rows
  const real = d.rows - (isNum(d.padded) ? d.padded : 0);
  const range = !isNum(d.start) || real < 1 ? ""
    : " " + (real === 1 ? tr("live.box.position", { first: d.start })
      : tr("live.box.positions", { first: d.start, last: d.start + real - 1 }));
  const count = trCount("live.count.rows", d.rows);
  // a narrow box drops the row range rather than cut it
  const rows = textWidth(`${count}${range}`, 15) <= inner ? `${count}${range}` : count;
  label(g, x, top + 42, fitText(rows, inner, 15), { size: 15 });
  let y = top + 60;
  if (shapesFit(d, inner)) {
    label(g, x, y, shapes(d), { size: 14, fill: "#343a40" });
  } else {
    label(g, x, y, `${shape(d.input_shape)} →`, { size: 14, fill: "#343a40" });
    y += 17;
    label(g, x, y, shape(d.output_shape), { size: 14, fill: "#343a40" });
  }
  y += 18;
  if (mark.note) {
    label(g, x, y, fitText(mark.note, inner, 14, 600), { size: 14, weight: 600, fill: ctx.colour("loss") });
  } else if (drawer.showsIds && (d.ids || []).length) {  // before a run no row has been drawn: no ids line
    const ids = d.ids.map(String);
    const name = tr("live.box.ids");
    if (ctx.layout.idsApart[box.index]) {  // a narrow box: the ids over two lines, to show more than one
      const head = ids.length > 1 && textWidth(`${name} ${ids[0]},`, 14) <= inner ? 1 : 0;
      const first = head ? `${name} ${ids[0]},` : name;
      label(g, x, y, first, { size: 14, fill: "#495057", cls: "fl-ids" });
      let rest = fitList(ids.slice(head), inner, 14, "");
      // the narrowest box: two ids without the "…" rather than one with it
      if (!head && rest.split(",").length < 2) rest = fitList(ids.slice(0, 2), inner, 14, "");
      label(g, x, y + 18, rest, { size: 14, fill: "#495057", cls: "fl-ids" });
    } else {
      label(g, x, y, `${name} ${idsBeside(ids, inner)}`, { size: 14, fill: "#495057", cls: "fl-ids" });
    }
  }
  const { chips, title } = chipsOf(ctx, box, mark, ctx.chipWidth);
  drawChips(g, box, chips, ctx.chipWidth);
  if (title) {
    const w = ctx.chipWidth(title.text) + 12;
    drawChip(g, box.x + box.w - 6 - w, box.y + 9, w, title, [title.text]);
  }
}

// A chip's words' width as the SVG draws them, in the picture's own SVG (once per text): the canvas's
// measure (textWidth) can fall short where the SVG's font fallback differs, as for a "∇" among Chinese words
// ("平均 ∇" draws 4-5 px wider), and the words would run into the chip's end. Where the SVG is not laid out
// (hidden), it measures nothing and the canvas's width stands; a width is kept only once the page's fonts
// have loaded (a fallback font's would be wrong after).
const CHIP_WIDTHS = new Map();
function chipTextWidth(svg, text) {
  const known = CHIP_WIDTHS.get(text);
  if (known !== undefined) return known;
  const probe = label(svg, 0, -100, text, { size: 14, weight: 600 });
  const drawn = probe.getComputedTextLength() || 0;
  probe.remove();
  const width = Math.max(textWidth(text, 14, 600), drawn);
  const fonts = probe.ownerDocument.fonts;
  if (drawn > 0 && (!fonts || fonts.status === "loaded")) {
    if (CHIP_WIDTHS.size > 500) CHIP_WIDTHS.clear();
    CHIP_WIDTHS.set(text, width);
  }
  return width;
}

// A chip's words on as many lines as the box's width needs: at its last space first ("56 B" / "held"),
// and where a line is still too wide, at each space a line needs (the pipeline's footer) and between any
// two CJK characters, as Chinese text breaks (it has no spaces: "什么也不持有" in a box of eight). A number
// keeps its unit ("占用" / "40 B", never "占用 40" / "B"), and a Latin word wider than the box keeps its line.
const CJK_RANGES = "\\u2e80-\\u9fff\\uf900-\\ufaff\\uff00-\\uffef";
const AMOUNT = "\\d[\\d.,]*[ \\u00a0][kMG]?B\\b";  // "40 B", "1.6 kB": one piece, never broken
// a line's pieces: an amount, one CJK character, a run of other letters, or the spaces between them
const PIECES = new RegExp(`${AMOUNT}|[${CJK_RANGES}]|[^\\s${CJK_RANGES}]+|\\s+`, "g");
export function chipLines(text, room, chipWidth) {
  const fits = (line) => chipWidth(line) + 12 <= room;
  if (fits(text)) return [text];
  // the spaces a line may break at: none inside an amount
  const amounts = [...text.matchAll(new RegExp(AMOUNT, "g"))];
  const inside = new Set(amounts.map((m) => m.index + m[0].search(/[ \u00a0]/)));
  const cuts = [...text.matchAll(/ /g)].map((m) => m.index).filter((i) => !inside.has(i));
  if (cuts.length) {
    const cut = cuts[cuts.length - 1];
    const two = [text.slice(0, cut), text.slice(cut + 1)];
    if (two.every(fits)) return two;
  }
  const lines = [];
  let line = "";
  for (const token of text.match(PIECES)) {
    if (line.trim() && !fits((line + token).trim())) {
      lines.push(line.trim());
      line = token.trimStart();
    } else {
      line += token;
    }
  }
  if (line.trim()) lines.push(line.trim());
  return lines;
}

// Where each chip goes: in rows from the box's bottom-left, a new row when one is full; a chip wider than
// the box takes more lines (chipLines). Every chip is drawn: the boxes are as tall as the fullest needs.
function chipPlan(box, chips, chipWidth) {
  const room = box.w - 12;
  const placed = [];
  let x = 0;
  let y = 0;
  let rowH = 0;
  for (const c of chips) {
    const lines = chipLines(c.text, room, chipWidth);
    const w = Math.max(...lines.map(chipWidth)) + 12;
    const h = CHIP_H + (lines.length - 1) * CHIP_LINE;
    if (x > 0 && x + w > room) {
      x = 0;
      y += rowH + CHIP_GAP;
      rowH = 0;
    }
    placed.push({ chip: c, x, y, w, h, lines });
    x += w + CHIP_GAP;
    rowH = Math.max(rowH, h);
  }
  return { placed, height: chips.length ? y + rowH : CHIP_H };
}

function drawChips(g, box, chips, chipWidth) {
  const plan = chipPlan(box, chips, chipWidth);
  const top = box.y + box.h - 5 - plan.height;
  for (const { chip: c, x, y, w, lines } of plan.placed) drawChip(g, box.x + 6 + x, top + y, w, c, lines);
}

// One chip, its top-left corner at (x, y), w wide: its words on one line or more.
function drawChip(g, x, y, w, c, lines) {
  const h = CHIP_H + (lines.length - 1) * CHIP_LINE;
  g.append(svgEl("rect", { x, y, width: w, height: h, rx: 10, fill: c.colour,
                           "fill-opacity": c.faded ? 0.25 : 1, class: c.fresh ? "fl-pop" : null }));
  const text = label(g, x + 6, y + 15, lines[0], { size: 14, weight: 600, cls: "fl-chip",
                                                   fill: c.faded ? "#343a40" : "#ffffff" });
  text.setAttribute("data-chip", c.text);  // the whole chip, whichever lines it takes
  for (const more of lines.slice(1)) text.append(svgEl("tspan", { x: x + 6, dy: CHIP_LINE }, more));
}

// The footer's left line and the emulation note (its short words where the long ones do not fit beside the
// left line), and whether the note still takes a line of its own below.
function footerTexts(pic, width, drawer) {
  const left = drawer.footer ? drawer.footer(pic) : "";
  if (!pic.emulated) return { left, note: "", own: false };
  const words = { where: pic.emulated_on || tr("live.picture.cpu"),
                  strategy: drawer.title || tr("live.picture.this_strategy") };
  const room = width - SIDE - textWidth(left, 15, 600) - 30;
  const long = tr("live.picture.emulated", words);
  const short = tr("live.picture.emulated_short", words);
  if (textWidth(long, 15) <= room) return { left, note: long, own: false };
  if (textWidth(short, 15) <= room) return { left, note: short, own: false };
  return { left, note: long, own: true };
}

function drawFooter(ctx) {
  const { pic, layout, svg, drawer } = ctx;
  const y = layout.footY;
  const { left, note, own } = footerTexts(pic, layout.width, drawer);
  label(svg, SIDE, y, left, { size: 15, weight: 600, fill: "#343a40", cls: "fl-foot" });
  if (note) {
    label(svg, layout.width - SIDE, own ? y + FOOT_LINE : y, fitText(note, layout.width - 2 * SIDE, 15),
      { size: 15, anchor: "end", fill: "#5f3dc4", cls: "fl-foot" });
  }
}

// A bar of segments, one per busy device, each with its text: the batch above, the outputs below.
// `tagOf(seg)` may give a segment a second, bold text at its right end ({text, colour}): the bytes its arrow
// carries, written where the arrow leaves or reaches the bar rather than on the arrow. The first text gets
// what room the tag leaves (textOf(seg, room, rooms)), and none when that is too little to read; `rooms`,
// every segment's room by index, lets a row say the same kind of thing in every cell.
export function segmentBar(parent, layout, y, height, textOf, textDy = 19, tagOf = null) {
  const tags = layout.segments.map((seg) => {
    const tag = seg && tagOf ? tagOf(seg) : null;
    return tag ? { ...tag, text: fitText(tag.text, seg.w - 8, 14, 700) } : null;
  });
  const rooms = layout.segments.map((seg, i) =>
    seg ? seg.w - 10 - (tags[i] ? textWidth(tags[i].text, 14, 700) + 8 : 0) : 0);
  layout.segments.forEach((seg, i) => {
    if (!seg) return;
    parent.append(svgEl("rect", { x: seg.x, y, width: Math.max(1, seg.w - 1), height, rx: 3,
                                  fill: deviceColour(i), "fill-opacity": 0.16, stroke: deviceColour(i),
                                  "stroke-width": 1.5 }));
    const tag = tags[i];
    if (tag) {
      label(parent, seg.x + seg.w - 5, y + textDy, tag.text, { size: 14, weight: 700, anchor: "end",
                                                              fill: tag.colour });
    }
    const text = rooms[i] >= 24 ? textOf(seg, rooms[i], rooms) : "";
    if (text) label(parent, seg.x + 5, y + textDy, text, { size: 14, fill: "#212529", cls: "fl-seg" });
  });
}
