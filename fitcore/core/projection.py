"""What a strategy projects in `fitcore whatif`, below the strategies: the bytes a device keeps per parameter
for an optimizer at a precision (the ZeRO paper's 2Ψ + 2Ψ + KΨ), a row kind's formulas (`Projection`), and
the ring all-reduce's arithmetic they share. A strategy package gives its own rows (its `projections` hook)
from these; fitcore.lab.whatif builds the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fitcore.core.errors import ConfigError, Listed
from fitcore.protocols.mesh import TP


@dataclass(frozen=True)
class StateBytes:
    """Bytes a device keeps per parameter (the ZeRO paper's 2Ψ + 2Ψ + KΨ, section 3.1), and per number on
    the wire, for one optimizer at one precision."""

    optimizer_name: str  # "adam" or "sgd", as --optimizer
    precision: str  # "mixed" or "fp32", as --precision
    params: int  # the parameters the forward pass reads: fp16 under mixed precision
    grads: int
    optimizer: int  # the optimizer's state: Adam's momentum and variance, and mixed precision's fp32 master
    wire: int  # one parameter, gradient or activation sent

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer


PRECISIONS = ("mixed", "fp32")
# optimizer state per parameter: Adam keeps momentum and variance (4 + 4 bytes); plain SGD (no momentum, as
# fitcore's) keeps nothing; mixed precision adds the fp32 master copy of the parameters (4 bytes)
_OPTIMIZER_STATE = {"adam": 8, "sgd": 0}


def state_bytes(optimizer: str = "adam", precision: str = "mixed") -> StateBytes:
    """The bytes per parameter of `optimizer` at `precision`: mixed Adam 2 + 2 + 12 = 16 (the ZeRO paper's
    K = 12), mixed SGD 2 + 2 + 4 = 8, fp32 Adam 4 + 4 + 8 = 16, fp32 SGD 4 + 4 + 0 = 8."""
    if optimizer not in _OPTIMIZER_STATE:
        raise ConfigError("--optimizer", optimizer, Listed(tuple(_OPTIMIZER_STATE)))
    if precision not in PRECISIONS:
        raise ConfigError("--precision", precision, Listed(PRECISIONS))
    mixed = precision == "mixed"
    number = 2 if mixed else 4
    state = _OPTIMIZER_STATE[optimizer] + (4 if mixed else 0)
    return StateBytes(optimizer, precision, number, number, state, number)


MIXED_ADAM = state_bytes("adam", "mixed")  # the ZeRO paper's Table 1
# the default's bytes per parameter, as the module's constants
PARAM_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = MIXED_ADAM.params, MIXED_ADAM.grads, MIXED_ADAM.optimizer
STATE_BYTES = MIXED_ADAM.total  # 16
WIRE_BYTES = MIXED_ADAM.wire  # fp16 / bf16 parameters and gradients on the wire

@dataclass(frozen=True)
class Projection:
    """One row kind of the projection: a strategy's memory, bytes and messages per device, from its source.

    A strategy package gives its own (its `projections` hook); the ZeRO stages, which no package runs yet,
    are here. memory(p, g, o, k) takes the bytes of parameters, gradients and optimizer state;
    wire(model_bytes, k, batch_bytes) the bytes the busiest device sends or receives per step, from the bytes
    of the model's parameters on the wire (Ψ x StateBytes.wire).
    """

    name: str  # the row's key in the JSON ("strategy")
    title: str  # its name in the JSON and the table
    memory: Callable[[float, float, float, int], float]
    wire: Callable[[float, int, float], float]
    latency_per_device: int  # messages in a row per step, per device but one
    one_machine: bool = False  # one process: it reaches only one machine's devices
    page_title: Callable[[], str] | None = None  # its name on the page, in its language (None: title)
    # the share of a row's compute one device does: all of it (1), or 1/K of it (TP's features)
    compute_share: Callable[[int], float] = lambda k: 1.0
    # the rows of the global batch (K x rows per device) one device computes: its own 1/K of them, or all of
    # them (TP: every rank takes every row, and some of its columns)
    batch_share: Callable[[int], float] = lambda k: 1 / k
    # what wire's batch_bytes carries: the rows (False), or one activation per row (TP's outputs)
    activations: bool = False
    # what the fullest device holds beyond each other one: excess(p, g, o, k, outputs), `outputs` the global
    # batch's outputs (DataParallel's device 0: all of the optimizer state, and the outputs it gathers);
    # None where every device holds the same
    excess: Callable[[float, float, float, int, float], float] | None = None
    # messages in a row per step at K devices, where they are not latency_per_device x (K - 1) (a 2-D mesh's)
    latency: Callable[[int], int] | None = None
    # the share of a step a device idles, waiting on its neighbours (a pipeline's bubble): 0 for the others
    bubble: Callable[[int], float] = lambda k: 0.0
    # the share of the global batch's rows whose activations a device keeps from its forward until its
    # backward, at once: those it computes (None: batch_share), or fewer (a pipeline's stage 0 holds K of its
    # m microbatches under 1F1B). DataParallel's device 0 holds the gathered outputs besides: its excess
    held_share: Callable[[int], float] | None = None


def ring(model_bytes: float, k: int, batch_bytes: float = 0.0) -> float:
    """A ring all-reduce = reduce-scatter + all-gather: 2(K-1)/K of the model's bytes each."""
    return 2 * (k - 1) / k * model_bytes


def _three_halves_ring(model_bytes: float, k: int, batch_bytes: float = 0.0) -> float:
    """ZeRO-3: an all-gather of the parameters in forward, again in backward, a reduce-scatter of the
    gradients: 3(K-1)/K of the model's bytes."""
    return 3 * (k - 1) / k * model_bytes


# the ZeRO stages, which no package runs as its own row (FSDP calibrates ZeRO-3 against a real run)
ZERO = (
    Projection("zero1", "ZeRO-1", lambda p, g, o, k: p + g + o / k, ring, 2),
    Projection("zero2", "ZeRO-2", lambda p, g, o, k: p + (g + o) / k, ring, 2),
    # all-gather in forward, again in backward, reduce-scatter of the gradients
    Projection("zero3", "ZeRO-3 / FSDP", lambda p, g, o, k: (p + g + o) / k, _three_halves_ring, 3),
)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# 2-D meshes: DDP or ZeRO-3 / FSDP over dp, RowwiseParallel over tp, K = dp x tp devices.

TP_DOMAIN = 8  # tp's all-reduce runs every forward: it stays inside one machine's NVLink, as Megatron's does


def mesh_tp(k: int) -> int:
    """A 2-D row's tp size at K devices: the largest divisor of K up to one machine's TP_DOMAIN devices."""
    return max(t for t in range(1, min(k, TP_DOMAIN) + 1) if k % t == 0)


def _dp_by_tp(gathers: int) -> Callable[[float, int, float], float]:
    """The bytes a device sends on a dp x tp mesh: its tp group's all-reduce of its dp group's activations
    (batch_bytes: one number a row of the global batch, of which its dp group takes 1/dp), and its dp group's
    collectives of its tp shard of the model (gathers: 2 for DDP's all-reduce, 3 for ZeRO-3's)."""

    def wire(model_bytes: float, k: int, batch_bytes: float = 0.0) -> float:
        tp = mesh_tp(k)
        dp = k // tp
        return ring(batch_bytes / dp, tp) + gathers * (dp - 1) / dp * model_bytes / tp

    return wire


def _dp_by_tp_latency(gathers: int) -> Callable[[int], int]:
    def latency(k: int) -> int:
        tp = mesh_tp(k)
        return 2 * (tp - 1) + gathers * (k // tp - 1)

    return latency


MESH = (
    # every dp group holds the model once, cut over its tp ranks
    Projection("ddp_tp", f"DDP × TP ({TP} ≤ {TP_DOMAIN})", lambda p, g, o, k: (p + g + o) / mesh_tp(k),
               _dp_by_tp(2), 2,
               compute_share=lambda k: 1 / mesh_tp(k), batch_share=lambda k: mesh_tp(k) / k, activations=True,
               latency=_dp_by_tp_latency(2)),
    # and ZeRO-3 cuts each tp shard again over dp: every device holds 1/K
    Projection("fsdp_tp", f"ZeRO-3 × TP ({TP} ≤ {TP_DOMAIN})", lambda p, g, o, k: (p + g + o) / k,
               _dp_by_tp(3), 3,
               compute_share=lambda k: 1 / mesh_tp(k), batch_share=lambda k: mesh_tp(k) / k, activations=True,
               latency=_dp_by_tp_latency(3)),
)  # fmt: skip
