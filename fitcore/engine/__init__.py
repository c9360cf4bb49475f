"""The engine every ranked strategy stands on, owned by none of them: PyTorch's process group and launchers.

  rank.py      what every rank shares: its device and label, the table the ranks all-gather each step, its
               clock, and what the ranks report as events (the Step, the process group, the finals);
  warmstart.py the ranks' warm start: a forkserver that imports torch once, its preload and its lifetime;
  launcher.py  `launch(cfg, ..., engine)`: the TCP store on loopback, K spawned ranks forked from
               warmstart.py's server, the gate between steps, the reports turned into events;
  torchrun.py  one rank of a `torchrun` launch (one machine or several), rank 0 emitting the events;
  hosts.py     network namespaces as hosts on one machine (root), for runs across hosts;
  across.py    a run across those hosts under torchrun, and what its recording must show.

A strategy gives the engine an `Engine` (launcher.py): its rank loop and how its reports read. DDP's, FSDP's
and TP's live in their packages; nothing here imports one (pyproject.toml's import-linter contracts).
"""
