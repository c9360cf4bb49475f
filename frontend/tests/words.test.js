// node --test frontend/tests/: the live view's words. tr() and trCount() from frontend/words.js, and the
// catalog fitcore/core/locales/live.json against the modules: every key a module names is in the catalog (in
// both languages), every live.* key of the catalog is used, and the phase titles fill all their fields.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { DRAWERS } from "../drawers.js";
import { currentLang, fill, setTexts, tr, trCount } from "../words.js";
import { phaseName } from "../picture.js";
import { phaseTitle } from "../step_view.js";

const FRONTEND = fileURLToPath(new URL("..", import.meta.url));
const FITCORE = fileURLToPath(new URL("../../fitcore/", import.meta.url));
// live.json, and the live.* keys of each strategy's own locale.json (fitcore.core.i18n merges them the same way)
const CATALOG = Object.assign(
  JSON.parse(readFileSync(`${FITCORE}core/locales/live.json`, "utf8")),
  ...readdirSync(`${FITCORE}strategies`, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== "__pycache__")
    .map((d) => {
      let own = {};
      try { own = JSON.parse(readFileSync(`${FITCORE}strategies/${d.name}/locale.json`, "utf8")); } catch { own = {}; }
      return Object.fromEntries(Object.entries(own).filter(([key]) => key.startsWith("live.")));
    }),
);
const KEY = /["'](live\.[a-z0-9_.]+)["']/g;
const HAN = /[\u4e00-\u9fff]/;

function texts(lang) {
  return Object.fromEntries(Object.entries(CATALOG).map(([key, entry]) => [key, entry[lang]]));
}

function modules() {
  return readdirSync(FRONTEND).filter((f) => f.endsWith(".js"))
    .map((f) => ({ file: f, text: readFileSync(FRONTEND + f, "utf8") }));
}

// fitcore's Python files (fitcore/kit/live.py names live.* keys too), through its packages.
function pythonFiles(dir = FITCORE) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    if (d.isDirectory()) return d.name === "__pycache__" ? [] : pythonFiles(`${dir}${d.name}/`);
    return d.name.endsWith(".py") ? [readFileSync(dir + d.name, "utf8")] : [];
  });
}

test("tr fills {fields}, keeps a field it was not given, and shows a missing key as the key", () => {
  setTexts({ "live.a": "step {step} of {total}", "live.b": "no fields" }, "zh");
  assert.equal(currentLang(), "zh");
  assert.equal(tr("live.a", { step: 3, total: 40 }), "step 3 of 40");
  assert.equal(tr("live.a", { step: 0 }), "step 0 of {total}");
  assert.equal(tr("live.b"), "no fields");
  assert.equal(tr("live.never.written", { n: 1 }), "live.never.written");
  assert.equal(fill("{x}{x} %{y}", { x: "a", y: "b" }), "aa %b");
  setTexts(null, "fr");  // a page without texts: every word shows as its key, and the language is English
  assert.equal(currentLang(), "en");
  assert.equal(tr("live.b"), "live.b");
});

test("trCount picks the .one or .other text: English has plurals, Chinese has none", () => {
  setTexts(texts("en"), "en");
  assert.deepEqual([0, 1, 2].map((n) => trCount("live.count.rows", n)), ["0 rows", "1 row", "2 rows"]);
  setTexts(texts("zh"), "zh");
  assert.deepEqual([0, 1, 2].map((n) => trCount("live.count.rows", n)), ["0 行", "1 行", "2 行"]);
});

