"""The run's device mesh: its parallel dimensions by name, made once per Start from the checked config.

As torchtitan's `ParallelDims`: the names and sizes of the dimensions (`dp`, `tp`), their product the world
size, the process group's backend and each rank's device, and each rank's coordinates on the mesh. The
engine makes torch's own `DeviceMesh` from it on each rank (`device_mesh`); the strategies take their
dimension of it (`mesh["dp"]`, `mesh["tp"]`) and nothing downstream reads the devices string again.

A 1-D run is a mesh of one dimension: `--strategy tp --workers 2` is the mesh `tp=2`, `--strategy ddp
--workers 3` the mesh `dp=3`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# The dimensions a mesh may have, outermost first (torchtitan orders [pp, dp, cp, tp]): a rank's `tp` group
# holds neighbouring ranks, whose all-reduce runs every forward; its `dp` group strides across them; a `pp`
# group's ranks each hold some of the model's layers (a pipeline's stages), and pass activations on
PP, DP, TP = "pp", "dp", "tp"  # written here only: the rest of fitcore names a dimension by these
DIMS = (PP, DP, TP)
MAX_DIM = 64  # ranks along one dimension: fitcore.core.config's MAX_WORKERS


class MeshError(ValueError):
    """A mesh written wrong (fitcore.core.config says what is allowed, in the reader's language)."""


@dataclass(frozen=True)
class Mesh:
    """The run's parallel dimensions and where each rank runs: made once per run, passed down."""

    dims: tuple[tuple[str, int], ...]  # (name, size), outermost first: (("dp", 2), ("tp", 2))
    backend: str  # "gloo" on the CPU, "nccl" on GPUs
    devices: tuple[str, ...]  # each rank's device, in rank order ("cpu", "cuda:1")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.dims)

    @property
    def world_size(self) -> int:
        return world_size(self.dims)

    def size(self, name: str) -> int:
        """The ranks along dimension `name`; 1 where the mesh has no such dimension."""
        return dict(self.dims).get(name, 1)

    def coords(self, rank: int) -> dict[str, int]:
        """Rank `rank`'s coordinate along each dimension (grid's)."""
        return coords(self.dims, rank)

    def text(self) -> str:
        """The mesh as the flag writes it: "dp=2,tp=2"."""
        return ",".join(f"{name}={size}" for name, size in self.dims)

    def device_mesh(self, device_type: str) -> DeviceMesh:
        """torch's DeviceMesh of this mesh, with its dimensions' names, on a rank of the process group."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, self.shape, mesh_dim_names=self.names)


def world_size(dims: Iterable[tuple[str, int]]) -> int:
    """The ranks of a mesh of these dimensions: their sizes' product."""
    return math.prod(size for _, size in dims)


def coords(dims: Sequence[tuple[str, int]], rank: int) -> dict[str, int]:
    """Rank `rank`'s coordinate along each dimension, as torch's DeviceMesh numbers them (row-major: the
    last dimension's neighbours are consecutive ranks)."""
    out = {}
    for name, size in reversed(dims):
        rank, out[name] = divmod(rank, size)
    return {name: out[name] for name, _ in dims}


def grid(dims: Sequence[tuple[str, int]]) -> list[dict[str, int]]:
    """Every rank's coordinates on a mesh of these dimensions, in rank order: where a picture, a planned
    step or a check needs the mesh's shape and not where its ranks run."""
    return [coords(dims, rank) for rank in range(world_size(dims))]


def parse_mesh(raw: str) -> tuple[tuple[str, int], ...]:
    """"dp=2,tp=2" -> (("dp", 2), ("tp", 2)), in DIMS' order; MeshError for anything else: a name not in DIMS
    or named twice, a size that is not an integer from 1 to MAX_DIM written with 0-9."""
    sizes: dict[str, int] = {}
    for part in str(raw).split(","):
        name, eq, size = part.strip().partition("=")
        name, size = name.strip(), size.strip()
        if not eq or name not in DIMS or name in sizes:
            raise MeshError(part)
        if not (size.isascii() and size.isdigit()) or not 1 <= int(size) <= MAX_DIM:
            raise MeshError(part)
        sizes[name] = int(size)
    return tuple((name, sizes[name]) for name in DIMS if name in sizes)


def mesh_of(
    dims: Mapping[str, int] | tuple[tuple[str, int], ...], backend: str, devices: Iterable[str]
) -> Mesh:
    """A Mesh of `dims` in DIMS' order, where each rank runs."""
    sizes = dict(dims)
    return Mesh(tuple((name, sizes[name]) for name in DIMS if name in sizes), backend, tuple(devices))
