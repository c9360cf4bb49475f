// node --test frontend/tests/: a student's page after the reveal says whether its answer was right, and the
// box shows it by its kind (mark, words, border), not by colour alone.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { revealKind, revealText } from "../follow.js";
import { setTexts } from "../words.js";

const LIVE_JSON = fileURLToPath(new URL("../../fitcore/core/locales/live.json", import.meta.url));
const LIVE = JSON.parse(readFileSync(LIVE_JSON, "utf8"));
setTexts(Object.fromEntries(Object.entries(LIVE).map(([k, v]) => [k, v.en])), "en");

const QUESTION = { choices: ["2", "3", "4"], answer: 1, why: "torch.chunk: ceil(5 / 2) = 3.", revealed: true };

test("before the reveal there is nothing to say", () => {
  assert.equal(revealKind({ ...QUESTION, revealed: false, mine: 1 }), "");
  assert.equal(revealText({ ...QUESTION, revealed: false, mine: 1 }), "");
  assert.equal(revealKind(null), "");
});

test("right, wrong and not answered each have their kind and their words", () => {
  assert.equal(revealKind({ ...QUESTION, mine: 1 }), "right");
  assert.equal(revealText({ ...QUESTION, mine: 1 }), "✓ Right. torch.chunk: ceil(5 / 2) = 3.");
  assert.equal(revealKind({ ...QUESTION, mine: 2 }), "wrong");
  assert.equal(revealText({ ...QUESTION, mine: 2 }), "✗ The answer: 3. torch.chunk: ceil(5 / 2) = 3.");
  assert.equal(revealKind({ ...QUESTION, mine: null }), "none");
  assert.equal(revealText({ ...QUESTION, mine: null }), "The answer: 3. torch.chunk: ceil(5 / 2) = 3.");
});

test("each kind has its own style, and they differ in more than colour", () => {
  const css = readFileSync(fileURLToPath(new URL("../live.css", import.meta.url)), "utf8");
  const rule = (kind) => css.match(new RegExp(`\\.fl-answer-${kind} \\{([^}]*)\\}`))[1];
  const borders = ["right", "wrong", "none"].map((kind) => rule(kind).match(/border: ([^;]*);/)[1]);
  assert.equal(new Set(borders.map((b) => b.split(" ").slice(0, 2).join(" "))).size, 3);  // width and style
});
