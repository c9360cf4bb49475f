"""The pp row of `fitcore whatif`: each of K stages holds 1/K of the layers (its parameters, gradients and
optimizer state) and runs 1/K of the compute; it sends each microbatch's activations to the next stage (and
their gradients back), which grow with the batch; and it idles for the bubble, (K−1)/(m+K−1) of the step
with m microbatches (1F1B, m = 4K here: a batch cut finer than that is common practice); its stage 0 keeps
K of the m microbatches' activations at once, a quarter of the batch's."""

from __future__ import annotations

from fitcore.core.projection import Projection
from fitcore.strategies.pp.layout import ONE_F_ONE_B, formula_bubble
from fitcore.strategies.pp.name import NAME

MICROBATCHES_PER_STAGE = 4  # m = 4K


def _bubble(k: int) -> float:
    """1F1B's (K−1)/(m+K−1) of the step, m = 4K: 0 on one device, about a fifth at scale."""
    return formula_bubble(ONE_F_ONE_B, k, MICROBATCHES_PER_STAGE * k)


def _held(k: int) -> float:
    """Stage 0 holds the activations of min(m, K) of its m microbatches at once under 1F1B (GPipe: all m):
    K of 4K, a quarter of the global batch's, whatever K; one device holds all of its rows."""
    m = MICROBATCHES_PER_STAGE * k
    return min(m, k) / m if k > 1 else 1.0


def _activations(model_bytes: float, k: int, batch_bytes: float = 0.0) -> float:
    # each stage but the last sends the batch's activations on, and each but the first their gradients back
    return 2 * batch_bytes if k > 1 else 0.0


PROJECTIONS = (
    Projection(
        NAME,
        "PP (1F1B, m = 4K)",
        lambda p, g, o, k: (p + g + o) / k,
        _activations,
        2,
        compute_share=lambda k: 1 / k,
        batch_share=lambda k: 1.0,  # every stage sees every row of the batch, one microbatch at a time
        activations=True,
        bubble=_bubble,
        held_share=_held,
    ),
)
