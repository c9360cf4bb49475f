"""fitcore: fit y = X·W + b on several devices (DataParallel, DDP, FSDP) and show how each step is split.

This module is the top floor: before anything else it registers the strategies (the built-in packages in
`BUILTIN`, the default first, then any an installed package declares under the `fitcore.strategies` entry
point), so that every module below finds them in fitcore.protocols.registry, which imports none of them.
"""

from importlib.metadata import entry_points

from fitcore.protocols import registry
from fitcore.strategies import dataparallel, ddp, fsdp, pp, tp

BUILTIN = (dataparallel, ddp, fsdp, tp, pp)  # the registry's list: one line per strategy, the default first
for _package in BUILTIN:
    registry.register(_package.STRATEGY)
for _point in entry_points(group="fitcore.strategies"):  # an outside package's strategy: name = module:attr
    registry.register(_point.load())

# the library's API, imported once the registry is filled
from fitcore.core.config import ConfigError, FitConfig, Limits, validate  # noqa: E402
from fitcore.core.devices import DevicePlan, cuda_gpus, parse_devices  # noqa: E402
from fitcore.core.events import Replica, RunEnded, RunStarted, Status, Step  # noqa: E402
from fitcore.core.parallel import chunk_sizes  # noqa: E402

# each strategy's training function is its package's (fitcore.strategies); fitcore.core.train holds what they
# share
from fitcore.core.train import Control  # noqa: E402
from fitcore.runs.runner import Run, Snapshot  # noqa: E402

__all__ = [
    "ConfigError",
    "Control",
    "DevicePlan",
    "FitConfig",
    "Limits",
    "Replica",
    "Run",
    "RunEnded",
    "RunStarted",
    "Snapshot",
    "Status",
    "Step",
    "chunk_sizes",
    "cuda_gpus",
    "parse_devices",
    "validate",
]
