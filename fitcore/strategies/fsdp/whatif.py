"""FSDP in `fitcore whatif`: the ZeRO-3 rows' calibration point, the bytes this run's own collectives sent.

The projection's ZeRO-3 row (fitcore.lab.whatif) sends 3(K-1)/K of the parameters per device and step: an
all-gather before forward, another in backward, a reduce-scatter. `calibrate` runs fully_shard for real at
K ranks on this run's model and puts what each rank's collectives sent beside what that formula says for the
same K, parameters and itemsize. They differ by the padding: fully_shard pads every parameter's shard to
ceil(n / K) rows, which costs a tiny model like this one a factor and a large model nothing.
"""

from __future__ import annotations

from dataclasses import replace

from fitcore.core.config import FitConfig, validate
from fitcore.core.errors import ConfigError, Text
from fitcore.core.events import Step
from fitcore.core.i18n import t
from fitcore.strategies.fsdp.layout import ALL_GATHER, REDUCE_SCATTER
from fitcore.strategies.fsdp.name import NAME

PROJECTIONS: tuple = ()  # its rows are the ZeRO stages' of fitcore.lab.whatif, ZeRO-3 above all
ROW = "zero3"  # the projected row it calibrates
STEPS = 3  # steps of the calibration run: the bytes are the same every step


def calibrate(cfg: FitConfig, k: int) -> dict:
    """Run FSDP (ZeRO-3) on k CPU ranks for a few steps of cfg; the bytes its collectives sent per rank and
    step, against the ZeRO-3 projection's formula at the same K, parameters and float32 numbers."""
    from fitcore.core.projection import ZERO, state_bytes
    from fitcore.protocols import registry

    run = validate(replace(cfg, strategy=NAME, devices="cpu", workers=k, reshard_after_forward=True,
                           epochs=1, batch_size=cfg.data_size))  # fmt: skip
    steps: list[Step] = []
    ended = registry.strategy(NAME).train(run, lambda e: steps.append(e) if isinstance(e, Step) else None)
    steps = steps[:STEPS]
    if ended.status != "finished" or not steps:  # refused with its reason, as whatif's own run is
        raise ConfigError("workers", k, Text("cli.whatif.allowed.finished", message=ended.message))
    sent = [
        sum(p.bytes for p in s.phases.phases() if p.name in (ALL_GATHER, REDUCE_SCATTER)) / k for s in steps
    ]
    fp32 = state_bytes(cfg.optimizer, "fp32")  # this run's numbers on the wire: float32
    params, itemsize = cfg.n_features + 1, fp32.wire
    formula = next(z for z in ZERO if z.name == ROW).wire(params * fp32.wire, k, 0.0)
    measured = max(sent)
    return {
        "strategy": ROW,
        "devices": k,
        "params": params,
        "itemsize": itemsize,
        "measured_bytes_per_device": measured,
        "formula_bytes_per_device": formula,
        "ratio": measured / formula if formula else None,
        "label": "measured on this machine",
        "note": t(
            "cli.whatif.calibration",
            k=k,
            measured=f"{measured:g}",
            formula=f"{formula:g}",
            ratio=f"{measured / formula:.2f}" if formula else "-",
        ),  # fmt: skip
    }
