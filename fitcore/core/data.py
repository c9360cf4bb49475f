"""Synthetic data y = X·W + b (+ noise), batching by permutation, and the exact least-squares answer."""

from __future__ import annotations

from typing import Iterator

import torch

from fitcore.core.config import GATHER_ROWS, FitConfig


def make_data(cfg: FitConfig, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Generate (X, y) from cfg.seed: X (N, d) standard normal, y (N, 1) = X·W + b + noise·ε.

    The data is drawn on the CPU and then moved, so the same seed gives the same numbers on every device.
    A config with a CSV file (cfg.data) gives the file's rows instead, standardised if cfg.standardize.
    """
    if cfg.data:
        from fitcore.core.csvdata import training_arrays

        X, y, _ = training_arrays(cfg)  # float64 (N, d), (N, 1), checked against cfg.data_sha256
        return torch.from_numpy(X).float().to(device), torch.from_numpy(y).float().to(device)
    g = torch.Generator().manual_seed(cfg.seed)
    X = torch.randn(cfg.data_size, cfg.n_features, generator=g)  # (N, d)
    W = torch.tensor(cfg.weights, dtype=torch.float32).view(-1, 1)  # (d, 1)
    y = X @ W + cfg.bias  # (N, 1)
    if cfg.noise > 0:
        y = y + cfg.noise * torch.randn(cfg.data_size, 1, generator=g)
    return X.to(device), y.to(device)


def batch_indices(
    n: int, batch_size: int, shuffle: bool, generator: torch.Generator | None = None
) -> Iterator[slice | torch.Tensor]:
    """One epoch's batches: index tensors cut from one permutation, or plain slices when not shuffling.

    The last batch may be smaller, as DataLoader(drop_last=False) gives. Taking rows by index from one
    tensor avoids DataLoader's per-item __getitem__ and collate, which dominate at large N.
    """
    if not shuffle:
        for start in range(0, n, batch_size):
            yield slice(start, min(start + batch_size, n))
        return
    perm = torch.randperm(n, generator=generator)  # (N,) on the CPU, like DataLoader's sampler
    yield from perm.split(batch_size)


def epoch_batches(
    X: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch's batches (xb, yb): exactly the rows batch_indices gives, from the same generator."""
    return ordered_batches(X, y, batch_size, epoch_order(X.shape[0], shuffle, generator))


def epoch_order(n: int, shuffle: bool, generator: torch.Generator | None = None) -> torch.Tensor | None:
    """The epoch's order of the n rows: the very permutation batch_indices draws, or None for 0..n-1."""
    return torch.randperm(n, generator=generator) if shuffle else None


def order_generator(seed: int) -> torch.Generator:
    """The generator of one device's epoch orders (DataParallel's), from the run's seed: a strategy whose
    every rank takes one device's batches (TP, a pipeline) draws the very same permutations from it."""
    return torch.Generator().manual_seed(seed + 2)


def epoch_ids(n: int, batch_size: int, shuffle: bool, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch's dataset row ids in whole batches, in one device's order (epoch_order's, or 0..n-1)."""
    order = epoch_order(n, shuffle, generator)
    return iter((order if order is not None else torch.arange(n)).split(batch_size))


def ordered_batches(
    X: torch.Tensor, y: torch.Tensor, batch_size: int, order: torch.Tensor | None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The batches (xb, yb) of the rows in `order` (epoch_order), batch_size rows each, the last one fewer.

    Shuffled rows are gathered many batches at a time (GATHER_ROWS) and then cut into batches, which are
    views of the gathered rows; unshuffled batches are views of X and y themselves.
    """
    if order is None:
        for idx in batch_indices(X.shape[0], batch_size, False):
            yield X[idx], y[idx]
        return
    group = max(1, GATHER_ROWS // batch_size) * batch_size  # whole batches only
    for part in order.split(group):
        Xg, yg = take(X, part), take(y, part)  # (G, d), (G, 1)
        yield from zip(Xg.split(batch_size), yg.split(batch_size))


def take(t: torch.Tensor, idx: slice | torch.Tensor) -> torch.Tensor:
    """The rows `idx` of t, exactly as t[idx] gives them: a view for a slice, a copy for an index tensor.

    For one index tensor, index_select is t[idx] without the generic indexing machinery
    (docs/performance.md, "Why the loop looks like this").
    """
    if isinstance(idx, slice):
        return t[idx]
    return t.index_select(0, idx if idx.device == t.device else idx.to(t.device))


def least_squares(X: torch.Tensor, y: torch.Tensor) -> tuple[tuple[float, ...], float]:
    """The exact minimiser of the MSE over (W, b), in float64 on the CPU.

    torch.linalg.lstsq solves the normal equations [X, 1]ᵀ[X, 1] θ = [X, 1]ᵀ y, a (d + 1)-square system,
    rather than [X, 1] θ = y itself: the same answer (to 1e-12 on this data, whose X is standard normal and
    so well conditioned) for a quarter of the time, without building the (N, d + 1) matrix. lstsq's
    default driver still gives the minimum-norm answer when there are fewer rows than parameters.
    """
    Xd, yd = X.detach().cpu().double(), y.detach().cpu().double()  # (N, d), (N, 1)
    sums = Xd.sum(0, keepdim=True)  # (1, d): [X, 1]ᵀ[X, 1] has Xᵀ1 and N in its last row and column
    n = torch.tensor([[float(Xd.shape[0])]], dtype=torch.float64)
    gram = torch.cat([torch.cat([Xd.T @ Xd, sums.T], 1), torch.cat([sums, n], 1)], 0)  # (d + 1, d + 1)
    rhs = torch.cat([Xd.T @ yd, yd.sum(0, keepdim=True)], 0)  # (d + 1, 1)
    solution = torch.linalg.lstsq(gram, rhs).solution.view(-1)  # (d + 1,)
    return tuple(solution[:-1].tolist()), float(solution[-1])
