"""Synthetic data, one epoch's batches, and the least-squares reference."""

from __future__ import annotations

import pytest
import torch

from fitcore.core.config import FitConfig
from fitcore.core.data import GATHER_ROWS, batch_indices, epoch_batches, least_squares, make_data, take


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
    "n, batch_size",
    [
        (1, 1),
        (7, 3),
        (200, 200),
        (1000, 64),
        (GATHER_ROWS + 5, 1000),
        (3 * GATHER_ROWS + 1, GATHER_ROWS // 2),
    ],
)
@pytest.mark.parametrize("shuffle", [True, False])
def test_epoch_batches_are_the_rows_batch_indices_gives(n, batch_size, shuffle):
    """Gathering many batches at once changes nothing: the same rows, in the same order, batch by batch."""
    X = torch.arange(n * 2, dtype=torch.float32).view(n, 2)
    y = torch.arange(n, dtype=torch.float32).view(n, 1) * -1
    got = list(epoch_batches(X, y, batch_size, shuffle, torch.Generator().manual_seed(3)))
    want = [
        (take(X, i), take(y, i))
        for i in batch_indices(n, batch_size, shuffle, torch.Generator().manual_seed(3))
    ]
    assert len(got) == len(want) == -(-n // batch_size)
    for (xb, yb), (xw, yw) in zip(got, want):
        assert torch.equal(xb, xw) and torch.equal(yb, yw)
        assert xb.is_contiguous() and xb.shape == (len(xw), 2) and yb.shape == (len(yw), 1)


def test_epoch_batches_gather_at_most_gather_rows_more_than_a_batch():
    n, batch_size = 4 * GATHER_ROWS, 1000
    X, y = torch.zeros(n, 2), torch.zeros(n, 1)
    batches = list(epoch_batches(X, y, batch_size, True))  # all alive: no storage is freed and reused
    bases = {xb.untyped_storage().data_ptr() for xb, _ in batches}
    assert all(xb.untyped_storage().nbytes() <= GATHER_ROWS * 2 * 4 for xb, _ in batches)
    group = (GATHER_ROWS // batch_size) * batch_size
    assert len(bases) == -(-n // group)  # one gather per group of whole batches


@pytest.mark.parametrize(
    "weights, bias, noise, seed",
    [
        ((5.2, 9.6), 3.4, 0.0, 0),
        ((1.0, -2.0, 0.5), -1.0, 0.0, 1),
        ((5.2, 9.6), 3.4, 0.5, 2),
        ((3.0,), 0.0, 2.0, 3),
    ],
)
@pytest.mark.parametrize("data_size", [200, 100_000])
def test_least_squares_against_lstsq_on_the_whole_matrix(weights, bias, noise, seed, data_size):
    cfg = FitConfig(weights=weights, bias=bias, noise=noise, data_size=data_size, seed=seed)
    X, y = make_data(cfg)
    w, b = least_squares(X, y)
    assert len(w) == len(weights) and isinstance(b, float)

    # the reference: torch.linalg.lstsq on A = [X, 1] itself, (N, d + 1), in float64
    A = torch.cat([X.double(), torch.ones(data_size, 1, dtype=torch.float64)], dim=1)
    theta = torch.linalg.lstsq(A, y.double()).solution.view(-1)
    assert max(abs(a - t) for a, t in zip(w + (b,), theta.tolist())) < 1e-9
    if noise == 0:  # the data is exactly linear: the fit is the truth, to float32's precision
        assert max(abs(a - t) for a, t in zip(w + (b,), weights + (bias,))) < 1e-5
    else:
        assert max(abs(a - t) for a, t in zip(w + (b,), weights + (bias,))) < 4 * noise / data_size**0.5


def test_least_squares_with_fewer_rows_than_parameters_is_the_minimum_norm_answer():
    """One row, two features and a bias: lstsq's minimum-norm answer, which fits the row exactly."""
    X, y = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0]])
    w, b = least_squares(X, y)
    A = torch.tensor([[1.0, 2.0, 1.0]], dtype=torch.float64)
    minimum_norm = torch.linalg.pinv(A) @ y.double()  # (3, 1)
    assert max(abs(a - t) for a, t in zip(w + (b,), minimum_norm.view(-1).tolist())) < 1e-9
    assert abs(w[0] * 1.0 + w[1] * 2.0 + b - 3.0) < 1e-9
