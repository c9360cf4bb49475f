// DistributedDataParallel's step picture: no central batch; each rank reads its own shard, runs, computes
// its own loss and gradients; the gradients are averaged around a ring; every rank takes the same step.

import { fitList, fitText, label, svgEl, textWidth } from "./dom.js";
import { formatBytes, formatNumber, isNum } from "./format.js";
import { tr } from "./words.js";
import { SIDE, arrow, busyBoxes, chip, deviceColour, heldChip, ringArrows } from "./picture.js";

const colours = {
  load: "#1f6feb", forward: "#2f9e44", loss: "#e8590c", backward: "#c92a2a", allreduce: "#ae3ec9",
  optimizer: "#343a40", replicate: "#7048e8",  // replicate: the chip of the model each rank holds
  padded: "#868e96",  // the chip of the rows repeated to pad a rank's shard
  held: "#495057",  // the chip of the bytes a rank holds between steps
};

const phaseText = {
  load: () => tr("live.ddp.load"),
  forward: () => tr("live.ddp.forward"),
  loss: () => tr("live.ddp.loss"),
  backward: () => tr("live.ddp.backward"),
  allreduce: (p, g) => tr("live.ddp.allreduce",
    { bytes: formatBytes(g.entries[0] ? g.entries[0].bytes : 0) }),
  optimizer: () => tr("live.ddp.optimizer"),
};

// The pills' and the timeline's names of the phases that are not torch's own names.
const names = {
  load: "live.phase.load", forward: "live.phase.forward", loss: "live.phase.loss",
  backward: "live.phase.backward", optimizer: "live.phase.optimizer",
};

// Each rank's shard sits above its own box.
function drawTop(ctx) {
  const { layout, svg } = ctx;
  layout.boxes.forEach((box, i) => {
    const d = box.device;
    if (!d.busy) return;
    svg.append(svgEl("rect", { x: box.x, y: layout.barY, width: box.w, height: layout.barH, rx: 3,
                               fill: deviceColour(i), "fill-opacity": 0.16, stroke: deviceColour(i) }));
    const ids = (d.ids || []).map(String);
    const more = d.rows - ids.length;
    label(svg, box.x + 5, layout.barY + 19, fitList(ids, box.w - 10, 14, more > 0 ? ` +${more}` : ""),
      { size: 14 });
  });
}

// A rank's label already starts "rank i · ..." where the run names its ranks so.
function boxName(pic, box, room) {
  const d = box.device;
  const name = d.label.startsWith("rank ") ? d.label : `rank ${box.index} · ${d.label}`;
  return textWidth(name, 15, 700) > room ? fitText(`rank ${box.index}`, room, 15, 700) : name;
}

function drawLoad(ctx) {
  const live = ctx.now("load");
  const { layout } = ctx;
  for (const box of busyBoxes(ctx)) {
    const y0 = layout.barY + layout.barH;
    arrow(ctx, `M${box.cx},${y0 + 1} L${box.cx},${box.y - 2}`, "load", { live, faint: !live });
    if (live) {
      ctx.boxState[box.index].glow = colours.load;
      label(ctx.layer.front, box.cx + 6, box.y - 10, "0 B", { size: 14, weight: 600, fill: colours.load,
                                                             halo: true });
    }
  }
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], "W, b", colours.replicate);
    heldChip(ctx.boxState[box.index], box.device.memory, colours.held);  // every rank the whole model
    // DistributedSampler repeats rows to give every rank as many: this step's repeats, marked on its rank
    const padded = box.device.padded;
    if (isNum(padded) && padded > 0) {
      chip(ctx.boxState[box.index], tr("live.picture.chip_padded", { n: padded }), colours.padded);
    }
  }
}

function drawForward(ctx) {
  if (!ctx.now("forward")) return;
  for (const box of busyBoxes(ctx)) ctx.boxState[box.index].glow = colours.forward;
}

function drawLoss(ctx) {
  const live = ctx.now("loss");
  for (const box of busyBoxes(ctx)) {
    const loss = box.device.loss;
    const value = isNum(loss) ? formatNumber(loss) : "–";
    ctx.boxState[box.index].note = tr("live.picture.loss", { loss: value });
    if (live) ctx.boxState[box.index].glow = colours.loss;
  }
}

function drawBackward(ctx) {
  const live = ctx.now("backward");
  for (const box of busyBoxes(ctx)) {
    const text = ctx.done("allreduce") ? tr("live.ddp.chip_avg") : "∇W, ∇b";
    chip(ctx.boxState[box.index], text, colours.backward, { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.backward;
  }
}

// A ring hop between two ranks on different hosts (a run across machines): it crosses the network.
export function crossesHosts(a, b) {
  return !!(a.host && b.host && a.host !== b.host);
}

function markCrossing(ctx, path, x, y) {
  path.setAttribute("stroke-width", 5);  // the live arrows are already dashed (they flow): thicker instead
  if (x !== null) label(ctx.layer.front, x, y, tr("live.ddp.cross_host"),
    { size: 13, weight: 600, anchor: "middle", fill: colours.allreduce, halo: true });
}

// The ring: rank i sends to rank i+1, the last one back to rank 0 along the bottom; a hop between hosts
// is drawn thicker, and says so.
function drawAllReduce(ctx, group) {
  const live = ctx.now("allreduce");
  const boxes = busyBoxes(ctx);
  const { layout } = ctx;
  const yBox = layout.boxY + layout.boxH;
  if (boxes.length < 2) {
    if (live) label(ctx.layer.front, SIDE, layout.outY + 20, tr("live.ddp.one_rank"),
      { size: 15, weight: 600, fill: colours.allreduce });
    return;
  }
  const { hops, back, yBack, midX } = ringArrows(ctx, boxes, "allreduce", { live, faint: !live });
  hops.forEach((hop, i) => {
    const [a, b] = [boxes[i], boxes[i + 1]];
    if (crossesHosts(a.device, b.device)) markCrossing(ctx, hop, (a.cx + b.cx) / 2, yBox + 14);
  });
  const [first, last] = [boxes[0], boxes[boxes.length - 1]];
  if (crossesHosts(last.device, first.device)) markCrossing(ctx, back, null);
  if (live) {
    for (const box of boxes) ctx.boxState[box.index].glow = colours.allreduce;
    const per = group.entries[0] ? group.entries[0].bytes : 0;
    const text = tr("live.ddp.ring", { bytes: formatBytes(per) });
    label(ctx.layer.front, midX, yBack + 20, fitText(text, layout.width - 40, 15, 600),
      { size: 15, weight: 600, anchor: "middle", fill: colours.allreduce, halo: true });
  }
}

function drawOptimizer(ctx) {
  const live = ctx.now("optimizer");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], tr("live.ddp.chip_step"), colours.optimizer, { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.optimizer;
  }
}

export default {
  key: "ddp",
  title: "DDP",
  colours,
  names,
  phaseText,
  phases: {
    load: drawLoad, forward: drawForward, loss: drawLoss, backward: drawBackward, allreduce: drawAllReduce,
    optimizer: drawOptimizer,
  },
  drawTop,
  boxName,
  marksFirst: false,
  showsIds: false,
  footer: () => tr("live.ddp.footer"),
};