test("every key the modules name is in live.json, in both languages, and none is built at run time", () => {
  let named = 0;
  for (const { file, text } of modules()) {
    // a key made of pieces (`live.${name}`) could not be checked here
    assert.doesNotMatch(text, /`live\./, `${file} builds a key at run time`);
    for (const [, key] of text.matchAll(KEY)) {
      named += 1;
      const entries = key in CATALOG ? [CATALOG[key]] : [CATALOG[`${key}.one`], CATALOG[`${key}.other`]];
      for (const entry of entries) {
        assert.ok(entry, `${file}: ${key} is not in fitcore/core/locales/live.json`);
        assert.ok(entry.en && entry.zh, `${file}: ${key} lacks a language`);
      }
    }
  }
  assert.ok(named >= 60, `only ${named} keys found: the scan is broken`);
});

test("every live.* key in live.json is used by a module or by fitcore", () => {
  const sources = modules().map((m) => m.text).concat(pythonFiles()).join("\n");
  const used = new Set([...sources.matchAll(KEY)].map((m) => m[1]));
  const base = (key) => key.replace(/\.(one|other)$/, "");  // trCount("live.count.rows") uses both
  const unused = Object.keys(CATALOG).filter((key) => !used.has(key) && !used.has(base(key)));
  assert.deepEqual(unused, []);
  assert.ok(Object.keys(CATALOG).every((key) => key.startsWith("live.")), "a key without the live. prefix");
});

const PIC = {
  step: 12, epoch: 3, batch: 2, loss: 0.01234, first_device: "virtual:0", input_shape: [200, 2],
  output_shape: [200, 1], devices: [{ busy: true }, { busy: true }, { busy: false }],
};
const GROUP = { name: "allreduce", entries: [{ bytes: 24 }], bytes: 24 };

test("each phase title fills every field in both languages, and the Chinese ones are Chinese", () => {
  for (const lang of ["en", "zh"]) {
    setTexts(texts(lang), lang);
    for (const [key, drawer] of Object.entries(DRAWERS)) {
      for (const [name, describe] of Object.entries(drawer.phaseText)) {
        const title = describe(PIC, GROUP);
        assert.doesNotMatch(title, /[{}]|live\./, `${lang} ${key}.${name}: ${title}`);
        if (lang === "zh") assert.match(title, HAN, `${key}.${name}: ${title}`);
      }
      assert.doesNotMatch(drawer.footer(PIC), /[{}]|live\./);
    }
  }
});

test("the step's title and the phases' names in English are today's, and in Chinese", () => {
  setTexts(texts("en"), "en");
  const groups = [{ name: "scatter" }, { name: "loss" }];
  assert.equal(phaseTitle(PIC, groups, { done: true }, DRAWERS.dataparallel),
    "Step 12: all 2 phases done · loss 0.01234");
  assert.equal(phaseTitle(PIC, [], { done: true }, DRAWERS.dataparallel), "Step 12 · loss 0.01234");
  assert.equal(phaseName(DRAWERS.dataparallel, "loss"), "loss");
  assert.equal(phaseName(DRAWERS.fsdp, "all_gather"), "all-gather");
  assert.equal(phaseName(DRAWERS.fsdp, "reduce_scatter"), "reduce-scatter");
  setTexts(texts("zh"), "zh");
  assert.equal(phaseTitle(PIC, groups, { done: true }, DRAWERS.dataparallel),
    "第 12 步：2 个阶段全部完成 · 损失 0.01234");
  assert.equal(phaseName(DRAWERS.ddp, "backward"), "反向传播");
  assert.equal(phaseName(DRAWERS.dataparallel, "scatter"), "scatter");  // torch's names stay as they are
  assert.equal(phaseName(DRAWERS.fsdp, "all_gather"), "全收集（all-gather）");  // the collectives: the words
  assert.equal(phaseName(DRAWERS.fsdp, "reduce_scatter"), "归约分散（reduce-scatter）");
  assert.equal(phaseTitle(PIC, groups, { index: 0, done: false }, DRAWERS.dataparallel),
    "scatter（分发）：批 [200, 2] 切成 2 块，从 virtual:0 复制出去");
});

test("FSDP's collectives' titles: what a rank sends each time, and the phase's bytes as the bytes list sums them", () => {
  // ZeRO-3 on 2 ranks: two all-gathers of 12 B a rank, one pill; the reduce-scatter once
  const gather = { name: "all_gather", entries: [12, 12, 12, 12].map((bytes) => ({ bytes })), bytes: 48 };
  const scatter = { name: "reduce_scatter", entries: [12, 12].map((bytes) => ({ bytes })), bytes: 24 };
  setTexts(texts("en"), "en");
  assert.match(DRAWERS.fsdp.phaseText.all_gather({ zero: 3 }, gather), /sends 12 B each time, 48 B in all$/);
  assert.match(DRAWERS.fsdp.phaseText.reduce_scatter({ zero: 3 }, scatter), /sends 12 B, 24 B in all$/);
  setTexts(texts("zh"), "zh");
  assert.match(DRAWERS.fsdp.phaseText.all_gather({ zero: 3 }, gather), /每次发送 12 B，共 48 B$/);
});
