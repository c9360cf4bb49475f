"""What DataParallel's devices hold: device 0 the model and all of the optimizer state, each other device
a replica's copy of the parameters and their gradients during a step."""

from __future__ import annotations

from typing import Sequence

import torch

from fitcore.core.memory import allocated, held, whole_model


def dataparallel_rows(whole: dict[str, int], k: int) -> list[dict]:
    """per_rank_memory of DataParallel on k devices from what device 0 holds (measured, or whole_model's):
    device 0 the model, its gradients and all of the optimizer state; each other device, during a step, a
    replica's copy of the parameters and of their gradients (summed back onto device 0), and no state.
    Device 0's CUDA "allocated" bytes are its own: a replica's row has none of them."""
    replica = {key: value for key, value in whole.items() if key != "allocated"}
    replica["optimizer_state"] = 0
    return [{"rank": 0, **whole}] + [{"rank": r, **replica} for r in range(1, k)]


def gathered_bytes(batch_rows: int, itemsize: int = 4) -> int:
    """What device 0 holds during a step beyond the others: the batch's outputs, (rows, 1), gathered from
    every replica, and the loss, one number."""
    return batch_rows * itemsize + itemsize


def dataparallel_memory(
    params: Sequence[torch.Tensor], optimizer, k: int, device_ids=(), batch_rows: int = 0
) -> list[dict]:
    """per_rank_memory of DataParallel from device 0's tensors (dataparallel_rows); on k GPUs
    (`device_ids`, one a device) each row also has its GPU's allocated bytes: device 0's hold the gathered
    outputs and the master copy besides, which is why the first GPU fills up. On more than one device,
    device 0's row says what it gathers during a step of `batch_rows` rows ("gathered", gathered_bytes)."""
    rows = dataparallel_rows(held(params, optimizer), k)
    if k > 1 and batch_rows:
        rows[0]["gathered"] = gathered_bytes(batch_rows)
    if len(device_ids) == k:
        for row, index in zip(rows, device_ids):
            row.update(allocated(f"cuda:{index}"))
    return rows


def planned_memory(cfg, rank: int, k: int) -> dict:
    """What device `rank` of k will hold, by the formula (dataparallel_rows of whole_model)."""
    return dataparallel_rows(whole_model(cfg), k)[rank]
