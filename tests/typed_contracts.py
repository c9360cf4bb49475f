"""Held by the type checker, not run: every registered strategy's view module is a
fitcore.view.contract.StrategyView, and every trainer a fitcore.train.Trainer, with the floor's real types
(the registry, below that floor, types them loosely). pyproject.toml's [tool.mypy] lists this file, so
tests/test_types.py fails when a package's view or trainer stops matching its contract."""

from __future__ import annotations

from fitcore.engine.launcher import launch
from fitcore.engine.torchrun import train_torchrun
from fitcore.strategies.dataparallel import view as dataparallel_view
from fitcore.strategies.dataparallel.train import train as dataparallel_train
from fitcore.strategies.ddp import view as ddp_view
from fitcore.strategies.fsdp import view as fsdp_view
from fitcore.strategies.pp import view as pp_view
from fitcore.strategies.tp import view as tp_view
from fitcore.train import Trainer
from fitcore.view.contract import StrategyView
from tests import zero_strategy

VIEWS: tuple[StrategyView, ...] = (dataparallel_view, ddp_view, fsdp_view, pp_view, tp_view, zero_strategy)
TRAINERS: tuple[Trainer, ...] = (dataparallel_train, launch, train_torchrun)
