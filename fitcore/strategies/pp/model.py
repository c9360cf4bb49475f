"""The deep-linear model a pipeline cuts: the fit's one layer made L layers that multiply to one W.

y = X·A₁ᵀ·A₂ᵀ···A_{L−1}ᵀ·W_Lᵀ + b: the first L − 1 layers are (d, d) without bias and start as the identity,
the last is the one-layer model's own nn.Linear(d, 1) (its first W and b from the seed, fitcore.core.train).
So the deep model starts as the same function as one layer, fits the same data to the same least-squares
answer, and its product W = W_L·A_{L−1}···A₁ is what the page shows; only the path to it differs (each layer
has its own gradient), which is why a pipeline is compared with the same deep model on one device.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fitcore.core.config import FitConfig
from fitcore.core.train import first_model
from fitcore.strategies.pp.layout import hidden


def deep_layers(cfg: FitConfig) -> list[nn.Linear]:
    """The L layers, the same on every rank, whose product starts as the one-layer model's W.

    Of width h = cfg.width (d where 0): the first (h, d) is Q's first d columns, Q a random orthogonal (h, h)
    from the seed; the middle ones (h, h) the identity; the last (1, h) is w·Qᵀ's first d rows with the
    one-layer model's w and b, so that W_L·A···A₁ = w·(Q[:, :d]ᵀ·Q[:, :d]) = w. Every hidden unit takes part
    (a wider layer is more work a block, which the bubble's formula assumes dominates), none is dead."""
    d, h = cfg.n_features, hidden(cfg)
    fc = first_model(cfg).fc
    if cfg.layers == 1:
        return [fc]
    g = torch.Generator().manual_seed(cfg.seed + 3)
    q, _ = torch.linalg.qr(torch.randn(h, h, generator=g, dtype=torch.float64))
    basis = q[:, :d].float()  # (h, d), orthonormal columns
    first = nn.Linear(d, h, bias=False)
    middle = [nn.Linear(h, h, bias=False) for _ in range(cfg.layers - 2)]
    last = nn.Linear(h, 1)
    with torch.no_grad():
        first.weight.copy_(basis)
        for layer in middle:
            layer.weight.copy_(torch.eye(h))
        last.weight.copy_(fc.weight @ basis.T)
        last.bias.copy_(fc.bias)
    return [first, *middle, last]


def product(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """The layers' weights multiplied in the order the data meets them: W_k···W_1, as
    x·W₁ᵀ···W_kᵀ = x·(W_k···W₁)ᵀ."""
    out = weights[0]
    for w in weights[1:]:
        out = w @ out
    return out


def deep_model(cfg: FitConfig) -> nn.Sequential:
    """All L layers in one nn.Sequential: one device's deep model (the lab's reference for a pipeline)."""
    return nn.Sequential(*deep_layers(cfg))


def flat_parameters(model: nn.Sequential) -> torch.Tensor:
    """W (the layers' product, d numbers) then b, in one vector: what the lab compares and a check reports."""
    layers = list(model)
    w = product([layer.weight.detach() for layer in layers])
    return torch.cat([w.reshape(-1), layers[-1].bias.detach()])


def whole_weights(model: nn.Sequential) -> tuple[tuple[float, ...], float]:
    """W and b of a deep model on one device."""
    *w, b = flat_parameters(model).tolist()
    return tuple(w), b
