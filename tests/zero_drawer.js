// The drawer of tests/zero_strategy.py, a ranked strategy from outside frontend/ (served by the page at
// /fitcore/static/drawers/zero_ddp.js): each rank's own rows, its all-reduce inside backward, then the
// optimizer, where each rank steps only the parameters it owns and broadcasts them. Its imports are the live
// view's own modules, one folder up.

import { busyBoxes, chip, ringArrows } from "../picture.js";

const colours = {
  load: "#1f6feb", forward: "#2f9e44", loss: "#e8590c", backward: "#ae3ec9", optimizer: "#343a40",
};

function each(ctx, text, colour, live) {
  for (const box of busyBoxes(ctx)) chip(ctx.boxState[box.index], text, colour, { fresh: live });
}

export default {
  key: "zero_ddp",
  title: "ZeRO-1",
  colours,
  names: {},
  phaseText: {
    optimizer: () => "optimizer: each rank steps the parameters it owns, then broadcasts them",
  },
  phases: {
    load: (ctx) => each(ctx, "its own rows", colours.load, ctx.now("load")),
    forward: (ctx) => each(ctx, "forward", colours.forward, ctx.now("forward")),
    loss: (ctx) => each(ctx, "loss", colours.loss, ctx.now("loss")),
    backward: (ctx) => {
      each(ctx, "∇ all-reduced", colours.backward, ctx.now("backward"));
      if (ctx.now("backward")) ringArrows(ctx, busyBoxes(ctx), "backward", { live: true });
    },
    optimizer: (ctx) => each(ctx, "steps its own, broadcasts", colours.optimizer, ctx.now("optimizer")),
  },
  marksFirst: false,
  showsIds: true,
  footer: () => "ZeRO-1's own drawer (tests/zero_drawer.js)",
};
