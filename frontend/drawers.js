// The step picture's drawers, one module per strategy, by the key the payload's picture.drawer carries
// (each strategy's package in fitcore/strategies/ names its drawer). A new strategy adds its drawer file
// and its import here.

import dataparallel from "./draw_dataparallel.js";
import ddp from "./draw_ddp.js";
import fsdp from "./draw_fsdp.js";
import mesh from "./draw_mesh.js";
import pp from "./draw_pp.js";
import tp from "./draw_tp.js";

export const DRAWERS = {
  [dataparallel.key]: dataparallel,
  [ddp.key]: ddp,
  [fsdp.key]: fsdp,
  [tp.key]: tp,
  [pp.key]: pp,
  [mesh.key]: mesh,  // not a strategy's: the engine's grid of a 2-D mesh, whatever runs its dp dimension
};

// A key this page has no drawer for still gets its boxes, rows and phases' names, without arrows.
const PLAIN = {
  key: "plain", title: "", colours: {}, phaseText: {}, phases: {},  // the footer says "this strategy"
  marksFirst: false, showsIds: true, footer: () => "",
};

export function drawerFor(pic) {
  return (pic && DRAWERS[pic.drawer]) || PLAIN;
}
