// A pipeline's step picture: the schedule as it ran. A row per rank (its stages), time across from the ranks'
// shared zero (a barrier before the schedule), one block per microbatch and pass, coloured by microbatch:
// solid forwards, lighter backwards (the zero-bubble schedules' input and weight gradients apart). Behind
// the blocks each row is hatched: whatever the blocks leave uncovered is the bubble, whose measured share
// stands beside its formula's above. Arrows join a forward's end to the next stage's forward of the same
// microbatch (activations) and a backward to the stage before's (their gradients). The phase walk steps
// through the schedule's ticks (its unit-time order): the current tick's blocks are outlined, later ones
// faint.

import { COLOURS, clear, fitText, label, svgEl, textWidth } from "./dom.js";
import { formatBytes, isNum } from "./format.js";
import { chipLines } from "./picture.js";
import { tr } from "./words.js";

const colours = {
  forward: "#2f9e44", backward: "#c92a2a", backward_input: "#e8590c", backward_weight: "#ae3ec9",
  loss: "#495057", optimizer: "#343a40", tick: "#1f6feb", idle: "#adb5bd",
};
const FOOT_LINE = 18;  // the footer's second line, 14 px words
const LETTER = { forward: "F", backward: "B", backward_input: "I", backward_weight: "W" };
const SHADE = { F: 0.92, B: 0.5, I: 0.62, W: 0.36 };  // a forward solid, a backward lighter

const names = {
  forward: "live.pp.forward", backward: "live.pp.backward", backward_input: "live.pp.backward_input",
  backward_weight: "live.pp.backward_weight", loss: "live.phase.loss", optimizer: "live.phase.optimizer",
};

// The tick's title: which stage runs which block ("Tick 3: stage 0 B1 · stage 1 F2").
function tickText(pic, group) {
  const blocks = (group.entries || []).map((e) => tr("live.pp.block", {
    stage: isNum(e.stage) ? e.stage : "?", kind: LETTER[e.name] || e.name, mb: isNum(e.microbatch) ? e.microbatch : "",
  }));
  return tr("live.pp.tick", { tick: (group.tick || 0) + 1, blocks: blocks.join(" · ") });
}

const phaseText = {
  forward: () => tr("live.pp.forward"), backward: () => tr("live.pp.backward"),
  backward_input: () => tr("live.pp.backward_input"), backward_weight: () => tr("live.pp.backward_weight"),
  loss: () => tr("live.pp.loss"), optimizer: () => tr("live.pp.optimizer"), tick: tickText,
};

const none = () => {};
const mbColour = (i) => COLOURS[(i + 1) % COLOURS.length];  // microbatch 0 not the rank-0 blue of other views
const percent = (x) => `${Math.round(100 * x)}%`;

function hatch(svg) {
  const defs = svgEl("defs");
  const pattern = svgEl("pattern", { id: "fl-pp-idle", width: 7, height: 7, patternUnits: "userSpaceOnUse",
                                     patternTransform: "rotate(45)" });
  pattern.append(svgEl("rect", { width: 7, height: 7, fill: "#f1f3f5" }),
    svgEl("line", { x1: 0, y1: 0, x2: 0, y2: 7, stroke: colours.idle, "stroke-width": 2 }));
  const marker = svgEl("marker", { id: "fl-pp-arrow", viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 5,
                                   markerHeight: 5, orient: "auto-start-reverse" });
  marker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: "#495057" }));
  defs.append(pattern, marker);
  svg.append(defs);
}

