// nn.DataParallel's step picture: the batch on the first device is scattered, the model replicated, the
// replicas run, the outputs gathered on the first device, the gradients summed back there.

import { fitList, fitText, label, svgEl, textWidth } from "./dom.js";
import { formatBytes, formatNumber, isNum, shape } from "./format.js";
import { tr } from "./words.js";
import {
  SIDE, arrow, busy, busyBoxes, bytesOf, chip, heldChip, segmentBar,
} from "./picture.js";

const colours = {
  scatter: "#1f6feb", replicate: "#7048e8", parallel_apply: "#2f9e44", gather: "#0c8599", loss: "#e8590c",
  backward: "#c92a2a", reduce: "#ae3ec9", optimizer: "#343a40",
  held: "#495057",  // the chip of the bytes a device holds: device 0's optimizer state is the others' lack
};

// The bytes each replica's copy of W, b (replicate) and its gradients (reduce) move go in the phase's title,
// as the backward's do: the 24 px between the X row and the boxes hold those phases' bus and arrows, and has
// no room for words (labels there ran into the X row; a chip in each box made the boxes taller, and the
// charts fell off the first screen at 8 devices). Every replica moves the same bytes; else, no figure.
function sameBytes(group) {
  const each = group ? group.entries.map((e) => e.bytes).filter((b) => isNum(b) && b > 0) : [];
  return each.length && each.every((b) => b === each[0]) ? each[0] : 0;
}

const phaseText = {
  scatter: (p) => tr("live.dp.scatter", { shape: shape(p.input_shape), n: busy(p).length,
                                          device: p.first_device }),
  replicate: (p, g) => {
    const each = sameBytes(g);
    return each ? tr("live.dp.replicate_bytes", { device: p.first_device, bytes: formatBytes(each) })
      : tr("live.dp.replicate", { device: p.first_device });
  },
  parallel_apply: (p) => tr("live.dp.parallel_apply", { n: busy(p).length }),
  gather: (p) => tr("live.dp.gather", { device: p.first_device, shape: shape(p.output_shape) }),
  loss: (p) => tr("live.dp.loss", { device: p.first_device, loss: formatNumber(p.loss) }),
  // the bytes of the output gradients in the title: their arrows leave every segment of the outputs
  backward: (p, g) => (g && g.bytes ? tr("live.dp.backward_bytes", { bytes: formatBytes(g.bytes) })
    : tr("live.dp.backward")),
  reduce: (p, g) => {
    const each = sameBytes(g);
    return each ? tr("live.dp.reduce_bytes", { device: p.first_device, bytes: formatBytes(each) })
      : tr("live.dp.reduce", { device: p.first_device });
  },
  optimizer: (p) => tr("live.dp.optimizer", { device: p.first_device }),
};

// The pills' and the timeline's names of the phases that are not torch's own names.
const names = { loss: "live.phase.loss", backward: "live.phase.backward", optimizer: "live.phase.optimizer" };

// What an arrow from or to device i's segment carries while its phase is the current one: its bytes, or
// "stays" for the first device's own rows.
function bytesTag(ctx, name) {
  const group = ctx.now(name) && ctx.groups.find((g) => g.name === name);
  if (!group) return null;
  return (seg) => {
    const b = bytesOf(group, seg.device);
    return { text: b ? formatBytes(b) : tr("live.dp.stays"), colour: colours[name] };
  };
}

// The batch lives on the first device before the scatter: its rows' ids, cut as tensor.chunk cuts them;
// while it is scattered, each chunk's bytes at its end, above its arrow.
function drawTop(ctx) {
  const { layout, svg } = ctx;
  const g = svgEl("g");
  svg.insertBefore(g, ctx.layer.back);
  label(g, SIDE, layout.barY + 19, layout.rowLabels.batch, { size: 15, weight: 700 });
  // each chunk's first ids where every chunk's fit, else every chunk's row count: one row, one kind of
  // figure (side by side, "60 … +17" beside "25" read as different things)
  const ids = (seg, room) => {
    const shown = (seg.device.ids || []).map(String);
    const more = seg.device.rows - shown.length;
    return fitList(shown, room, 14, more > 0 ? ` +${more}` : "");
  };
  let shown = null;  // each chunk's ids in its room, measured once for the row ("" where they do not fit)
  segmentBar(g, layout, layout.barY, layout.barH, (seg, room, rooms) => {
    shown ??= layout.segments.map((s, i) => (s && rooms[i] >= 24 ? ids(s, rooms[i]) : ""));
    const all = shown.every((text, i) => !layout.segments[i] || text);
    return (all && shown[layout.segments.indexOf(seg)]) || fitText(`${seg.device.rows}`, room + 4, 14);
  }, 19, bytesTag(ctx, "scatter"));
}

