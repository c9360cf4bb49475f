"""The ddp row of `fitcore whatif`: every rank holds everything and all-reduces its gradients in a ring."""

from __future__ import annotations

from fitcore.core.i18n import t
from fitcore.core.projection import Projection, ring
from fitcore.strategies.ddp.name import NAME

PROJECTIONS = (
    Projection(NAME, "DDP (ring all-reduce)", lambda p, g, o, k: p + g + o, ring, 2,
               page_title=lambda: t("lab.ring")),
)  # fmt: skip
