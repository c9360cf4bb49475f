"""The devices' colours, told apart by a colour-blind student: the live view's palette (frontend/dom.js's
COLOURS) under a simulation of each colour vision deficiency, and against the white page.

The simulation is Machado, Oliveira and Fernandes (2009), full severity, on linear RGB; distances are CIE76
in CIELAB (D65). Before this palette, virtual:1 and virtual:4 were two oranges 5 units apart.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

DOM = Path(__file__).resolve().parents[1] / "frontend" / "dom.js"
SIMULATIONS = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}  # fmt: skip
MIN_DELTA_E = 20.0  # CIELAB units between any two devices' colours, whatever the vision
MIN_CONTRAST = 3.0  # WCAG's for a graphical object (a box's stroke, a chart's line) against white


def palette() -> list[str]:
    (body,) = re.findall(r"export const COLOURS = \[([^\]]*)\]", DOM.read_text(encoding="utf-8"))
    return re.findall(r'"(#[0-9a-fA-F]{6})"', body)


def linear(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def cielab(rgb_linear: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    t = xyz @ np.clip(rgb_linear, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def closest_pair(colours: list[str], simulation: np.ndarray) -> tuple[float, tuple[str, str]]:
    labs = {c: cielab(simulation @ linear(c)) for c in colours}
    pairs = itertools.combinations(colours, 2)
    return min((float(np.linalg.norm(labs[a] - labs[b])), (a, b)) for a, b in pairs)


def test_the_palette_has_a_colour_for_each_of_8_devices():
    colours = palette()
    assert len(colours) == 8 and len({c.lower() for c in colours}) == 8


@pytest.mark.parametrize("vision", SIMULATIONS)
def test_every_two_devices_stay_apart_under_each_colour_vision(vision):
    distance, pair = closest_pair(palette(), SIMULATIONS[vision])
    assert distance >= MIN_DELTA_E, (vision, pair, round(distance, 1))


def test_the_check_tells_the_old_oranges_apart_from_a_good_palette():
    """It can fail: the palette before, with its two oranges, does under every vision."""
    old = ["#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#e8590c", "#0c8599", "#c2255c", "#5c940d"]
    distance, pair = closest_pair(old, SIMULATIONS["normal"])
    assert distance < MIN_DELTA_E and pair == ("#d9480f", "#e8590c")


@pytest.mark.parametrize("colour", palette())
def test_each_colour_stands_out_against_the_white_page(colour):
    luminance = float(np.array([0.2126, 0.7152, 0.0722]) @ linear(colour))
    assert (1.05) / (luminance + 0.05) >= MIN_CONTRAST
