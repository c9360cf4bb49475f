"""Cost against data size: one epoch of 1e3 .. 1e7 rows (batch 1000), fitcore against the tutorial's loop.

fitcore's cost is linear in the rows: a fixed part (the set-up, and at most a few steps) and then one step per
batch. The script fits the slope of log(time) against log(rows), draws both series on a log-log chart
(docs/performance-scaling.html with plotly, and a PNG of it, or an SVG where no browser can draw one), and
gives the largest data size the validation admits on a machine with 24 GiB available.

    python -m benchmarks.scaling [--quick] [--no-chart]
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import plotly.graph_objects as go

from benchmarks import common
from benchmarks.browser import CHROMIUM, CHROMIUM_ARGS
from benchmarks.data_path import tutorial
from fitcore.core.config import ConfigError, FitConfig, Limits, max_data_size, validate

DOCS = common.ROOT / "docs"
CHART = "performance-scaling"
GIB = 2**30
BATCH = 1000


def sizes(quick: bool) -> list[int]:
    top = 5 if quick else 7
    return [int(round(10 ** (e / 2))) for e in range(6, 2 * top + 1)]  # 1e3, 3.2e3, 1e4, ... 1e7


def measure(n: int, with_tutorial: bool, repeats: int) -> dict:
    cfg = common.config(data_size=n, batch_size=min(BATCH, n), epochs=1, devices="cpu")
    candidates = {"fitcore": lambda: common.time_fitcore(cfg)}
    if with_tutorial:
        candidates["tutorial"] = lambda: tutorial(cfg, "cpu")
    samples = common.interleave(candidates, repeats, warmup=1 if n <= 100_000 else 0)
    row = {"rows": n, "steps": cfg.total_steps}
    for who, runs in samples.items():
        for key in ("total_s", "setup_s", "loop_s"):
            row[f"{who}_{key}"] = common.median([r[key] for r in runs])
    return row


def slope(rows: list[dict], key: str, smallest: int = 10_000) -> float:
    """The least-squares slope of log(time) against log(rows), over sizes from `smallest` up: 1 is linear."""
    pts = [(math.log(r["rows"]), math.log(r[key])) for r in rows if r["rows"] >= smallest and key in r]
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def admitted(n_features: int, available: int) -> dict:
    """The largest data size validate() admits with `available` bytes (batch 1000), found by bisection, and
    max_data_size(), the figure validate()'s error message quotes."""
    weights = tuple(1.0 for _ in range(n_features))

    def ok(n: int) -> bool:
        try:
            validate(
                FitConfig(weights=weights, data_size=n, batch_size=1000, devices="cpu"), available=available
            )
            return True
        except ConfigError:
            return False

    quoted = max_data_size(n_features, available, Limits().memory_fraction, 1000)
    lo, hi = 1000, 2 * quoted + 1000
    while ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return {"n_features": n_features, "validation_admits": lo, "max_data_size": quoted}


# -- the chart --------------------------------------------------------------------------------------------
def figure(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    series = [
        ("fitcore, whole call", "fitcore_total_s", "#1f6feb", "solid"),
        ("fitcore, loop only", "fitcore_loop_s", "#1f6feb", "dot"),
        ("tutorial DataLoader, whole call", "tutorial_total_s", "#d1242f", "solid"),
    ]
    for name, key, color, dash in series:
        pts = [r for r in rows if key in r]
        fig.add_scatter(
            x=[r["rows"] for r in pts],
            y=[r[key] for r in pts],
            name=name,
            mode="lines+markers",
            line={"color": color, "dash": dash},
        )
    ref = max(rows, key=lambda r: r["rows"])
    xs = [rows[0]["rows"], ref["rows"]]
    fig.add_scatter(
        x=xs,
        y=[ref["fitcore_total_s"] * x / ref["rows"] for x in xs],
        name="linear (slope 1)",
        mode="lines",
        line={"color": "#888", "dash": "dash", "width": 1},
    )
    fig.update_layout(
        title=f"Time per epoch against data size (batch {BATCH}, CPU)",
        xaxis={"title": "rows", "type": "log"},
        yaxis={"title": "seconds per epoch", "type": "log"},
        width=820,
        height=500,
        template="plotly_white",
        legend={"x": 0.01, "y": 0.99},
    )
    return fig


def write_png(fig: go.Figure, path: Path) -> bool:
    """Draw the figure to a PNG: with kaleido where installed, else in Chromium through Playwright."""
    try:
        fig.write_image(path, scale=1)
        return True
    except Exception:  # noqa: BLE001 - kaleido missing or unable to start: try the browser
        pass
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "chart.html"
        fig.write_html(page_file, include_plotlyjs=True, full_html=True)  # self-contained: no network
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 860, "height": 540})
                page.goto(page_file.as_uri())
                page.wait_for_selector(".main-svg", timeout=30_000)
                page.locator(".js-plotly-plot").screenshot(path=str(path))
                browser.close()
        except Exception as exc:  # noqa: BLE001 - no browser here: the SVG will do
            print(f"(no PNG: {type(exc).__name__}: {str(exc).splitlines()[0]})")
            return False
    return True


