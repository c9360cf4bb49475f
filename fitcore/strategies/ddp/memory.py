"""What DDP's ranks hold: every rank the whole model, its gradients and its optimizer state."""

from __future__ import annotations

from typing import Sequence

import torch

from fitcore.core.memory import held, whole_model


def ddp_rows(whole: dict[str, int], k: int) -> list[dict]:
    """per_rank_memory of DDP from what one rank holds (measured, or whole_model's): every rank the same."""
    return [{"rank": r, **whole} for r in range(k)]


def ddp_memory(params: Sequence[torch.Tensor], optimizer, k: int) -> list[dict]:
    """per_rank_memory of DDP from one rank's tensors: every one of the k ranks holds the same."""
    return ddp_rows(held(params, optimizer), k)


def planned_memory(cfg, rank: int, k: int) -> dict:
    """What rank `rank` of k will hold, by the formula (ddp_rows of whole_model): the whole model."""
    return ddp_rows(whole_model(cfg), k)[rank]
