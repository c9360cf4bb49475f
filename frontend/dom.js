// Building blocks of the live view's DOM and SVG: elements, text fitted to a width, the palette.

// One colour per device (and per chart line), told apart by a colour-blind student too: under a simulation of
// protanopia, deuteranopia and tritanopia (Machado et al. 2009) every two stay at least 20 CIELAB units apart,
// and each is 3:1 against white, as a stroke must be (tests/test_palette.py). Blue first: device 0.
export const COLOURS = ["#1f6feb", "#cc79a7", "#882255", "#117733", "#999933", "#000000", "#ee6677", "#332288"];
export const FONT = '"Source Sans", "Source Sans Pro", "Liberation Sans", "Helvetica Neue", Arial, sans-serif';
const SVG_NS = "http://www.w3.org/2000/svg";

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

let measureContext = null;
// Text widths from the same font the SVG uses, so labels are fitted, not guessed.
export function textWidth(text, size = 15, weight = 400) {
  if (!measureContext) measureContext = document.createElement("canvas").getContext("2d");
  measureContext.font = `${weight} ${size}px ${FONT}`;
  return measureContext.measureText(text).width;
}

// The longest prefix of `items` (joined by ", ") that fits, with "…" when some are left out.
export function fitList(items, maxWidth, size = 15, tail = "") {
  for (let n = items.length; n >= 1; n--) {
    const text = items.slice(0, n).join(", ") + (n < items.length ? " …" : "") + tail;
    if (textWidth(text, size) <= maxWidth) return text;
  }
  return "";
}

export function fitText(text, maxWidth, size = 15, weight = 400) {
  if (textWidth(text, size, weight) <= maxWidth) return text;
  for (let n = text.length - 1; n > 0; n--) {
    const cut = text.slice(0, n).trimEnd() + "…";
    if (textWidth(cut, size, weight) <= maxWidth) return cut;
  }
  return "";
}

export function label(parent, x, y, text, { size = 15, weight = 400, anchor = "start", fill = "#111418",
                                             cls, halo } = {}) {
  const node = svgEl("text", { x, y, "font-size": size, "font-weight": weight, "text-anchor": anchor,
                               fill, class: [cls, halo ? "fl-halo" : ""].filter(Boolean).join(" ") },
  text);
  parent.append(node);
  return node;
}

// the live view's padding and border under its last row (live.css .fl-root: 4 + 3 px): what the first
// screen keeps below the charts, or below the timeline in their place
export const VIEW_BOTTOM = 7;

// an element's parent, across the shadow root's edge to its host
const parentOf = (node) => node.parentElement || (node.parentNode && node.parentNode.host) || null;

// How far below the top of the page the element sits when the page is scrolled to its top: its place on
// the screen plus what every scrolled box above it (Streamlit's main column, the window) has scrolled by.
export function topOnPage(element) {
  let top = element.getBoundingClientRect().top + window.scrollY;
  for (let box = parentOf(element); box; box = parentOf(box)) top += box.scrollTop || 0;
  return top;
}
