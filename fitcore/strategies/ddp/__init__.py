"""The ddp strategy: torch's DistributedDataParallel, one process per rank, each with its own data shard.

`train_ddp` starts K = cfg.workers ranks with torch.multiprocessing (spawn) on 127.0.0.1 and emits the same
events as fitcore.train.train; `train_torchrun` is one rank of a run that torchrun launched (one machine or
several). Both run the same loop, `train_rank`:

  1. every rank builds the same data and the same initial parameters from the seed;
  2. a DistributedSampler(num_replicas=K, rank, shuffle, seed, drop_last=False) gives each rank its shard of
     ceil(N / K) rows per epoch (padded by repeating the first indices of the epoch's order, so all shards are
     the same length), and `set_epoch(epoch - 1)` draws a fresh order each epoch;
  3. each rank takes ceil(batch_size / K) rows of its shard per step, so the global batch is K times that:
     batch_size when K divides it, up to K - 1 rows more otherwise (DDP needs equal steps on every rank);
  4. forward and the loss on the rank's own rows only; backward, during which DDP all-reduces (averages)
     the gradients; then the same optimizer step everywhere, so the parameters stay identical.

Because every rank has the same number of rows at every step, the averaged gradient is the gradient of the
mean loss over the global batch: DDP matches single-process training on the concatenated rows.

The package, by responsibility:
  shards.py    how an epoch is cut: `Layout`, each rank's shard from DistributedSampler, the shards as data;
  rank.py      one rank's loop, shared by both launchers, and what the ranks report (Step, group, finals);
  launcher.py  `train_ddp`: the TCP store on loopback, the spawned ranks, the gate between steps;
  torchrun.py  `train_torchrun`: one rank of a torchrun launch, and the checks of torchrun's environment.
What the user reads lives beside DataParallel's: the console lines in fitcore.console, the page's shard
tables and shard grid in fitcore.view.ddp and the explanation in fitcore.explain.
"""

from fitcore.console import final_lines, group_line, shard_lines
from fitcore.console import rank_step_lines as step_lines
from fitcore.ddp.launcher import train_ddp
from fitcore.ddp.rank import (
    final_value,
    group_value,
    placement,
    rank_label,
    rank_labels,
    rank_step,
    train_rank,
)
from fitcore.ddp.shards import (
    Layout,
    epoch_shards,
    epoch_value,
    first_epoch_value,
    shards_value,
)
from fitcore.ddp.torchrun import TorchrunEnv, config_for_torchrun, exit_rank, torchrun_env, train_torchrun

__all__ = [
    "Layout",
    "TorchrunEnv",
    "config_for_torchrun",
    "epoch_shards",
    "epoch_value",
    "exit_rank",
    "final_lines",
    "final_value",
    "first_epoch_value",
    "group_line",
    "group_value",
    "placement",
    "rank_label",
    "rank_labels",
    "rank_step",
    "shard_lines",
    "shards_value",
    "step_lines",
    "torchrun_env",
    "train_ddp",
    "train_rank",
    "train_torchrun",
]