def write_svg(rows: list[dict], path: Path) -> None:
    """The same chart drawn by hand, for a machine with neither kaleido nor a browser."""
    w, h, left, top, right, bottom = 820, 500, 70, 40, 230, 50
    pts = [(r["rows"], r[k]) for r in rows for k in ("fitcore_total_s", "tutorial_total_s") if k in r]
    lx = [math.log10(x) for x, _ in pts]
    ly = [math.log10(y) for _, y in pts]
    x0, x1, y0, y1 = math.floor(min(lx)), math.ceil(max(lx)), math.floor(min(ly)), math.ceil(max(ly))

    def X(v: float) -> float:
        return left + (math.log10(v) - x0) / (x1 - x0) * (w - left - right)

    def Y(v: float) -> float:
        return h - bottom - (math.log10(v) - y0) / (y1 - y0) * (h - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="12">'
    ]
    out.append(f'<rect width="{w}" height="{h}" fill="white"/>')
    for e in range(x0, x1 + 1):
        out.append(
            f'<line x1="{X(10**e):.1f}" y1="{top}" x2="{X(10**e):.1f}" y2="{h - bottom}" stroke="#eee"/>'
        )
        out.append(f'<text x="{X(10**e):.1f}" y="{h - bottom + 18}" text-anchor="middle">1e{e}</text>')
    for e in range(y0, y1 + 1):
        out.append(
            f'<line x1="{left}" y1="{Y(10**e):.1f}" x2="{w - right}" y2="{Y(10**e):.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{left - 6}" y="{Y(10**e) + 4:.1f}" text-anchor="end">1e{e} s</text>')
    out.append(f'<text x="{w / 2 - right / 2:.0f}" y="{h - 10}" text-anchor="middle">rows</text>')
    out.append(
        f'<text x="{left}" y="22">Time per epoch against data size (batch {BATCH}, CPU), log-log</text>'
    )
    for i, (name, key, color) in enumerate(
        [
            ("fitcore, whole call", "fitcore_total_s", "#1f6feb"),
            ("tutorial, whole call", "tutorial_total_s", "#d1242f"),
        ]
    ):
        line = [(X(r["rows"]), Y(r[key])) for r in rows if key in r]
        out.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
            + " ".join(f"{a:.1f},{b:.1f}" for a, b in line)
            + '"/>'
        )
        out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{color}"/>' for a, b in line]
        out.append(f'<text x="{w - right + 10}" y="{top + 20 + 18 * i}" fill="{color}">{name}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--no-chart", action="store_true", help="print the figures only")
    args = common.parse_args(p)
    tutorial_up_to = 10_000 if args.quick else 1_000_000  # the tutorial's 1e7 rows would take minutes
    rows = []
    for n in sizes(args.quick):
        repeats = 1 if n >= 3_000_000 else (2 if args.quick else 3)
        rows.append(measure(n, n <= tutorial_up_to, repeats))
    print(
        common.table(
            ["rows", "steps", "fitcore s", "set-up s", "loop s", "us/row", "tutorial s", "speed-up"],
            [
                [
                    r["rows"],
                    r["steps"],
                    r["fitcore_total_s"],
                    r["fitcore_setup_s"],
                    r["fitcore_loop_s"],
                    f"{r['fitcore_total_s'] / r['rows'] * 1e6:.2f}",
                    r.get("tutorial_total_s", ""),
                    f"{r['tutorial_total_s'] / r['fitcore_total_s']:.1f}x" if "tutorial_total_s" in r else "",
                ]
                for r in rows
            ],
        )
    )
    slopes = {"fitcore_total": slope(rows, "fitcore_total_s"), "fitcore_loop": slope(rows, "fitcore_loop_s")}
    if sum("tutorial_total_s" in r for r in rows if r["rows"] >= 10_000) >= 2:
        slopes["tutorial_total"] = slope(rows, "tutorial_total_s")
    print(
        "log-log slopes from 1e4 rows up (1 = linear): "
        + ", ".join(f"{k} {v:.3f}" for k, v in slopes.items())
    )
    limits = [admitted(d, 24 * GIB) for d in (2, 16)]
    for lim in limits:
        print(
            f"24 GiB available, {lim['n_features']} features: validate() admits up to "
            f"{lim['validation_admits']:,} rows; max_data_size() (quoted in its message) says "
            f"{lim['max_data_size']:,}"
        )
    charts = {}
    if not args.no_chart:
        DOCS.mkdir(exist_ok=True)
        fig = figure(rows)
        html = DOCS / f"{CHART}.html"
        fig.write_html(html, include_plotlyjs="cdn", full_html=True)
        charts["html"] = html.relative_to(common.ROOT).as_posix()
        png = DOCS / f"{CHART}.png"
        if write_png(fig, png):
            charts["png"] = png.relative_to(common.ROOT).as_posix()
        else:
            svg = DOCS / f"{CHART}.svg"
            write_svg(rows, svg)
            charts["svg"] = svg.relative_to(common.ROOT).as_posix()
        print("chart: " + ", ".join(charts.values()))
    common.emit(
        "scaling",
        {"batch": BATCH, "rows": rows, "slopes": slopes, "max_data_size_24gib": limits, "charts": charts},
        args.quick,
    )


if __name__ == "__main__":
    main()
