"""The lab's commands, above the strategies: `fitcore compare` (compare.py), the traps a class is shown
(traps/: BatchNorm, accumulation, an uneven shard on gloo) and the what-if (whatif.py). Each reads every
strategy through the registry."""
