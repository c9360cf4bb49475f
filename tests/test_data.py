"""Synthetic data, one epoch's batches, and the least-squares reference."""

from __future__ import annotations

import pytest
import torch

from fitcore.config import FitConfig
from fitcore.data import batch_indices, least_squares, make_data


def test_make_data_is_the_linear_model_exactly_without_noise():
    cfg = FitConfig(weights=(5.2, 9.6, -1.5), bias=3.4, data_size=300, seed=4)
    X, y = make_data(cfg)
    assert X.shape == (300, 3) and y.shape == (300, 1)
    assert X.dtype == y.dtype == torch.float32
    W = torch.tensor([[5.2], [9.6], [-1.5]])
    torch.testing.assert_close(y, X @ W + 3.4, atol=1e-5, rtol=0)
    # X is standard normal
    assert abs(X.mean().item()) < 0.15 and abs(X.std().item() - 1) < 0.1


def test_make_data_depends_on_the_seed():
    a = make_data(FitConfig(seed=1))
    b = make_data(FitConfig(seed=1))
    c = make_data(FitConfig(seed=2))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize("noise", [0.1, 2.0])
def test_noise_has_the_requested_std(noise):
    cfg = FitConfig(weights=(1.0, -2.0), bias=0.5, noise=noise, data_size=20_000, seed=3)
    X, y = make_data(cfg)
    residual = y - (X @ torch.tensor([[1.0], [-2.0]]) + 0.5)  # (N, 1), noise only
    assert abs(residual.std().item() / noise - 1) < 0.03
    assert abs(residual.mean().item()) < 4 * noise / 20_000**0.5


# (rows, batch size, rows per batch), by hand; the last batch keeps the remainder like drop_last=False
BATCHES = [
    (250, 100, [100, 100, 50]),
    (200, 200, [200]),
    (200, 64, [64, 64, 64, 8]),
    (13, 5, [5, 5, 3]),
    (7, 3, [3, 3, 1]),
    (10, 1, [1] * 10),
    (1, 1, [1]),
]


@pytest.mark.parametrize("n, batch_size, sizes", BATCHES)
def test_shuffled_batches_cover_every_row_once_per_epoch(n, batch_size, sizes):
    g = torch.Generator().manual_seed(5)
    epochs = [list(batch_indices(n, batch_size, True, g)) for _ in range(3)]
    for batches in epochs:
        assert [len(b) for b in batches] == sizes
        assert all(b.dtype == torch.int64 for b in batches)
        assert torch.equal(torch.cat(batches).sort().values, torch.arange(n))
    if n >= 10:  # a fresh permutation each epoch
        assert not torch.equal(torch.cat(epochs[0]), torch.cat(epochs[1]))


@pytest.mark.parametrize("n, batch_size, sizes", BATCHES)
def test_unshuffled_batches_are_slices_in_order(n, batch_size, sizes):
    batches = list(batch_indices(n, batch_size, False))
    stops = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    starts = [0] + stops[:-1]
    assert batches == [slice(a, b) for a, b in zip(starts, stops)]


def test_shuffled_batches_follow_the_generator():
    first = list(batch_indices(50, 20, True, torch.Generator().manual_seed(9)))
    again = list(batch_indices(50, 20, True, torch.Generator().manual_seed(9)))
    assert all(torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize(
    "weights, bias, noise, seed",
    [
        ((5.2, 9.6), 3.4, 0.0, 0),
        ((1.0, -2.0, 0.5), -1.0, 0.0, 1),
        ((5.2, 9.6), 3.4, 0.5, 2),
        ((3.0,), 0.0, 2.0, 3),
    ],
)
def test_least_squares_against_the_normal_equations(weights, bias, noise, seed):
    cfg = FitConfig(weights=weights, bias=bias, noise=noise, data_size=200, seed=seed)
    X, y = make_data(cfg)
    w, b = least_squares(X, y)
    assert len(w) == len(weights) and isinstance(b, float)

    # an independent reference: solve (AᵀA) θ = Aᵀy in float64, A = [X, 1]
    A = torch.cat([X.double(), torch.ones(200, 1, dtype=torch.float64)], dim=1)  # (N, d + 1)
    theta = torch.linalg.solve(A.T @ A, A.T @ y.double()).view(-1)
    assert max(abs(a - t) for a, t in zip(w + (b,), theta.tolist())) < 1e-8
    if noise == 0:  # the data is exactly linear: the fit is the truth, to float32's precision
        assert max(abs(a - t) for a, t in zip(w + (b,), weights + (bias,))) < 1e-5
    else:
        assert max(abs(a - t) for a, t in zip(w + (b,), weights + (bias,))) < 4 * noise / 200**0.5
