"""The step picture legible from the back row: at 2, 3 and 8 devices, DDP on 3 ranks and FSDP on 2 and 3 ranks
(ZeRO-3, and ZeRO-2 on 2), in en and zh, at 1280x720, in every phase of the walk, nothing overlaps, no text
sits on an arrow, nothing is cut, no chip's words run into its pill's ends, no text is under 14 px (16 px in
presenter mode), and every chip the 2-device picture draws is drawn; FSDP's ranks wear the chips of what each
holds at each phase.

Cheap on purpose: frontend/preview.py's fake run (no Streamlit, no model trained), one server, one browser and
one page for every case; each case walks its held step with ▶ and measures each phase in the page. Screenshots
go to artifacts/picture-*.png. Fails, does not skip, without Chromium or Playwright (tests/test_browser.py).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmarks.browser import chromium, free_port
from fitcore.core.i18n import t
from tests.helpers import require_browser
from tests.test_browser import ARTIFACTS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The live view's width in the page at 1280x720 with the sidebar open (the main column, less its padding)
WIDTH = 800

# In the page: every text of the picture and the live view's HTML, measured as drawn.
MEASURE = """() => {
  const root = document.getElementById("host").shadowRoot;
  const zoomOf = (node) => node.currentCSSZoom || 1;
  const texts = [...root.querySelectorAll(".fl-svg text")].filter((t) => t.textContent.trim());
  const boxes = texts.map((t) => {
    const r = t.getBoundingClientRect();
    return { text: t.textContent, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom,
             px: parseFloat(getComputedStyle(t).fontSize) * zoomOf(t) };
  });
  // text boxes include the font's ascent and descent: two lines touch, they do not overlap, within 2 px
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      const w = Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0);
      const h = Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0);
      if (w > 2 && h > 2) overlaps.push([a.text, b.text]);
    }
  }
  const html = [...root.querySelectorAll(".fl-root *")].filter((e) =>
    !(e instanceof SVGElement) && !e.closest(".fl-plot") && e.textContent.trim());
  const cut = html
    .filter((e) => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== "visible")
    .map((e) => `${e.className}: ${e.textContent.slice(0, 60)}`);
  const small = [...boxes.filter((b) => b.px < 13.95).map((b) => `${b.text} ${b.px}px`),
    ...html.filter((e) => !e.children.length && parseFloat(getComputedStyle(e).fontSize) * zoomOf(e) < 13.95)
      .map((e) => `${e.className}: ${e.textContent.slice(0, 30)} ${getComputedStyle(e).fontSize}`)];
  const minPx = Math.min(...boxes.map((b) => b.px));
  // text on an arrow: points 2 px apart along every arrow drawn now (the phase's own and the solid ones; an
  // earlier phase's faint ones stay behind) that fall inside a text's box, less its ascent and descent (3 px
  // each side), in the picture's own units; two or more points, not a graze
  const svg = root.querySelector(".fl-svg");
  const arrows = [...svg.querySelectorAll("path")].filter((p) =>
    !p.closest("defs") && !p.classList.contains("fl-faint"));
  const inks = texts.map((t) => {
    const b = t.getBBox();
    return { text: t.textContent, x0: b.x, x1: b.x + b.width, y0: b.y + 3, y1: b.y + b.height - 3 };
  });
  const onArrows = [];
  for (const path of arrows) {
    const length = path.getTotalLength();
    const points = Array.from({ length: Math.floor(length / 2) + 1 }, (_, i) => path.getPointAtLength(i * 2));
    for (const ink of inks) {
      const inside = points.filter((p) => p.x > ink.x0 && p.x < ink.x1 && p.y > ink.y0 && p.y < ink.y1);
      if (inside.length >= 2) onArrows.push(`${ink.text} on ${path.getAttribute("d")}`);
    }
  }
  // the chips and the ids line of each device box, in the boxes' order
  const devices = [...root.querySelectorAll(".fl-svg .fl-box")].map((g) => ({
    chips: [...g.querySelectorAll(".fl-chip")].map((c) => c.getAttribute("data-chip")),
    ids: [...g.querySelectorAll(".fl-ids")].map((c) => c.textContent).join(" "),
  }));
  // a chip's words inside its pill with most of the 6 px on each side: where the canvas measured them shorter
  // than the SVG draws them, they run into the pill's end
  const tight = [...svg.querySelectorAll(".fl-chip")].filter((t) => {
    const pill = t.previousElementSibling.getBBox();
    const words = t.getBBox();
    return words.x < pill.x + 3 || words.x + words.width > pill.x + pill.width - 3;
  }).map((t) => t.getAttribute("data-chip"));
  // a text across the cells of X's columns (tensor parallelism's strips): words sit inside one cell, or
  // above the strip, never across cells, which would hide which column is the rank's own
  const cells = [...svg.querySelectorAll(".fl-col")].map((r) => r.getBBox());
  const owns = svg.querySelectorAll(".fl-own").length;
  const across = (a0, a1, b0, b1) => Math.min(a1, b1) - Math.max(a0, b0) > 1;
  const within = (ink, c) => ink.x0 >= c.x - 1 && ink.x1 <= c.x + c.width + 1;
  const meets = (ink, c) =>
    across(ink.x0, ink.x1, c.x, c.x + c.width) && across(ink.y0, ink.y1, c.y, c.y + c.height);
  const overCells = inks.filter((ink) => cells.some((c) => meets(ink, c) && !within(ink, c)))
    .map((ink) => ink.text);
  // a chip's pill past its box's sides (words that could not break, in the narrowest boxes)
  const outside = [...svg.querySelectorAll(".fl-box")].flatMap((g) => {
    const box = g.querySelector("rect").getBBox();
    return [...g.querySelectorAll(".fl-chip")].filter((t) => {
      const pill = t.previousElementSibling.getBBox();
      return pill.x < box.x || pill.x + pill.width > box.x + box.width;
    }).map((t) => t.getAttribute("data-chip"));
  });
  const title = root.querySelector(".fl-phase-title").textContent;
  // the words in the X row's cells (the first row of segments drawn)
  const segs = [...svg.querySelectorAll(".fl-seg")];
  const top = Math.min(...segs.map((e) => e.getBBox().y));
  const xRow = segs.filter((e) => Math.abs(e.getBBox().y - top) < 2).map((e) => e.textContent);
  return { overlaps, onArrows, cut, small, minPx, devices, title, tight, overCells, outside, owns, xRow };
}"""


@pytest.fixture(scope="module")
def preview():
    """frontend/preview.py's server on a free loopback port, in a thread of this process."""
    require_browser()
    spec = importlib.util.spec_from_file_location("fitcore_preview", ROOT / "frontend" / "preview.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), module.Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def page(preview):
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.set_default_timeout(15_000)
        yield page


def walk(page, url: str, name: str) -> list[dict]:
    """The held step's picture measured at each phase of the walk (▶ from the first phase to all done)."""
    page.goto(url)
    page.wait_for_function("window.previewReady === true")
    page.locator(".fl-svg text").first.wait_for()
    n = page.locator(".fl-pill").count()
    assert n in (6, 7, 8), n
    measured = []
    for i in range(n + 1):
        measured.append(page.evaluate(MEASURE))
        if i in (1, n):
            page.screenshot(path=str(ARTIFACTS / f"picture-{name}-{i}.png"))
        page.locator(".fl-btn").nth(2).click()  # ▶: the next phase
    return measured


def chip_kinds(device: dict) -> set[str]:
    """A device's chips by kind: "loss 0.123" and "Σ 8 ∇" stand for their kind, not their number."""
    return {"".join(c for c in chip if not c.isdigit() and c != ".").strip() for chip in device["chips"]}


@pytest.fixture(scope="module")
def two_devices(page, preview) -> dict[str, list[dict]]:
    """What the 2-device picture draws at each phase, per language: the reference the others must match."""
    return {lang: walk(page, f"{preview}/?scenario=dp2held&width={WIDTH}&lang={lang}", f"dp2-{lang}")
            for lang in ("en", "zh")}  # fmt: skip


def walk_legible(page, preview, scenario: str, lang: str, presenter: bool) -> list[dict]:
    """A held step's walk, each phase checked: nothing overlaps, sits on an arrow, is cut or too small."""
    name = f"{scenario}-{lang}" + ("-presenter" if presenter else "")
    url = f"{preview}/?scenario={scenario}&width={WIDTH}&lang={lang}&presenter={int(presenter)}"
    phases = walk(page, url, name)
    least = 16 if presenter else 14
    for i, m in enumerate(phases):
        where = (name, i, m["title"])
        assert m["overlaps"] == [], where
        assert m["onArrows"] == [], where
        assert m["cut"] == [], where
        assert m["tight"] == [], where
        assert m["overCells"] == [], where
        assert m["outside"] == [], where
        assert m["small"] == [] and m["minPx"] >= least - 0.05, (where, m["minPx"], m["small"])
    return phases


@pytest.mark.parametrize("presenter", [False, True])
@pytest.mark.parametrize("scenario", ["dp2held", "dp3held", "dp8held", "ddp3held", "tp2held"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_phase_legible_at_the_projector(page, preview, two_devices, scenario, lang, presenter):
    name = f"{scenario}-{lang}" + ("-presenter" if presenter else "")
    phases = walk_legible(page, preview, scenario, lang, presenter)
    # what each box holds, in bytes, at every phase: W (2) and b, their gradients (3 floats each), and Adam's
    # two moments of 3 numbers and a 4-byte step per tensor on every DDP rank and on DataParallel's device 0
    # only (why GPU 0 fills up); TP's ranks their own rows of W (tests/test_tp.py holds those figures)
    if not scenario.startswith("tp"):
        whole, state = 3 * 4, 2 * 3 * 4 + 2 * 4
        held = [whole * 2 + state] * (len(phases[0]["devices"]))
        if scenario.startswith("dp"):
            held[1:] = [whole * 2] * (len(held) - 1)
        for i, m in enumerate(phases):
            for rank, (device, n) in enumerate(zip(m["devices"], held)):
                shown = t("live.picture.chip_held", lang=lang, bytes=f"{n} B") in device["chips"]
                # DataParallel's replicas exist from the replicate phase (the walk's second) on
                assert shown == (rank == 0 or i >= 1 or not scenario.startswith("dp")), (name, i, device)
    if scenario.startswith("ddp"):
        # 200 rows on 3 ranks: DistributedSampler repeats one row, on the last rank, marked there
        padded = [[c for c in d["chips"] if c.startswith(("1 ", "1\u00a0"))] for d in phases[-1]["devices"]]
        assert [len(p) for p in padded] == [0, 0, 1], (name, phases[-1]["devices"])
        return
    if scenario.startswith("tp"):
        # 4 features on 2 ranks: each rank wears its own rows of W at every phase, and no ids (every row)
        for i, m in enumerate(phases):
            assert [d["chips"][0] for d in m["devices"]] == ["w1, w2", "w3, w4"], (name, i, m["devices"])
        return
    # the replicate and the reduce (the walk's second and seventh phases) say what each replica gets and
    # sends back: W and b, then their gradients, 3 floats, 12 B each (in the title, as the backward's bytes:
    # no words fit between the X row and the boxes, where their arrows run)
    for i, key in ((1, "live.dp.replicate_bytes"), (6, "live.dp.reduce_bytes")):
        assert phases[i]["title"] == t(key, lang=lang, bytes=f"{whole} B", device="virtual:0"), (name, i)
        # and the X row says one kind of thing in every cell: each chunk's first ids, or each one's row count
        counts = [cell.isdigit() for cell in phases[i]["xRow"]]
        assert len(counts) == len(held) and len(set(counts)) == 1, (name, i, phases[i]["xRow"])
    # every chip of the 2-device picture, and the ids, on the first device and on each other one
    reference = two_devices[lang]
    for i, (m, ref) in enumerate(zip(phases, reference)):
        first, other = chip_kinds(ref["devices"][0]), chip_kinds(ref["devices"][1])
        assert chip_kinds(m["devices"][0]) == first, (name, i, m["devices"][0])
        for device in m["devices"][1:]:
            assert chip_kinds(device) == other, (name, i, device)
            assert device["ids"].count(",") >= 1, (name, i, device)  # at least two ids, not one number


# FSDP's ranks with 3 weights (frontend/preview.py's scenarios, as `fitcore --strategy fsdp --weights 5.2 9.6
# -1` runs them): what each rank holds, the bytes it measured (padded shards of W, b and their gradients,
# Adam's two moments of its real rows and a step count each), and DistributedSampler's padding rows
HOLDS = {
    2: [("w1, w2, b", 56, 0), ("w3", 40, 0)],
    3: [("w1, b", 40, 0), ("w2", 32, 0), ("w3", 32, 1)],
}
# Phase by phase (load, all-gather, forward, loss, backward, reduce-scatter, optimizer, all done): whether
# the rank holds the whole W (None: not gathered yet), and which of its gradient and step chips it wears
WHOLE = {
    3: [None, True, True, False, True, True, False, False],  # freed after forward, gathered for backward
    2: [None, True, True, True, True, True, False, False],  # kept from forward until backward ends
}
GRADIENT = [None, None, None, None, "full", "full", "own", "own"]


def fsdp_chips(lang: str, k: int, zero: int, phase: int) -> list[list[str]]:
    """Each rank's chips at a phase of the walk, in the order the drawer adds them, in `lang`'s words."""
    chips = []
    for names, held, padded in HOLDS[k]:
        rank = [
            t("live.fsdp.chip_shard", lang=lang, names=names),
            t("live.picture.chip_held", lang=lang, bytes=f"{held} B"),
        ]
        if padded:
            rank.append(t("live.picture.chip_padded", lang=lang, n=padded))
        whole = WHOLE[zero][phase]
        if whole is not None:
            rank.append(t("live.fsdp.chip_full" if whole else "live.fsdp.chip_freed", lang=lang))
        if GRADIENT[phase] == "full":
            rank.append(t("live.fsdp.chip_grad_full", lang=lang))
        elif GRADIENT[phase] == "own":
            rank.append(t("live.fsdp.chip_grad_own", lang=lang, names=names))
        if phase >= 6:
            rank.append(t("live.fsdp.chip_step", lang=lang, names=names))
        chips.append(rank)
    return chips


# A walk takes about a second: ZeRO-3 on 2 and 3 ranks in both languages; the presenter's bigger picture on
# the narrowest boxes with the longest words (3 ranks, zh); ZeRO-2, whose chips differ only at the loss, in en
@pytest.mark.parametrize(
    "scenario, k, zero, lang, presenter",
    [("fsdp2held", 2, 3, "en", False), ("fsdp2held", 2, 3, "zh", False),
     ("fsdp3held", 3, 3, "en", False), ("fsdp3held", 3, 3, "zh", False), ("fsdp3held", 3, 3, "zh", True),
     ("fsdp2zero2held", 2, 2, "en", False)],
)  # fmt: skip
def test_fsdp_every_phase_legible_with_its_own_chips(page, preview, scenario, k, zero, lang, presenter):
    phases = walk_legible(page, preview, scenario, lang, presenter)
    # 7 phases (ZeRO-3's two all-gathers are one pill), then all done
    assert len(phases) == 8, [m["title"] for m in phases]
    # the held chip sits on the box's title line where the name leaves room (drawn last), else among the
    # chips: the same chips either way, the held one compared last
    held = {t("live.picture.chip_held", lang=lang, bytes=f"{n} B") for _, n, _ in HOLDS[k]}

    def last(chips: list[str]) -> list[str]:
        return [c for c in chips if c not in held] + [c for c in chips if c in held]

    for i, m in enumerate(phases):
        chips = [last(d["chips"]) for d in m["devices"]]
        assert chips == [last(r) for r in fsdp_chips(lang, k, zero, i)], (scenario, lang, i, m["title"])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_eight_ranks_legible_holding_nothing_or_a_column_each(page, preview, lang):
    """Eight ranks, the narrowest boxes: FSDP's three weights leave five ranks holding nothing (the longest
    chip, in zh with no space to break it at), and TP's eight features give each rank one column (strips
    narrower than their words). Legible at every phase, and no text over a rank's own column of X."""
    fsdp = walk_legible(page, preview, "fsdp8held", lang, False)
    nothing = t("live.fsdp.chip_nothing", lang=lang)
    for i, m in enumerate(fsdp):
        held = [nothing in d["chips"] for d in m["devices"]]
        assert held == [False] * 3 + [True] * 5, (lang, i, m["title"])
    tp = walk_legible(page, preview, "tp8held", lang, False)
    for i, m in enumerate(tp):
        assert m["owns"] == 8, (lang, i)  # each rank's own column drawn, and no text over any (walk_legible)
        own = [d["chips"][0] for d in m["devices"]]
        assert own == [f"w{r}" for r in range(1, 9)], (lang, i, m["devices"])
