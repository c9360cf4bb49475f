// A 2-D mesh's step picture (dp x tp): X cut both ways. Above each rank, its block of X: its rows (its dp
// coordinate's, DistributedSampler's) and its columns (its tp coordinate's, torch.chunk's). The ranks of a tp
// group share their rows: forward ends in an all-reduce of their partial outputs (activations), drawn as
// arcs under neighbouring boxes. The ranks of a dp group share their columns: backward's collectives
// (DDP's all-reduce of the gradients, FSDP's all-gather and reduce-scatter of the shards) run between them,
// drawn as arcs along the bottom. Each arc's bytes are the rank's own, as measured.

import { fitText, label, textWidth } from "./dom.js";
import { formatBytes, formatNumber, isNum } from "./format.js";
import { tr } from "./words.js";
import {
  SIDE, arrow, busyBoxes, chip, columnsBarHeight, deviceColour, drawColumns, heldChip,
} from "./picture.js";

const colours = {
  load: "#1f6feb", forward: "#2f9e44", tp_allreduce: "#e67700", loss: "#e8590c", backward: "#c92a2a",
  allreduce: "#ae3ec9", all_gather: "#0c8599", reduce_scatter: "#ae3ec9", optimizer: "#343a40",
  block: "#7048e8", held: "#495057",
};

const each = (g) => formatBytes(g.entries[0] ? g.entries[0].bytes : 0);  // one rank's bytes in the phase

const phaseText = {
  load: () => tr("live.mesh.load"),
  forward: () => tr("live.mesh.forward"),
  tp_allreduce: (p, g) => tr("live.mesh.tp_allreduce", { bytes: each(g) }),
  loss: () => tr("live.mesh.loss"),
  backward: () => tr("live.mesh.backward"),
  allreduce: (p, g) => tr("live.mesh.allreduce", { bytes: each(g) }),
  all_gather: (p, g) => tr("live.mesh.all_gather", { bytes: each(g) }),
  reduce_scatter: (p, g) => tr("live.mesh.reduce_scatter", { bytes: each(g) }),
  optimizer: () => tr("live.mesh.optimizer"),
};

const names = {
  load: "live.phase.load", forward: "live.phase.forward", tp_allreduce: "live.phase.tp_allreduce",
  loss: "live.phase.loss", backward: "live.phase.backward", allreduce: "live.phase.dp_allreduce",
  all_gather: "live.phase.all_gather", reduce_scatter: "live.phase.reduce_scatter",
  optimizer: "live.phase.optimizer",
};

const coordsOf = (pic, i) => (pic.mesh && pic.mesh.coords[i]) || {};

// The groups that talk along `dim`: the ranks that share every other coordinate, in rank order.
export function groupsAlong(pic, dim) {
  const dims = ((pic.mesh && pic.mesh.dims) || []).map((d) => d[0]).filter((name) => name !== dim);
  const groups = new Map();
  (pic.devices || []).forEach((d, i) => {
    const at = coordsOf(pic, i);
    const key = dims.map((name) => at[name]).join(",");
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(i);
  });
  return [...groups.values()];
}

// Above each rank: its block of X, the d columns with its own filled, in its dp row's shade.
const blockText = (dev) => `X[${dev.start}:${dev.stop}, ${dev.columns[0]}:${dev.columns[1]}]`;

function drawTop(ctx) {
  const { pic } = ctx;
  if (!(pic.features > 0)) return;
  ctx.layout.boxes.forEach((box, i) => {
    if (box.device.busy && box.device.columns) {
      drawColumns(ctx, box, deviceColour(coordsOf(pic, i).dp || 0), blockText(box.device));
    }
  });
}

// "rank 2 · dp 1, tp 0": where the rank sits on the mesh, on its title line.
function boxName(pic, box, room) {
  const at = coordsOf(pic, box.index);
  const where = ((pic.mesh && pic.mesh.dims) || []).map((d) => `${d[0]} ${at[d[0]]}`).join(", ");
  const name = `rank ${box.index} · ${where}`;
  return textWidth(name, 15, 700) > room ? fitText(`r${box.index} · ${where}`, room, 15, 700) : name;
}

