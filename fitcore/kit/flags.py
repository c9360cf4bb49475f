"""The training flags every command shares: the main command's, compare's and whatif's.

They sit below the commands (fitcore.cli, fitcore.lab.compare, fitcore.lab.whatif import this module, and it
imports none of them): the flags a parser adds, the FitConfig they make, and a ConfigError named by its flag.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any, Callable

from fitcore.core.config import Checked, ConfigError, FitConfig, check, validate
from fitcore.core.errors import Listed, Text
from fitcore.core.i18n import t
from fitcore.engine.torchrun import config_for_torchrun, torchrun_env
from fitcore.protocols import registry


def add_training_flags(p: argparse.ArgumentParser) -> None:
    """The flags that make a FitConfig: the main command's, and compare's and whatif's too."""
    d = FitConfig()
    # every value is taken as text and converted by FitConfig.from_mapping, so that the CLI and the
    # dashboard give the same message for the same bad value
    p.add_argument(
        "--weights",
        nargs="+",
        default=None,
        help=t("cli.help.weights", default=" ".join(map(str, d.weights))),
    )
    p.add_argument("--bias", help=t("cli.help.bias", default=d.bias))
    p.add_argument("--noise", help=t("cli.help.noise", default=d.noise))
    p.add_argument("--data-size", help=t("cli.help.data_size", default=d.data_size))
    p.add_argument("--batch-size", help=t("cli.help.batch_size", default=d.batch_size))
    p.add_argument("--epochs", help=t("cli.help.epochs", default=d.epochs))
    p.add_argument("--lr", help=t("cli.help.lr", default=d.lr))
    p.add_argument("--optimizer", help=t("cli.help.optimizer", default=d.optimizer))
    p.add_argument("--no-shuffle", action="store_true", help=t("cli.help.no_shuffle"))
    p.add_argument("--seed", help=t("cli.help.seed", default=d.seed))
    p.add_argument("--devices", help=t("cli.help.devices", default=d.devices))
    ranked = [s.name for s in registry.STRATEGIES.values() if s.processes]
    names = Listed(registry.NAMES)
    p.add_argument("--strategy", help=t("cli.help.strategy", names=names, default=d.strategy))
    p.add_argument("--workers", help=t("cli.help.workers", names=Listed(ranked), default=d.workers))
    p.add_argument("--mesh", help=t("cli.help.mesh"))
    for option in registry.OPTIONS:  # a strategy's own switches (FSDP's reshard_after_forward)
        flag, default = "--" + option.replace("_", "-"), getattr(d, option)
        p.add_argument(flag, help=t(f"cli.help.{option}", default=default))


def config_from_args(args: argparse.Namespace) -> FitConfig:
    """The flags' config, validated (under torchrun, for this rank: the world size is torchrun's)."""
    return _from_args(args, validate, torchrun=True)


def checked_from_args(args: argparse.Namespace) -> Checked:
    """The flags' config checked, with its device plan: what a lab command (compare, whatif) runs on, in
    one process of its own (never a rank of a torchrun launch)."""
    return _from_args(args, check, torchrun=False)


def _from_args(args: argparse.Namespace, checker: Callable[[FitConfig], Any], torchrun: bool) -> Any:
    names = {f.name for f in fields(FitConfig)}
    raw = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if args.no_shuffle:
        raw["shuffle"] = False
    if raw.get("data") and "batch_size" not in raw:  # a file of fewer rows than the default batch: one batch
        from fitcore.core import csvdata

        named = FitConfig.from_mapping({k: raw[k] for k in ("data", "target", "features") if k in raw})
        rows = len(csvdata.load(named.data, named.target, named.features).y)
        raw["batch_size"] = min(FitConfig.batch_size, rows)
    cfg = FitConfig.from_mapping(raw)
    env = torchrun_env() if torchrun and registry.strategy(cfg.strategy).processes else None
    if env is not None and registry.strategy(cfg.strategy).torchrun is None:  # an outside package's, say
        names = ", ".join(s.name for s in registry.STRATEGIES.values() if s.torchrun is not None)
        raise ConfigError("strategy", cfg.strategy, Text("config.torchrun_strategies", names=names))
    if env is not None:  # one rank of a torchrun launch: the world size comes from torchrun
        return config_for_torchrun(cfg, env, workers_given="workers" in raw)
    try:
        return checker(cfg)
    except ConfigError as exc:
        if exc.field in registry.OPTIONS and exc.field in raw:  # a switch: quoted as typed, not as Python's
            raise exc.as_typed(raw[exc.field]) from None
        raise


def flag_error(exc: ConfigError) -> str:
    """A ConfigError named by the flag the user typed: "--batch-size: got 300; allowed: ..."."""
    flagged = {f.name for f in fields(FitConfig)} - {"shuffle", "data_sha256"}  # no value to refuse
    flagged |= {"record", "trace"}
    return exc.named("--" + exc.field.replace("_", "-") if exc.field in flagged else exc.field)
