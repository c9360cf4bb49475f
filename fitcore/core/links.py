"""The links between devices the what-if's alpha-beta model knows: the vendors' presets, and the links fitted
to collectives measured between two namespace hosts (docs/scaling.md), by key."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from fitcore.core.i18n import t


@dataclass(frozen=True)
class Link:
    """A link between devices for the alpha-beta model: time = latency + bytes / bandwidth."""

    name: str
    bandwidth: float  # bytes per second, one direction
    latency: float  # seconds per message
    source: str  # where the bandwidth comes from
    # a measured link's spread over its repeated fits, low to high (None: a preset or a figure given)
    bandwidth_range: tuple[float, float] | None = None
    latency_range: tuple[float, float] | None = None
    repeats: int = 1

    def extremes(self) -> tuple[Link, Link] | None:
        """The fastest and the slowest link within the measured spread; None without one."""
        if self.bandwidth_range is None or self.latency_range is None:
            return None
        (b_lo, b_hi), (l_lo, l_hi) = self.bandwidth_range, self.latency_range
        return Link(self.name, b_hi, l_lo, self.source), Link(self.name, b_lo, l_hi, self.source)


# Bandwidths are the vendors' one-direction peaks (measured links reach about 80 % of them); latencies are
# round typical figures for one step of a collective, to be edited.
LINKS = {
    "nvlink": Link("NVLink 4 (H100 SXM)", 450e9, 2e-6, "NVIDIA: 900 GB/s bidirectional per GPU"),
    "pcie": Link("PCIe 5.0 x16", 64e9, 5e-6, "PCI-SIG: 32 GT/s x 16 lanes, 128 GB/s bidirectional"),
    "ethernet100": Link("100 Gb/s Ethernet", 12.5e9, 10e-6, "100 Gb/s = 12.5 GB/s"),
    "ethernet400": Link("400 Gb/s Ethernet", 50e9, 10e-6, "400 Gb/s = 50 GB/s"),
    "infiniband400": Link("400 Gb/s InfiniBand NDR", 50e9, 2e-6, "NDR: 400 Gb/s per port = 50 GB/s"),
}
MEASURED_LINKS = Path(__file__).with_name("measured_links.json")  # benchmarks.collectives writes it


def measured_links(path: Path = MEASURED_LINKS) -> dict[str, Link]:
    """The links fitted to collectives measured between two namespace hosts (docs/scaling.md), by key;
    {} where the file is missing or not what the benchmark writes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        links = {str(key): _measured_link(v) for key, v in data.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return links if all(_sane(x) for x in links.values()) else {}


def _measured_link(v: dict) -> Link:
    spread = {}
    if "bandwidth_range" in v and "latency_range" in v:  # a file of one fit a setting has none
        b_lo, b_hi = (float(x) for x in v["bandwidth_range"])
        l_lo, l_hi = (float(x) for x in v["latency_range"])
        spread = {
            "bandwidth_range": (b_lo, b_hi),
            "latency_range": (l_lo, l_hi),
            "repeats": int(v["repeats"]),
        }
    return Link(str(v["name"]), float(v["bandwidth"]), float(v["latency"]), str(v["source"]), **spread)


def _sane(link: Link) -> bool:
    """A bandwidth above 0, a latency under a second, and a spread around them, low to high."""
    ok = lambda b, lat: math.isfinite(b) and b > 0 and math.isfinite(lat) and 0 <= lat < 1  # noqa: E731
    if not ok(link.bandwidth, link.latency):
        return False
    if link.bandwidth_range is None:
        return True
    (b_lo, b_hi), (l_lo, l_hi) = link.bandwidth_range, link.latency_range
    around = b_lo <= link.bandwidth <= b_hi and l_lo <= link.latency <= l_hi
    return ok(b_lo, l_lo) and ok(b_hi, l_hi) and around and link.repeats >= 1


LINKS.update(measured_links())  # beside the presets, in the command line's --link and the page's choice


def link_name(key: str) -> str:
    """A link's name as shown: a preset's own (a product name); a measured one's in the current language,
    from its key ("measured-tbf100": tbf at 100 Mbit/s; "measured-veth": no limit)."""
    if key == "measured-veth":
        return t("cli.whatif.link.measured_veth")
    if key.startswith("measured-tbf") and key[len("measured-tbf") :].isdigit():
        return t("cli.whatif.link.measured_tbf", rate=key[len("measured-tbf") :])
    return LINKS[key].name
