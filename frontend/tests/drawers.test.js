// node --test frontend/tests/: the step picture's drawers, one module per strategy, found by key.
//
// FITCORE_PHASES (set by tests/test_frontend_units.py from fitcore.protocols.registry, and the engine's
// grid of a 2-D mesh, fitcore.kit.live.MESH_DRAWER) is {drawer key: [phase names]}; without it, this file asks
// the registry itself, through the checkout's Python.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { DRAWERS, drawerFor, loadDrawer, onDrawer, registerDrawer } from "../drawers.js";
import { setTexts } from "../words.js";

// the drawers' words in English, as fitcore/core/locales/live.json holds them
// (and each strategy's own live.* keys, from its package's locale.json, as fitcore.core.i18n merges them)
const STRATEGIES = new URL("../../fitcore/strategies/", import.meta.url);
const CATALOG = Object.assign(
  JSON.parse(readFileSync(new URL("../../fitcore/core/locales/live.json", import.meta.url), "utf8")),
  ...readdirSync(STRATEGIES, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => {
    try {
      return JSON.parse(readFileSync(new URL(`${d.name}/locale.json`, STRATEGIES), "utf8"));
    } catch {
      return {};
    }
  }),
);
const ENGLISH = Object.fromEntries(Object.entries(CATALOG).map(([key, entry]) => [key, entry.en]));

const FRONTEND = fileURLToPath(new URL("..", import.meta.url));
function registryPhases() {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  const venv = `${root}.venv/bin/python`;
  const code = "import json, fitcore; from fitcore.kit import live; from fitcore.protocols import registry; "
    + "print(json.dumps({**{s.drawer: list(s.phases()) for s in registry.STRATEGIES.values()}, "
    + "live.MESH_DRAWER: list(live.MESH_PHASES)}))";
  return execFileSync(existsSync(venv) ? venv : "python3", ["-c", code], { cwd: root, encoding: "utf8" });
}
const PHASES = JSON.parse(process.env.FITCORE_PHASES || registryPhases());

test("every strategy's drawer key has a drawer, and each drawer is filed under its own key", () => {
  assert.deepEqual(Object.keys(DRAWERS).sort(), Object.keys(PHASES).sort());
  for (const [key, drawer] of Object.entries(DRAWERS)) {
    assert.equal(drawer.key, key);
    assert.equal(drawerFor({ drawer: key }), drawer);
  }
});

