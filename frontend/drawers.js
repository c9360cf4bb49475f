// The step picture's drawers, one module per strategy, by the key the payload's picture.drawer carries
// (each strategy's record names its drawer). The built-in strategies' drawers are imported here; a strategy
// from outside frontend/ (an installed package's, or the tests' own) ships its drawer as a module of its
// own, which the server serves at picture.drawer_url: the first picture that names it imports it, files it
// here (registerDrawer) and tells the views that asked (onDrawer) to draw again.

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

// A key this page has no drawer for (yet) still gets its boxes, rows and phases' names, without arrows.
const PLAIN = {
  key: "plain", title: "", colours: {}, phaseText: {}, phases: {},  // the footer says "this strategy"
  marksFirst: false, showsIds: true, footer: () => "",
};

const loading = new Map();  // a drawer's address -> its import, asked once per page
const listeners = new Set();  // views to draw again once a drawer arrives

// File a drawer under its key; a built-in key is not replaced (a module from outside adds, never overrides).
export function registerDrawer(drawer) {
  if (!drawer || typeof drawer.key !== "string" || !drawer.key || DRAWERS[drawer.key]) return false;
  DRAWERS[drawer.key] = { ...PLAIN, ...drawer };
  return true;
}

// Call `redraw` whenever a drawer from outside arrives; returns what stops it (a view that goes away).
export function onDrawer(redraw) {
  listeners.add(redraw);
  return () => listeners.delete(redraw);
}

export function loadDrawer(url, key) {
  if (loading.has(url)) return loading.get(url);
  const done = import(url)
    .then((module) => {
      const drawer = module.default;
      if (drawer && drawer.key === key && registerDrawer(drawer)) listeners.forEach((redraw) => redraw());
    })
    .catch(() => {});  // a drawer that cannot be had: the plain boxes stay, as for any unknown key
  loading.set(url, done);
  return done;
}

export function drawerFor(pic) {
  if (!pic) return PLAIN;
  const known = DRAWERS[pic.drawer];
  if (known) return known;
  // only the server's own address for it: a picture never makes the page import from elsewhere
  if (typeof pic.drawer_url === "string" && pic.drawer_url.startsWith("/fitcore/static/drawers/")) {
    loadDrawer(pic.drawer_url, pic.drawer);
  }
  return PLAIN;
}