// The whole picture; `groups` are the step's ticks (stepper.phaseGroups), `phase` the walk's place in them.
function draw(svg, pic, groups, phase, width) {
  clear(svg);
  const value = pic.pipeline || {};
  const ranks = value.ranks || [];
  const rowH = ranks.length > 4 ? 34 : 44;
  const labels = ranks.map((r) => `${(pic.devices[r.rank] || {}).label || r.device} · `
    + tr("live.pp.stage", { stages: r.stages.join(", ") }));
  const labelW = Math.min(260, Math.max(...labels.map((t) => textWidth(t, 15, 700)), 80) + 14);
  const heldW = 150;
  const top = 30;
  const plotX = labelW;
  const plotW = Math.max(120, width - labelW - heldW - 8);
  const end = Math.max(1e-9, ...ranks.flatMap((r) => r.blocks.map((b) => b.end)));
  const x = (t) => plotX + (plotW * t) / end;
  // the footer's legend on as many lines as it takes, two at most (14 px words, never cut on a projector)
  const link = (value.links || [])[0];
  const sends = link && value.microbatches ? link.forward_bytes / value.microbatches : 0;
  const foot = `${tr("live.pp.footer")}${sends ? ` · ${tr("live.pp.sends", { bytes: formatBytes(sends) })}` : ""}`;
  const footLines = chipLines(foot, width, (line) => textWidth(line, 14));
  const shownLines = footLines.length > 2
    ? [footLines[0], fitText(footLines.slice(1).join(" "), width - 12, 14)] : footLines;
  const height = top + ranks.length * rowH + 48 + FOOT_LINE * (shownLines.length - 1);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  hatch(svg);
  // the bubble, measured beside its formula; before a run, the formula's alone, the measure to come
  const formula = { formula: percent(value.bubble_formula), text: value.bubble_formula_text };
  const bubble = isNum(value.bubble_measured)
    ? tr("live.pp.bubble", { measured: percent(value.bubble_measured), ...formula })
    : tr("live.pp.bubble_planned", formula);
  label(svg, 6, 20, fitText(bubble, width - 12, 17, 700), { size: 17, weight: 700 });
  const current = !phase.done && groups[phase.index] ? groups[phase.index].tick : null;
  const rowOf = new Map();  // stage -> its rank's row
  ranks.forEach((r, i) => r.stages.forEach((s) => rowOf.set(s, i)));
  const blockAt = new Map();  // "kind/stage/mb" -> [x0, x1, y]
  ranks.forEach((r, i) => {
    const y = top + i * rowH;
    label(svg, labelW - 8, y + rowH / 2 + 5, fitText(labels[i], labelW - 12, 15, 700),
      { size: 15, weight: 700, anchor: "end" });
    svg.append(svgEl("rect", { x: plotX, y: y + 4, width: plotW, height: rowH - 8, fill: "url(#fl-pp-idle)" }));
    for (const b of r.blocks) {
      const x0 = x(b.start);
      const w = Math.max(2, x(b.end) - x0);
      blockAt.set(`${b.kind}/${b.stage}/${b.microbatch}`, [x0, x0 + w, y]);
      const later = current !== null && isNum(b.tick) && b.tick > current;
      const now = current !== null && b.tick === current;
      const rect = svgEl("rect", { x: x0, y: y + 4, width: w, height: rowH - 8, rx: 2, fill: mbColour(b.microbatch),
                                   "fill-opacity": (SHADE[b.kind] || 0.6) * (later ? 0.3 : 1),
                                   stroke: now ? "#111418" : "#ffffff", "stroke-width": now ? 2.5 : 1 });
      rect.append(svgEl("title", {}, `${b.kind}${b.microbatch} · stage ${b.stage}`
        + ` · ${((b.end - b.start) * 1e3).toFixed(2)} ms${b.sent ? ` · ${formatBytes(b.sent)}` : ""}`));
      svg.append(rect);
      // its name, smaller where a short block (a forward is half a backward) leaves no room at 13 px
      const text = `${b.kind}${b.microbatch}`;
      const size = [13, 11].find((px) => textWidth(text, px, 700) + 2 <= w);
      if (size) {
        label(svg, x0 + w / 2, y + rowH / 2 + 5, text, { size, weight: 700, anchor: "middle",
                                                         fill: b.kind === "F" ? "#ffffff" : "#111418" });
      }
    }
    const held = (r.held || []).map((h) => h.microbatches);
    label(svg, plotX + plotW + 8, y + rowH / 2 + 5, tr("live.pp.held", { n: held.join("/") }),
      { size: 14, fill: "#495057" });
  });
  // sends: a forward's activations to the next stage, a backward's gradient to the stage before
  for (const r of ranks) {
    for (const b of r.blocks) {
      // a forward hands its activations to the next stage's forward; a backward (or I) its gradient to the
      // stage before's; a send within one rank (interleaved, ZBV) is no message
      const target = b.kind === "F" ? b.stage + 1 : b.kind === "B" || b.kind === "I" ? b.stage - 1 : null;
      if (target === null || rowOf.get(target) === undefined || rowOf.get(target) === rowOf.get(b.stage)) continue;
      const kinds = b.kind === "F" ? ["F"] : ["B", "I"];
      const to = kinds.map((k) => blockAt.get(`${k}/${target}/${b.microbatch}`)).find(Boolean);
      const from = blockAt.get(`${b.kind}/${b.stage}/${b.microbatch}`);
      if (!from || !to) continue;
      const y0 = from[2] + (to[2] > from[2] ? rowH - 4 : 4);
      const y1 = to[2] + (to[2] > from[2] ? 4 : rowH - 4);
      const later = current !== null && isNum(b.tick) && b.tick >= current;
      svg.append(svgEl("path", { d: `M${from[1]},${y0} L${to[0]},${y1}`, stroke: "#495057", fill: "none",
                                 "stroke-width": 1.2, "stroke-opacity": later ? 0.2 : 0.6,
                                 "marker-end": "url(#fl-pp-arrow)" }));
    }
  }
  shownLines.forEach((line, i) => {
    label(svg, 6, height - 14 - FOOT_LINE * (shownLines.length - 1 - i), line, { size: 14, fill: "#495057" });
  });
}

export default {
  key: "pp",
  title: "PP",
  colours,
  names,
  phaseText,
  phases: { forward: none, backward: none, backward_input: none, backward_weight: none, loss: none,
            optimizer: none },
  groupName: (group) => (isNum(group.tick) ? tr("live.pp.pill", { tick: group.tick + 1 }) : null),
  drawTop: none,
  draw,
  marksFirst: false,
  showsIds: false,
  footer: () => tr("live.pp.footer"),
};
