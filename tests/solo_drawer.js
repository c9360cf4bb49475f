// The drawer of tests/solo_strategy.py, a strategy from outside frontend/: its record names this file
// (drawer_file), the page serves it at /fitcore/static/drawers/solo.js, and frontend/drawers.js imports it
// the first time a picture names the key "solo". Its imports are the live view's own modules, one folder up.
//
// One device does the whole step: its box says so, and the footer names the drawer, so that a test reads
// which drawer drew the picture.

import { busyBoxes, chip } from "../picture.js";

const colours = { step: "#2f9e44" };

function drawWhole(ctx) {
  for (const box of busyBoxes(ctx)) {
    chip(ctx.boxState[box.index], "solo: the whole step on one device", colours.step, { fresh: true });
  }
}

export default {
  key: "solo",
  title: "solo",
  colours,
  names: {},
  phaseText: {},
  phases: {},
  whole: drawWhole,
  marksFirst: false,
  showsIds: true,
  footer: () => "solo's own drawer (tests/solo_drawer.js)",
};
