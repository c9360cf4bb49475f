// FSDP's step picture: each rank reads its own rows as DDP's do, but holds only its shard of W and b. The
// all-gather puts the whole model on every rank for the step, forward and backward run on it (ZeRO-3
// gathers again for backward, having freed it after forward), the reduce-scatter leaves each rank the
// averaged gradient of its own shard, and each rank's optimizer steps that shard alone. Forward and the loss
// are drawn as DDP's ranks draw them: each rank on its own rows.

import { fitText, label } from "./dom.js";
import { formatBytes, isNum } from "./format.js";
import { tr } from "./words.js";
import { SIDE, arrow, busyBoxes, chip, heldChip, phaseName, ringArrows } from "./picture.js";
import ranks from "./draw_ddp.js";

const colours = {
  load: "#1f6feb", all_gather: "#0c8599", forward: "#2f9e44", loss: "#e8590c", backward: "#c92a2a",
  reduce_scatter: "#ae3ec9", optimizer: "#343a40",
  shard: "#7048e8",  // the chip of the rows of W and b a rank holds
  padded: "#868e96", held: "#495057",
};

const gathered = (g) => (g.entries[0] ? g.entries[0].bytes : 0);  // one collective's bytes, per rank
// what a rank sends each time, and the phase's bytes in all (ZeRO-3's two all-gathers are one phase): the
// number the bytes list under the timeline shows
const sent = (g) => ({ bytes: formatBytes(gathered(g)), total: formatBytes(g.bytes) });

const phaseText = {
  load: () => tr("live.fsdp.load"),
  all_gather: (p, g) => tr("live.fsdp.all_gather", sent(g)),
  forward: () => tr("live.fsdp.forward"),
  loss: () => tr("live.fsdp.loss"),
  backward: (p) => tr(p.zero === 2 ? "live.fsdp.backward_zero2" : "live.fsdp.backward_zero3"),
  reduce_scatter: (p, g) => tr("live.fsdp.reduce_scatter", sent(g)),
  optimizer: () => tr("live.fsdp.optimizer"),
};

// The pills' and the timeline's names: the collectives' too, as a teacher says them (torch's names have "_")
const names = {
  load: "live.phase.load", all_gather: "live.phase.all_gather", forward: "live.phase.forward",
  loss: "live.phase.loss", backward: "live.phase.backward", reduce_scatter: "live.phase.reduce_scatter",
  optimizer: "live.phase.optimizer",
};

function own(box) {
  const shard = box.device.shard;
  return shard && shard.names && shard.names.length ? shard.names.join(", ") : "";
}

// What a rank holds between steps: its shard of W and b (with the values after the step where the run has
// them), its bytes as it measured them, and DDP's padding rows.
function drawLoad(ctx) {
  const live = ctx.now("load");
  for (const box of busyBoxes(ctx)) {
    const y0 = ctx.layout.barY + ctx.layout.barH;
    arrow(ctx, `M${box.cx},${y0 + 1} L${box.cx},${box.y - 2}`, "load", { live, faint: !live });
    if (live) ctx.boxState[box.index].glow = colours.load;
    const mine = own(box);
    chip(ctx.boxState[box.index], mine ? tr("live.fsdp.chip_shard", { names: mine }) : tr("live.fsdp.chip_nothing"),
      colours.shard);
    heldChip(ctx.boxState[box.index], box.device.memory, colours.held);
    const padded = box.device.padded;
    if (isNum(padded) && padded > 0) {
      chip(ctx.boxState[box.index], tr("live.picture.chip_padded", { n: padded }), colours.padded);
    }
  }
}

// The ring of a collective: rank i to rank i+1, the last back to rank 0 along the bottom, its bytes below.
// `live`: while the collective runs (ZeRO-3's second all-gather runs inside backward).
function ring(ctx, name, group, live) {
  const boxes = busyBoxes(ctx);
  const { layout } = ctx;
  if (boxes.length < 2) {
    if (live) label(ctx.layer.front, SIDE, layout.outY + 20, tr("live.fsdp.one_rank"),
      { size: 15, weight: 600, fill: colours[name] });
    return;
  }
  if (!live) return;  // two collectives share the ring: only the current one draws it
  const text = tr("live.fsdp.ring", { name: phaseName(fsdp, name), bytes: formatBytes(gathered(group)) });
  // each hop dips half as deep as the way back runs, so that the two stay apart on two ranks
  const { yBack, midX } = ringArrows(ctx, boxes, name, { live, depth: 16 });
  for (const box of boxes) ctx.boxState[box.index].glow = colours[name];
  label(ctx.layer.front, midX, yBack + 20, fitText(text, layout.width - 40, 15, 600),
    { size: 15, weight: 600, anchor: "middle", fill: colours[name], halo: true });
}

// Whether a rank holds the whole W right now: from the all-gather until it is freed, after forward under
// ZeRO-3 (until backward gathers it again) and after backward under both.
function wholeHeld(ctx) {
  if (!ctx.seen("all_gather")) return false;
  if (ctx.pic.zero !== 2 && ctx.done("forward") && !ctx.seen("backward")) return false;
  return !ctx.done("backward") || ctx.now("reduce_scatter");
}

function drawAllGather(ctx, group) {
  const live = ctx.now("all_gather") || (ctx.pic.zero !== 2 && ctx.now("backward"));
  for (const box of busyBoxes(ctx)) {
    const held = wholeHeld(ctx);
    chip(ctx.boxState[box.index], tr(held ? "live.fsdp.chip_full" : "live.fsdp.chip_freed"), colours.all_gather,
      { fresh: live && held, faded: !held });
  }
  ring(ctx, "all_gather", group, live);
}

function drawBackward(ctx) {
  const live = ctx.now("backward");
  for (const box of busyBoxes(ctx)) {
    const scattered = ctx.done("reduce_scatter");
    const text = scattered ? tr("live.fsdp.chip_grad_own", { names: own(box) || "–" }) : tr("live.fsdp.chip_grad_full");
    chip(ctx.boxState[box.index], text, colours.backward, { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.backward;
  }
}

function drawReduceScatter(ctx, group) {
  ring(ctx, "reduce_scatter", group, ctx.now("reduce_scatter"));
}

function drawOptimizer(ctx) {
  const live = ctx.now("optimizer");
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], tr("live.fsdp.chip_step", { names: own(box) || "–" }), colours.optimizer,
      { fresh: live });
    if (live) ctx.boxState[box.index].glow = colours.optimizer;
  }
}

const fsdp = {
  key: "fsdp",
  title: "FSDP",
  colours,
  names,
  phaseText,
  phases: {
    load: drawLoad, all_gather: drawAllGather, forward: ranks.phases.forward, loss: ranks.phases.loss,
    backward: drawBackward,
    reduce_scatter: drawReduceScatter, optimizer: drawOptimizer,
  },
  drawTop: ranks.drawTop,
  boxName: ranks.boxName,
  marksFirst: false,
  showsIds: false,
  footer: (pic) => tr("live.fsdp.footer", { zero: pic.zero === 2 ? 2 : 3 }),
};

export default fsdp;
