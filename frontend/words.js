// The live view's words (its i18n): fitcore/core/locales/live.json in the page's language, handed over by
// app.py as data.texts ({key: text}, from fitcore.core.i18n.browser_texts("live.")) with data.lang ("en"|"zh").
// Numbers and names go in as {fields}, so each language keeps its own word order.
//
// A key this page was not given shows as the key itself ("live.box.idle"): a text that bypasses the catalog
// or a key never written is seen on the page and fails frontend/tests/words.test.js, never silently English.

let texts = {};
let lang = "en";

// Once per mount (every script rerun brings the texts again; a language switch reruns the script).
export function setTexts(newTexts, newLang) {
  texts = newTexts && typeof newTexts === "object" ? newTexts : {};
  lang = newLang === "zh" ? "zh" : "en";
}

export function currentLang() {
  return lang;
}

export function fill(text, fields) {
  if (!fields) return text;
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in fields ? String(fields[name]) : whole));
}

export function tr(key, fields) {
  const text = texts[key];
  return typeof text === "string" ? fill(text, fields) : key;
}

// A count with its noun: `key.one` for 1 and `key.other` otherwise ("1 row", "3 rows", "3 行").
export function trCount(key, n, fields) {
  return tr(`${key}.${n === 1 ? "one" : "other"}`, { n, ...fields });
}