// Arcs between the members of each group, there and back (a ring of two is a swap): under the boxes for
// neighbours (a tp group), along the bottom row for a dp group, one lane a group.
function groupArcs(ctx, groups, name, { live, low }) {
  const { layout } = ctx;
  const yBox = layout.boxY + layout.boxH;
  groups.forEach((members, g) => {
    const boxes = members.map((i) => layout.boxes[i]).filter((b) => b.device.busy);
    if (boxes.length < 2) return;
    // a ring: each member to the next, the last back to the first (two members: one arc, both ways)
    const hops = boxes.length === 2 ? [[boxes[0], boxes[1]]] : boxes.map((b, i) => [b, boxes[(i + 1) % boxes.length]]);
    const y = low ? layout.outY + 2 + 6 * g : yBox + 16;
    for (const [a, b] of hops) {
      const [xa, xb] = low ? [a.cx + 6 * g, b.cx + 6 * g] : [a.cx + 10, b.cx - 10];
      const path = low
        ? `M${xa},${yBox + 2} L${xa},${y} L${xb},${y} L${xb},${yBox + 4}`
        : `M${xa},${yBox + 2} C${xa},${y} ${xb},${y} ${xb},${yBox + 4}`;
      const drawn = arrow(ctx, path, name, { live, faint: !live });
      if (hops.length === 1) drawn.setAttribute("marker-start", `url(#fl-arrow-${name})`);
    }
  });
}


function glowAll(ctx, name) {
  for (const box of busyBoxes(ctx)) ctx.boxState[box.index].glow = colours[name];
}

function drawLoad(ctx) {
  const live = ctx.now("load");
  for (const box of busyBoxes(ctx)) {
    const y0 = ctx.layout.barY + ctx.layout.barH;
    arrow(ctx, `M${box.cx},${y0 + 1} L${box.cx},${box.y - 2}`, "load", { live, faint: !live });
    heldChip(ctx.boxState[box.index], box.device.memory, colours.held);
  }
  if (live) glowAll(ctx, "load");
}

function drawForward(ctx) {
  const live = ctx.now("forward");
  for (const box of busyBoxes(ctx)) {
    const summed = ctx.done("tp_allreduce");
    chip(ctx.boxState[box.index], tr(summed ? "live.mesh.chip_sum" : "live.mesh.chip_partial"), colours.forward,
      { fresh: live });
  }
  if (live) glowAll(ctx, "forward");
}

// The caption under the arcs: one rank's bytes, and what they are.
function bytesLine(ctx, key, group, colour) {
  const { layout } = ctx;
  const text = tr(key, { bytes: each(group) });
  label(ctx.layer.front, layout.width / 2, layout.outY + 27, fitText(text, layout.width - 2 * SIDE, 15, 600),
    { size: 15, weight: 600, anchor: "middle", fill: colour, halo: true });
}

function drawTpAllReduce(ctx, group) {
  const live = ctx.now("tp_allreduce");
  groupArcs(ctx, groupsAlong(ctx.pic, "tp"), "tp_allreduce", { live, low: false });
  if (live) {
    glowAll(ctx, "tp_allreduce");
    bytesLine(ctx, "live.mesh.tp_ring", group, colours.tp_allreduce);
  }
}

function drawLoss(ctx) {
  const live = ctx.now("loss");
  for (const box of busyBoxes(ctx)) {
    const loss = box.device.loss;
    ctx.boxState[box.index].note = tr("live.picture.loss", { loss: isNum(loss) ? formatNumber(loss) : "–" });
  }
  if (live) glowAll(ctx, "loss");
}

function drawBackward(ctx) {
  const live = ctx.now("backward");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], tr("live.mesh.chip_grad"), colours.backward, { fresh: live });
  }
  if (live) glowAll(ctx, "backward");
}

function dpCollective(name, captionKey) {
  return (ctx, group) => {
    const live = ctx.now(name);
    groupArcs(ctx, groupsAlong(ctx.pic, "dp"), name, { live, low: true });
    if (live) {
      glowAll(ctx, name);
      bytesLine(ctx, captionKey, group, colours[name]);
    }
  };
}

function drawOptimizer(ctx) {
  const live = ctx.now("optimizer");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], tr("live.mesh.chip_step"), colours.optimizer, { fresh: live });
  }
  if (live) glowAll(ctx, "optimizer");
}

function footer(pic) {
  const dims = ((pic.mesh && pic.mesh.dims) || []).map((d) => `${d[0]}=${d[1]}`).join(" × ");
  return tr("live.mesh.footer", { mesh: dims });
}

export default {
  key: "mesh",
  title: "dp × tp",
  colours,
  names,
  phaseText,
  phases: {
    load: drawLoad, forward: drawForward, tp_allreduce: drawTpAllReduce, loss: drawLoss, backward: drawBackward,
    allreduce: dpCollective("allreduce", "live.mesh.dp_ring"),
    all_gather: dpCollective("all_gather", "live.mesh.gather_ring"),
    reduce_scatter: dpCollective("reduce_scatter", "live.mesh.scatter_ring"),
    optimizer: drawOptimizer,
  },
  drawTop,
  barHeight: (pic, widths) => columnsBarHeight(pic, widths, blockText),
  boxName,
  marksFirst: false,
  showsIds: false,
  footer,
};