test("each drawer draws, names and colours every phase its strategy records", () => {
  for (const [key, names] of Object.entries(PHASES)) {
    const drawer = DRAWERS[key];
    for (const name of names) {
      assert.equal(typeof drawer.phases[name], "function", `${key}: no drawing for ${name}`);
      assert.equal(typeof drawer.phaseText[name], "function", `${key}: no title for ${name}`);
      assert.match(drawer.colours[name] || "", /^#[0-9a-f]{6}$/, `${key}: no colour for ${name}`);
    }
    assert.equal(typeof drawer.drawTop, "function");
    assert.equal(typeof drawer.footer, "function");
  }
});

test("an unknown key gets the plain drawer: boxes and phase names, no arrows", () => {
  const plain = drawerFor({ drawer: "pipeline" });
  assert.equal(plain.key, "plain");
  assert.deepEqual(plain.phases, {});
  assert.equal(drawerFor(null).key, "plain");
});

test("phase titles come from the strategy's own drawer", () => {
  setTexts(ENGLISH, "en");
  const pic = { first_device: "virtual:0", loss: 158.0693, input_shape: [200, 2], output_shape: [200, 1],
                devices: [{ busy: true }, { busy: true }, { busy: false }] };
  assert.equal(DRAWERS.dataparallel.phaseText.loss(pic), "loss on virtual:0: 158.1");
  assert.equal(DRAWERS.dataparallel.phaseText.scatter(pic),
    "scatter: the batch [200, 2] is cut into 2 chunks, copied from virtual:0");
  assert.equal(DRAWERS.ddp.phaseText.loss(pic), "loss: every rank computes the loss of its own shard");
  assert.equal(DRAWERS.ddp.phaseText.allreduce(pic, { entries: [{ bytes: 24 }] }),
    "all-reduce: gradients averaged around the ring, 24 B sent per rank");
});

test("no module but a strategy's own drawer compares a strategy's name", () => {
  const pattern = /[!=]==?\s*["'](ddp|dataparallel)["']|["'](ddp|dataparallel)["']\s*[!=]==?/;
  for (const file of readdirSync(FRONTEND).filter((f) => f.endsWith(".js"))) {
    const text = readFileSync(FRONTEND + file, "utf8");
    assert.doesNotMatch(text, pattern, `${file} compares a strategy's name`);
  }
});

test("DataParallel's footer: the first device gathers and reduces only when another device is busy", () => {
  setTexts(ENGLISH, "en");
  const dp = DRAWERS.dataparallel;
  const busy = (n) => ({ first_device: "cuda:0", devices: Array.from({ length: 3 }, (_, i) => ({ busy: i < n })) });
  assert.equal(dp.footer(busy(2)), "★ cuda:0 also does: gather, loss, reduce, step");
  assert.equal(dp.footer(busy(1)), "★ cuda:0 does the whole step: forward, loss, backward, step");
});

// a module as a data: address, as the browser would import a strategy's drawer from the page's route
const moduleUrl = (source) => `data:text/javascript,${encodeURIComponent(source)}`;

test("a drawer from outside frontend/ is imported once, filed under its key, and the views draw again", async () => {
  let redrawn = 0;
  const stop = onDrawer(() => { redrawn += 1; });
  try {
    const url = moduleUrl('export default { key: "outside", title: "outside", footer: () => "its own" };');
    assert.equal(drawerFor({ drawer: "outside" }).key, "plain");  // not yet: the plain boxes meanwhile
    await Promise.all([loadDrawer(url, "outside"), loadDrawer(url, "outside")]);  // asked twice, imported once
    assert.equal(redrawn, 1);
    const drawer = drawerFor({ drawer: "outside" });
    assert.equal(drawer.key, "outside");
    assert.equal(drawer.footer(), "its own");
    assert.deepEqual([drawer.phases, drawer.colours, drawer.showsIds], [{}, {}, true]);  // the plain defaults
  } finally {
    stop();
  }
});

test("a drawer from outside never replaces another, and a picture never imports from elsewhere", async () => {
  let redrawn = 0;
  const stop = onDrawer(() => { redrawn += 1; });
  try {
    const builtin = DRAWERS.ddp;
    await loadDrawer(moduleUrl('export default { key: "ddp", title: "impostor" };'), "ddp");
    assert.equal(DRAWERS.ddp, builtin);  // a built-in key stays the built-in's
    await loadDrawer(moduleUrl('export default { key: "other", title: "x" };'), "asked");
    assert.equal(DRAWERS.other, undefined);  // a module whose key is not the one asked for is not filed
    await loadDrawer("data:text/javascript,syntax error(", "broken");  // a module that fails: nothing filed
    assert.equal(DRAWERS.broken, undefined);
    assert.equal(redrawn, 0);
    assert.equal(registerDrawer({ title: "no key" }), false);
    // a picture's address outside the page's own route is not imported at all
    const elsewhere = moduleUrl('export default { key: "elsewhere" };');
    assert.equal(drawerFor({ drawer: "elsewhere", drawer_url: elsewhere }).key, "plain");
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(DRAWERS.elsewhere, undefined);
  } finally {
    stop();
  }
});

test("a chip wider than its box takes as many lines as it needs, Chinese broken between characters", async () => {
  const { chipLines } = await import("../picture.js");
  // 14 px a CJK character, 8 px any other: the box's room for a chip's text is `room` - 12
  const width = (text) => [...text].reduce((w, ch) => w + (/[\u2e80-\u9fff]/.test(ch) ? 14 : 8), 0);
  assert.deepEqual(chipLines("56 B held", 200, width), ["56 B held"]);  // it fits: one line
  assert.deepEqual(chipLines("56 B held", 60, width), ["56 B", "held"]);  // at its last space
  // FSDP's "holds nothing" in zh in one of eight boxes (78 px): no space to break at, so between characters
  const lines = chipLines("什么也不持有", 78, width);
  assert.deepEqual(lines, ["什么也不", "持有"]);
  assert.ok(lines.every((line) => width(line) + 12 <= 78));
  assert.equal(lines.join(""), "什么也不持有");  // nothing lost, nothing added
  // a mix: the last space first, then the characters where a line is still too wide
  const mixed = chipLines("占用 持有全部参数和梯度", 90, width);
  assert.ok(mixed.length >= 2 && mixed.every((line) => width(line) + 12 <= 90), mixed.join("|"));
  assert.equal(mixed.join("").replace(/\s/g, ""), "占用持有全部参数和梯度");
  // a Latin word wider than the box keeps its line: it is not cut inside
  assert.deepEqual(chipLines("reduce_scatter", 60, width), ["reduce_scatter"]);
  // a number keeps its unit: "占用 40 B" breaks before the amount, not inside it (the presenter's eight boxes)
  assert.deepEqual(chipLines("占用 40 B", 70, width), ["占用", "40 B"]);
  assert.deepEqual(chipLines("40 B held", 60, width), ["40 B", "held"]);
  assert.deepEqual(chipLines("1 padding", 60, width), ["1", "padding"]);  // a count is no amount: it may break
  assert.ok(chipLines("占用 1.6 kB 的参数和梯度", 90, width).some((line) => line.includes("1.6 kB")));
  // English too long for two lines split at its last space (the pipeline's footer at 1400 px): each line
  // fits, broken at spaces, never inside an amount
  const footer = "Blocks as they ran; hatched: idle (the bubble); F forward, B backward · 400 B to the next stage";
  const wrapped = chipLines(footer, 400, width);
  assert.ok(wrapped.length >= 2 && wrapped.every((line) => width(line) + 12 <= 400), wrapped.join("|"));
  assert.equal(wrapped.join(" "), footer);
  assert.ok(wrapped.some((line) => line.includes("400 B")));
});
