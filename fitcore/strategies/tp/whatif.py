"""The tp row of `fitcore whatif`: each device holds 1/K of the model and takes every row of the global batch
but 1/K of each row's compute (its columns), so 1/K of the batch's compute, as DDP's device does; its
traffic is one all-reduce of the batch's activations, which grows with the batch and not with the model."""

from __future__ import annotations

from fitcore.core.projection import Projection
from fitcore.strategies.tp.name import NAME


def _activations(model_bytes: float, k: int, batch_bytes: float = 0.0) -> float:
    # a ring all-reduce of the batch's outputs (batch_bytes: one activation a row, Projection.activations)
    return 2 * (k - 1) / k * batch_bytes


PROJECTIONS = (
    Projection(
        NAME,
        "TP (all-reduce)",
        lambda p, g, o, k: (p + g + o) / k,
        _activations,
        2,
        compute_share=lambda k: 1 / k,
        batch_share=lambda k: 1.0,  # every rank every row of the global batch
        activations=True,
    ),
)