// Chunk i goes from its segment of the batch down into device i.
function drawScatter(ctx) {
  const live = ctx.now("scatter");
  const { layout } = ctx;
  for (const box of busyBoxes(ctx)) {
    const seg = layout.segments[box.index];
    const x0 = seg.x + seg.w / 2;
    const y0 = layout.barY + layout.barH;
    arrow(ctx, `M${x0},${y0 + 1} C${x0},${y0 + 16} ${box.cx},${box.y - 16} ${box.cx},${box.y - 2}`,
      "scatter", { live, faint: !live });
    if (live) ctx.boxState[box.index].glow = colours.scatter;
  }
  // the first device holds the model, its gradients and all of the optimizer state before any step begins
  const first = busyBoxes(ctx)[0];
  if (first && first.index === 0) heldChip(ctx.boxState[0], first.device.memory, colours.held);
}

// A bus above the boxes: the first device's parameters broadcast to every other busy device.
function drawReplicate(ctx) {
  const live = ctx.now("replicate");
  const boxes = busyBoxes(ctx);
  boxes.forEach((box) => {
    const original = box.index === 0;
    chip(ctx.boxState[box.index], original ? "W, b" : tr("live.dp.chip_copy"), colours.replicate,
      { fresh: live && !original, faded: ctx.done("optimizer") && !original });
    if (!original) heldChip(ctx.boxState[box.index], box.device.memory, colours.held);  // a replica's copy
  });
  if (!live || boxes.length < 2) return;
  const y = ctx.layout.boxY - 12;
  const first = boxes[0];
  const last = boxes[boxes.length - 1];
  ctx.layer.back.append(svgEl("path", { d: `M${first.cx},${first.y - 2} L${first.cx},${y} L${last.cx},${y}`,
                                        fill: "none", stroke: colours.replicate, "stroke-width": 3,
                                        class: "fl-flow" }));
  for (const box of boxes.slice(1)) {
    arrow(ctx, `M${box.cx},${y} L${box.cx},${box.y - 2}`, "replicate", { live: true });
  }
}

function drawParallelApply(ctx) {
  if (!ctx.now("parallel_apply")) return;
  for (const box of busyBoxes(ctx)) ctx.boxState[box.index].glow = colours.parallel_apply;
}

// Each replica's output rows go down into their place in the output on the first device.
function drawGather(ctx) {
  const live = ctx.now("gather");
  const { layout } = ctx;
  const y = layout.outY;
  for (const box of busyBoxes(ctx)) {
    const seg = layout.segments[box.index];
    const x1 = seg.x + seg.w / 2;
    arrow(ctx, `M${box.cx},${box.y + box.h + 1} C${box.cx},${box.y + box.h + 16} ${x1},${y - 14} ${x1},${y - 2}`,
      "gather", { live, faint: !live });
  }
  drawOutputBar(ctx);
}

// The output on the first device, in the chunks' order: segment i holds device i's output rows; while
// they are gathered, each segment's bytes at its end, below its arrow.
function drawOutputBar(ctx) {
  const { layout, pic } = ctx;
  const g = svgEl("g");
  ctx.layer.boxes.append(g);
  label(g, SIDE, layout.outY + 19, layout.rowLabels.out, { size: 15, weight: 700 });
  // a chunk's shape whole or not at all: "[2…" beside its bytes says nothing (eight devices' segments)
  const whole = (seg, room) => {
    const text = shape(seg.device.output_shape);
    return textWidth(text, 14) <= room ? text : "";
  };
  segmentBar(g, layout, layout.outY, layout.outH, whole, 18, bytesTag(ctx, "gather"));
  const last = layout.segments.filter(Boolean).pop();
  const room = last ? layout.width - SIDE - (last.x + last.w) - 8 : 0;
  const where = tr("live.dp.output_on", { device: pic.first_device });
  if (room > textWidth(where, 15, 600)) {
    label(g, layout.width - SIDE, layout.outY + 19, where, { size: 15, weight: 600, anchor: "end" });
  }
}

