"""The dataparallel row of `fitcore whatif`: everything through device 0, on one machine's devices."""

from __future__ import annotations

from fitcore.core.projection import Projection
from fitcore.strategies.dataparallel.name import NAME


def _wire(model_bytes: float, k: int, batch_bytes: float = 0.0) -> float:
    # through device 0: the parameters out to K-1 replicas, their gradients back, rows out and back
    return 2 * (k - 1) * model_bytes + (k - 1) / k * batch_bytes


PROJECTIONS = (
    # device 0 holds the master copy and the optimizer state: all of it
    # beyond each replica's copy of the parameters and gradients: all of the state, and the gathered outputs
    Projection(
        NAME,
        "DataParallel",
        lambda p, g, o, k: p + g + o,
        _wire,
        4,
        one_machine=True,
        excess=lambda p, g, o, k, outputs: o + outputs,
    ),
)
