"""fitcore: fit y = X·W + b with nn.DataParallel (or its CPU emulation) and show how each batch is split."""

from fitcore.config import ConfigError, FitConfig, Limits, validate
from fitcore.devices import DevicePlan, cuda_gpus, parse_devices
from fitcore.events import Replica, RunEnded, RunStarted, Status, Step
from fitcore.parallel import chunk_sizes
from fitcore.runner import Run, Snapshot

# each strategy's training function is its package's (fitcore.strategies); fitcore.train holds what they share
from fitcore.train import Control

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