function drawLoss(ctx) {
  if (ctx.now("loss")) ctx.boxState[0].glow = colours.loss;
  if (ctx.layout.boxes[0] && isNum(ctx.pic.loss)) {
    chip(ctx.boxState[0], tr("live.picture.loss", { loss: formatNumber(ctx.pic.loss) }), colours.loss,
      { fresh: ctx.now("loss") });
  }
}

// The loss's gradient flows back up: the output gradients are scattered back to the replicas.
function drawBackward(ctx) {
  const live = ctx.now("backward");
  const { layout } = ctx;
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], "∇W, ∇b", colours.backward,
      { fresh: live, faded: ctx.done("reduce") && box.index !== 0 });
    if (!live) continue;
    ctx.boxState[box.index].glow = colours.backward;
    const seg = layout.segments[box.index];
    const x0 = seg.x + seg.w / 2;
    const bottom = box.y + box.h;
    arrow(ctx, `M${x0},${layout.outY - 2} C${x0},${layout.outY - 14} ${box.cx},${bottom + 16} ${box.cx},${bottom + 2}`,
      "backward", { live: true });
  }
}

// The bus again, the other way: every replica's gradients summed onto the first device's W, b.
function drawReduce(ctx) {
  const live = ctx.now("reduce");
  const boxes = busyBoxes(ctx);
  if (boxes.length) {
    const sum = tr("live.dp.chip_sum", { n: boxes.length });
    chip(ctx.boxState[boxes[0].index], sum, colours.reduce, { fresh: live });
  }
  if (!live) return;
  ctx.boxState[0].glow = colours.reduce;
  if (boxes.length < 2) return;
  const y = ctx.layout.boxY - 12;
  const first = boxes[0];
  const last = boxes[boxes.length - 1];
  for (const box of boxes.slice(1)) {
    ctx.layer.back.append(svgEl("path", { d: `M${box.cx},${box.y - 2} L${box.cx},${y}`, fill: "none",
                                          stroke: colours.reduce, "stroke-width": 3, class: "fl-flow" }));
  }
  arrow(ctx, `M${last.cx},${y} L${first.cx},${y} L${first.cx},${first.y - 2}`, "reduce", { live: true });
}

function drawOptimizer(ctx) {
  const live = ctx.now("optimizer");
  if (live) ctx.boxState[0].glow = colours.optimizer;
  chip(ctx.boxState[0], tr("live.dp.chip_step"), colours.optimizer, { fresh: live });
}

// One busy device runs the module itself: no scatter, no replicas, no gather. Its box shows what the whole
// step left on it, as the footer says: its W, b, the loss, the gradients and the step.
function drawWhole(ctx) {
  const boxes = busyBoxes(ctx);
  if (boxes.length !== 1) return;
  const mark = ctx.boxState[boxes[0].index];
  chip(mark, "W, b", colours.replicate);
  heldChip(mark, boxes[0].device.memory, colours.held);
  if (isNum(ctx.pic.loss)) chip(mark, tr("live.picture.loss", { loss: formatNumber(ctx.pic.loss) }), colours.loss);
  chip(mark, "∇W, ∇b", colours.backward);
  chip(mark, tr("live.dp.chip_step"), colours.optimizer);
}

export default {
  key: "dataparallel",
  title: "DataParallel",
  colours,
  names,
  phaseText,
  phases: {
    scatter: drawScatter, replicate: drawReplicate, parallel_apply: drawParallelApply, gather: drawGather,
    loss: drawLoss, backward: drawBackward, reduce: drawReduce, optimizer: drawOptimizer,
  },
  drawTop,
  whole: drawWhole,
  rowLabels: (pic) => ({
    batch: tr("live.dp.row_batch", { shape: shape(pic.input_shape), device: pic.first_device }),
    out: tr("live.dp.row_out", { shape: shape(pic.output_shape) }),
  }),
  marksFirst: true,
  showsIds: true,
  // one busy device gathers nothing and reduces nothing: it does the whole step itself
  footer: (pic) => tr((pic.devices || []).filter((d) => d.busy).length > 1 ? "live.dp.footer" : "live.dp.footer_one",
    { device: pic.first_device }),
};
