"""fitcore: fit y = X·W + b with nn.DataParallel (or its CPU emulation) and show how each batch is split."""

from fitcore.config import ConfigError, FitConfig, Limits, validate
from fitcore.devices import DevicePlan, cuda_gpus, parse_devices
from fitcore.parallel import chunk_sizes
from fitcore.runner import Run, Snapshot

# the training function is fitcore.train.train; re-exporting it here would hide the module fitcore.train
from fitcore.train import Control, Replica, RunEnded, RunStarted, Step

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
    "Step",
    "chunk_sizes",
    "cuda_gpus",
    "parse_devices",
    "validate",
]
