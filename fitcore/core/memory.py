"""The bytes each rank (or device) holds between steps: parameters, gradients and optimizer state.

Measured from the tensors themselves: each storage counted once (FSDP's sharded gradients are views into one
flat buffer), a DTensor by its local shard. This is ZeRO's lesson in three rows: DDP's ranks each hold
everything, DataParallel's first device holds the optimizer state for all, FSDP's ranks hold 1/K of each.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a DTensor's local shard, any other tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def held_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the storages behind `tensors`, each storage once (None and 0-d Python numbers skipped)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = local_tensor(t).untyped_storage()
            seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


def allocated(device: torch.device | str) -> dict[str, int]:
    """{"allocated": bytes} on a CUDA device: what torch's caching allocator has handed out there
    (torch.cuda.memory_allocated), every tensor on it, the batch and the activations too; {} off CUDA, where
    torch keeps no such count."""
    device = torch.device(device)
    return {"allocated": torch.cuda.memory_allocated(device)} if device.type == "cuda" else {}


def held(params: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """{"parameters", "gradients", "optimizer_state"} in bytes, for the tensors one process holds, and on
    CUDA the device's "allocated" bytes (allocated()).

    `params` is read three times: a generator (`model.parameters()`) is taken into a list first, or the
    optimizer state's count would use it up and parameters and gradients read 0 B.
    """
    params = list(params)
    state = [v for p in params for v in optimizer.state.get(p, {}).values()]
    return {
        "parameters": held_bytes(params),
        "gradients": held_bytes(p.grad for p in params),
        "optimizer_state": held_bytes(state),
        **(allocated(local_tensor(params[0]).device) if params else {}),
    }


def optimizer_state(cfg, numbers: int, itemsize: int = 4) -> int:
    """The bytes of optimizer state kept for `numbers` parameter numbers, by the formula: Adam's two moments
    of each and a 4-byte step count per parameter tensor (W and b); SGD without momentum keeps none."""
    return 2 * numbers * itemsize + 2 * 4 if cfg.optimizer == "adam" else 0


def whole_model(cfg, itemsize: int = 4) -> dict[str, int]:
    """The bytes a device or rank that holds the whole model holds, before a run measures them: W (d) and
    b (1), their gradients, and their optimizer state."""
    numbers = cfg.n_features + 1
    return {
        "parameters": numbers * itemsize,
        "gradients": numbers * itemsize,
        "optimizer_state": optimizer_state(cfg, numbers, itemsize),
    }


HELD = ("parameters", "gradients", "optimizer_state")  # what a row of per_rank_memory counts, in bytes


def memory_part(devices: list[dict], rows: Sequence[dict] | None) -> bool:
    """The live picture's bytes: each device its rank's row of per_rank_memory (as measured), for the chip
    that says what it holds. Changes `devices` in place; whether any were measured."""
    rows = rows or ()
    for device, row in zip(devices, rows):
        device["memory"] = {key: row[key] for key in HELD}
    return bool(rows)


def rank_memory(rank: int, params: Sequence[torch.Tensor], optimizer) -> dict:
    """One rank's row of per_rank_memory, from the tensors it holds (FSDP's shards, TP's rows of W)."""
    return {"rank": rank, **held(params, optimizer)}
