// Tensor parallelism's step picture: where DataParallel and DDP cut X by rows, TP cuts it by columns. Above
// each rank, the batch's columns as a strip of the d features, its own filled: every rank takes every row
// but only its features. Each rank multiplies them by its own rows of W (a partial output, (B, 1)); one
// all-reduce of the partial outputs, around the ring, gives every rank X·W; backward needs no communication,
// and each rank's optimizer steps its own rows of W.

import { fitText, label } from "./dom.js";
import { formatBytes, formatNumber, isNum } from "./format.js";
import { tr } from "./words.js";
import {
  SIDE, arrow, busyBoxes, chip, columnsBarHeight, deviceColour, drawColumns, heldChip, ringArrows,
} from "./picture.js";
import ranks from "./draw_ddp.js";

const colours = {
  load: "#1f6feb", forward: "#2f9e44", allreduce: "#ae3ec9", loss: "#e8590c", backward: "#c92a2a",
  optimizer: "#343a40",
  shard: "#7048e8", held: "#495057",
};

const sent = (g) => formatBytes(g.entries[0] ? g.entries[0].bytes : 0);  // one rank's bytes in the all-reduce

const phaseText = {
  load: () => tr("live.tp.load"),
  forward: () => tr("live.tp.forward"),
  allreduce: (p, g) => tr("live.tp.allreduce", { bytes: sent(g) }),
  loss: () => tr("live.tp.loss"),
  backward: () => tr("live.tp.backward"),
  optimizer: () => tr("live.tp.optimizer"),
};

const names = {
  load: "live.phase.load", forward: "live.phase.forward", loss: "live.phase.loss",
  backward: "live.phase.backward", optimizer: "live.phase.optimizer",
};

function own(box) {
  const shard = box.device.shard;
  return shard && shard.names && shard.names.length ? shard.names.join(", ") : "–";
}

// Above each rank: the d columns of X, its own filled in its colour, and which they are ("X[:, 0:2]").
const columnsText = (dev) => `X[:, ${dev.columns[0]}:${dev.columns[1]}]`;

function drawTop(ctx) {
  if (!(ctx.pic.features > 0)) return;
  for (const box of busyBoxes(ctx)) {
    if (box.device.columns) drawColumns(ctx, box, deviceColour(box.index), columnsText(box.device));
  }
}

function drawLoad(ctx) {
  const live = ctx.now("load");
  for (const box of busyBoxes(ctx)) {
    const y0 = ctx.layout.barY + ctx.layout.barH;
    arrow(ctx, `M${box.cx},${y0 + 1} L${box.cx},${box.y - 2}`, "load", { live, faint: !live });
    if (live) ctx.boxState[box.index].glow = colours.load;
    chip(ctx.boxState[box.index], own(box), colours.shard);
    heldChip(ctx.boxState[box.index], box.device.memory, colours.held);
  }
}

function drawForward(ctx) {
  const live = ctx.now("forward");
  for (const box of busyBoxes(ctx)) {
    const summed = ctx.done("allreduce");
    chip(ctx.boxState[box.index], tr(summed ? "live.tp.chip_sum" : "live.tp.chip_partial"), colours.forward,
      { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.forward;
  }
}

// The ring of the activations: rank i to rank i+1, the last back to rank 0; its bytes, which grow with B.
function drawAllReduce(ctx, group) {
  const live = ctx.now("allreduce");
  const boxes = busyBoxes(ctx);
  const { layout } = ctx;
  if (boxes.length < 2) {
    if (live) label(ctx.layer.front, SIDE, layout.outY + 20, tr("live.tp.one_rank"),
      { size: 15, weight: 600, fill: colours.allreduce });
    return;
  }
  const { yBack, midX } = ringArrows(ctx, boxes, "allreduce", { live, faint: !live });
  if (live) {
    for (const box of boxes) ctx.boxState[box.index].glow = colours.allreduce;
    const text = tr("live.tp.ring", { bytes: sent(group) });
    label(ctx.layer.front, midX, yBack + 20, fitText(text, layout.width - 40, 15, 600),
      { size: 15, weight: 600, anchor: "middle", fill: colours.allreduce, halo: true });
  }
}

function drawLoss(ctx) {
  const live = ctx.now("loss");
  for (const box of busyBoxes(ctx)) {
    const loss = box.device.loss;
    ctx.boxState[box.index].note = tr("live.picture.loss", { loss: isNum(loss) ? formatNumber(loss) : "–" });
    if (live) ctx.boxState[box.index].glow = colours.loss;
  }
}

function drawBackward(ctx) {
  const live = ctx.now("backward");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], tr("live.tp.chip_grad"), colours.backward, { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.backward;
  }
}

function drawOptimizer(ctx) {
  const live = ctx.now("optimizer");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], tr("live.tp.chip_step"), colours.optimizer, { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.optimizer;
  }
}

export default {
  key: "tp",
  title: "TP",
  colours,
  names,
  phaseText,
  phases: {
    load: drawLoad, forward: drawForward, allreduce: drawAllReduce, loss: drawLoss, backward: drawBackward,
    optimizer: drawOptimizer,
  },
  drawTop,
  barHeight: (pic, widths) => columnsBarHeight(pic, widths, columnsText),
  boxName: ranks.boxName,
  marksFirst: false,
  showsIds: false,
  footer: () => tr("live.tp.footer"),
};
