"""The equivalence lab: does DataParallel, or DDP, give the same model as one device, and when does it not?

The same data, seed and initial parameters are trained three ways, step by step:
  reference     one device, plain nn.Linear;
  dataparallel  fitcore's DataParallel on the chosen devices (nn.DataParallel on 2+ GPUs, the CPU emulation on
                virtual:K), fed the very same batches as the reference;
  ddp           DDP's arithmetic with K ranks, simulated exactly in this one process: each rank's rows from
                DistributedSampler, its own loss and gradient, the gradients divided by K and summed (what
                DDP's all-reduce hook does), then the same optimizer step for every rank. The ranks' replicas
                stay identical, so one copy of the parameters stands for all of them. tests/test_compare.py
                checks this simulation against torch's own DDP (fitcore.strategies.ddp, gloo) to 1e-6.

The step schedule is DDP's: at each step the reference and DataParallel get the dataset rows the ranks hold,
in rank order, without DistributedSampler's padding duplicates (a one-device run has none), so that a
difference is the strategy's arithmetic and not the shuffle.

`run(cfg, toggles)` returns plain data (`{"config": ..., "results": [...]}`) for the CLI and the page.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from typing import NamedTuple

import torch

from fitcore import strategies
from fitcore.cliparse import Parser, command, error_line
from fitcore.config import FitConfig
from fitcore.data import make_data
from fitcore.devices import DevicePlan, parse_devices
from fitcore.equivalence import (
    FAILED,
    TOL,
    Comparer,
    StepRows,
    Toggles,
    Trainer,
    finite,
    first_divergent,
    loss_of,
    max_diff,
    rank_batch,
    schedule,
)
from fitcore.equivalence import (
    result as row_of,
)
from fitcore.errors import ConfigError, Text
from fitcore.flags import add_training_flags, config_from_args, flag_error
from fitcore.i18n import count, t
from fitcore.shards import steps_per_epoch
from fitcore.text import pad
from fitcore.traps import FLAGS as TRAP_FLAGS
from fitcore.traps import Traps
from fitcore.traps import add_flags as add_trap_flags
from fitcore.traps import apply as apply_traps
from fitcore.traps import from_args as traps_from_args


class _Trained(NamedTuple):
    per_step: dict[str, list[float]]  # strategy -> the largest |parameter - reference| after each step
    finals: dict[str, list[float]]  # "reference" and each strategy -> the final parameters
    steps: list[StepRows]


def train_all(cfg: FitConfig, plan: DevicePlan, toggles: Toggles, names: tuple[str, ...] = ()) -> _Trained:
    """Train the reference and the strategies `names` (all of them when empty) on DDP's schedule: per-step
    differences and final parameters. Each strategy's `comparer` takes the reference's batches as they come
    (`batch`) and the ranks' rows of the step (`step`), and says how far it is from the reference."""
    device = plan.first_device
    data = make_data(cfg, device)
    reference = Trainer(cfg, data, device)
    trainers: dict[str, Comparer] = {}
    for name in names or strategies.NAMES:
        trainers[name] = strategies.strategy(name).comparer(cfg, data, device, plan, toggles)
    per_step: dict[str, list[float]] = {name: [] for name in trainers}
    steps = list(schedule(cfg, len(plan.labels), toggles))
    red = toggles.loss_reduction
    try:
        for n, rows in enumerate(steps, 1):
            for ids in rows.batches:  # the reference and DataParallel: the very same batches
                finite(reference.step(ids, red), "reference", n, cfg.lr)
                for trainer in trainers.values():
                    trainer.batch(ids, red, n, reference)
            for name, trainer in trainers.items():
                per_step[name].append(trainer.step(rows, red, n, reference))
        finals = {"reference": reference.flat().tolist()}
        finals.update({name: t.flat().tolist() for name, t in trainers.items()})
    finally:
        for t in trainers.values():
            t.close()
    return _Trained(per_step, finals, steps)


# ---------------------------------------------------------------------------------------------------------
# Causes: each toggle's one-line reason and measured effect.


def _worst(trained: _Trained, strategy: str) -> float:
    return max(trained.per_step[strategy], default=0.0)


def _shared_causes(cfg, plan, toggles, trained) -> dict[str, list[str]]:
    """Toggles that change what every strategy sees, measured against the same strategy without them."""
    k = len(plan.labels)
    causes: dict[str, list[str]] = {name: [] for name in trained.per_step}
    if not toggles.set_epoch:
        other = train_all(cfg, plan, replace(toggles, set_epoch=True), tuple(trained.per_step))
        why = t("cli.compare.set_epoch.why", epochs=cfg.epochs)
        if not cfg.shuffle:
            why = t("cli.compare.set_epoch.none")
        for name in causes:
            d = max(abs(a - b) for a, b in zip(trained.finals[name], other.finals[name]))
            causes[name].append(t("cli.compare.cause.set_epoch", why=why, d=f"{d:.3g}"))
    if toggles.drop_last:
        other = train_all(cfg, plan, replace(toggles, drop_last=False), tuple(trained.per_step))
        kept = cfg.data_size // k * k
        unseen = set()
        for s in trained.steps:
            unseen.update(row for rows in s.ranks for row in rows)
        never = cfg.data_size - len(unseen)
        for name in causes:
            d = max(abs(a - b) for a, b in zip(trained.finals[name], other.finals[name]))
            causes[name].append(
                t("cli.compare.cause.drop_last", kept=kept, rows=cfg.data_size, unseen=cfg.data_size - kept,
                  never=never, d=f"{d:.3g}")
            )  # fmt: skip
    return causes


# ---------------------------------------------------------------------------------------------------------
# The lab's answer as plain data.


def engines(plan: DevicePlan) -> dict[str, str]:
    """Which engine ran each strategy: say what is real, emulated or simulated."""
    named = {name: s.engine(plan) for name, s in strategies.STRATEGIES.items()}
    return {"reference": t("cli.compare.engine.reference", device=plan.first_device), **named}


def run(
    cfg: FitConfig,
    toggles: Toggles = Toggles(),
    plan: DevicePlan | None = None,
    max_steps: int | None = None,
    traps: Traps = Traps(),
) -> dict:
    """Train the three ways and compare them step by step.

    Args:
        cfg: a validated config; its devices give K, the DataParallel devices and the number of DDP ranks.
        toggles: what to change from the setting under which DDP matches.
        plan: the parsed devices (parsed from cfg.devices when None).
        max_steps: refuse (ConfigError on epochs) a run of more DDP steps than this; None: no bound.
        traps: the question of fitcore.traps to ask (BatchNorm, accumulation, uneven inputs), if any; its
            rows take the place of the plain ones.

    Returns:
        {"config": ..., "results": [{"strategy", "devices", "max_abs_diff", "first_divergent_step",
        "final_abs_diff", "causes", "per_step"}, ...]}: per_step[i] is the largest |parameter - reference|
        after DDP's step i + 1 (for DataParallel, the largest over the reference's batches of that step).
    """
    toggles, traps = toggles.validate(), traps.validate()
    plan = plan or parse_devices(cfg.devices)
    k = len(plan.labels)
    if max_steps is not None:
        steps = cfg.epochs * steps_per_epoch(cfg.data_size, k, rank_batch(cfg, k, toggles), toggles.drop_last)
        if steps > max_steps:
            allowed = Text("cli.compare.max_steps", most=max_steps, steps=steps)
            raise ConfigError("epochs", cfg.epochs, allowed)
    t0 = time.perf_counter()
    trained = train_all(cfg, plan, toggles)
    shared = _shared_causes(cfg, plan, toggles, trained)
    causes = {name: s.compare_causes(cfg, plan, toggles, trained) + shared[name]
              for name, s in strategies.STRATEGIES.items()}  # fmt: skip
    results = [row_of(name, k, trained.per_step[name], causes[name]) for name in strategies.NAMES]
    results = apply_traps(cfg, plan, toggles, traps, results)
    # one truth: the final parameters of the rows shown, a real run's where a trap ran one (and the
    # reference it was measured against), and no strategy that has no row
    finals = {name: trained.finals[name] for name in ("reference", *(r["strategy"] for r in results))}
    for r in results:
        finals.update(r.pop("final_parameters", {}))
    config = {
        **cfg.to_dict(),
        **asdict(toggles),
        **asdict(traps),
        "k": k,
        "steps": len(trained.steps),
        "rows_per_rank_step": rank_batch(cfg, k, toggles),
        "tolerance": TOL,
        "engines": {name: text for name, text in engines(plan).items() if name in finals},
        "final_parameters": finals,
        "seconds": time.perf_counter() - t0,
    }
    return {"config": config, "results": results}


def table_lines(result: dict, plan: DevicePlan | None = None) -> list[str]:
    """The result for a terminal: a row per strategy, its causes beneath it (plan: the run's devices)."""
    cfg = result["config"]
    plan = plan or parse_devices(cfg["devices"])
    head = (t("cli.compare.col.strategy"), t("cli.compare.col.devices"), t("cli.compare.col.result"),
            t("cli.compare.col.diff"), t("cli.compare.col.first", tol=format(TOL, "g")),
            t("cli.compare.col.engine"))  # fmt: skip
    lines = [
        t("cli.compare.title", steps=cfg["steps"], k=cfg["k"]),
        t("cli.compare.rows"),
        "",
        f"{pad(head[0], 14)}{pad(head[1], 8, True)}  {pad(head[2], 9)}{pad(head[3], 13, True)}  "
        f"{pad(head[4], 20)}{head[5]}",
    ]
    for r in result["results"]:
        first = "-" if r["first_divergent_step"] is None else str(r["first_divergent_step"])
        engine = strategies.strategy(r["strategy"]).engine_word(plan)
        if "seconds" in r:  # a real run of fitcore.traps: its engine and its own time
            engine = t("traps.word.real", engine=r["engine"], seconds=f"{r['seconds']:.1f}")
        status = pad(t(f"cli.compare.status.{r['status']}"), 9)
        lines.append(
            f"{r['strategy']:<14}{r['devices']:>8}  {status}{r['max_abs_diff']:>13.3g}  {first:<20}{engine}"
        )
        lines += [f"    - {c}" for c in r["causes"]]
    names = {"reference": t("cli.compare.name.reference")}  # the strategies keep their code names
    engines = cfg["engines"] | {r["strategy"]: r["engine"] for r in result["results"] if "engine" in r}
    lines += ["", *(f"{names.get(name, name)}: {text}" for name, text in engines.items())]
    return lines


# ---------------------------------------------------------------------------------------------------------
# `python -m fitcore compare`


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m fitcore compare", description=t("cli.compare.description"))
    add_training_flags(p)
    g = p.add_argument_group(t("cli.compare.toggles"))
    g.add_argument("--loss-reduction", default="mean", help=t("cli.compare.help.loss_reduction"))
    g.add_argument("--drop-last", action="store_true", help=t("cli.compare.help.drop_last"))
    g.add_argument("--no-set-epoch", action="store_true", help=t("cli.compare.help.no_set_epoch"))
    g.add_argument("--per-rank-batch", action="store_true", help=t("cli.compare.help.per_rank_batch"))
    g.add_argument("--scale-lr", action="store_true", help=t("cli.compare.help.scale_lr"))
    add_trap_flags(p)
    p.add_argument("--json", action="store_true", help=t("cli.help.json"))
    return p


def _flag(exc: ConfigError) -> str:
    toggles = {"loss_reduction": "--loss-reduction", **TRAP_FLAGS}
    return exc.named(toggles[exc.field]) if exc.field in toggles else flag_error(exc)


@command
def main(argv: list[str]) -> int:
    """`python -m fitcore compare [training flags] [toggles] [--json]`; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        toggles = Toggles(
            loss_reduction=str(args.loss_reduction).strip().lower(),
            drop_last=args.drop_last,
            set_epoch=not args.no_set_epoch,
            per_rank_batch=args.per_rank_batch,
            scale_lr=args.scale_lr,
        ).validate()
        plan = parse_devices(cfg.devices)
        result = run(cfg, toggles, plan, traps=traps_from_args(args))
    except ConfigError as exc:
        print(error_line("fitcore compare", _flag(exc)), file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else "\n".join(table_lines(result, plan)), flush=True)
    return 1 if any(r["status"] == FAILED for r in result["results"]) else 0  # a failed run is no pass


# ---------------------------------------------------------------------------------------------------------
# Ranks that each take their own rows (DDP, FSDP): their arithmetic in one process, and why they differ.


class RanksComparer(Trainer):
    """K ranks on their own rows in one process: per-rank loss and gradient, then the average DDP's
    all-reduce (and FSDP's reduce-scatter, shard by shard) makes; a subclass names its strategy."""

    name = ""  # the strategy whose column this is

    def ddp_step(self, ranks: tuple[list[int], ...], reduction: str) -> float:
        k = len(ranks)
        total, losses = None, []
        for ids in ranks:  # rank r: forward and backward on its own rows only
            xb, yb = self.rows(ids)
            loss = loss_of(self.raw(xb), yb, reduction)
            grads = torch.autograd.grad(loss, self.params)
            # DDP's allreduce_hook divides each rank's gradient by K, then all-reduces with a sum
            shares = [g / k for g in grads]
            total = shares if total is None else [t + s for t, s in zip(total, shares)]
            losses.append(loss.item())
        for p, g in zip(self.params, total):
            p.grad = g
        self.optimizer.step()
        return sum(losses) / k

    def __init__(self, cfg: FitConfig, data, device, plan: DevicePlan, toggles: Toggles):
        k = len(plan.labels)
        super().__init__(cfg, data, device, lr=cfg.lr * k if toggles.scale_lr else cfg.lr)

    def batch(self, ids: list[int], reduction: str, n: int, reference: Trainer) -> None:
        pass  # the ranks step once on the whole step's rows

    def step(self, rows: StepRows, reduction: str, n: int, reference: Trainer) -> float:
        finite(self.ddp_step(rows.ranks, reduction), self.name, n, self.optimizer.param_groups[0]["lr"])
        return max_diff(self.flat(), reference.flat())


def rank_causes(cfg, plan, toggles, trained, name: str, who: str) -> list[str]:
    """The reasons a strategy on DistributedSampler's rows (`name`, called `who`: DDP, FSDP) differs from the
    reference, each measured; none when it matches."""
    k, worst = len(plan.labels), _worst(trained, name)
    if first_divergent(trained.per_step[name]) is None:
        return []
    causes = []
    padded = [s for s in trained.steps if s.padded]
    if padded:
        first = trained.steps.index(padded[0]) + 1
        # the step the table names too: the padding's first step is not always where the difference shows
        diverges = first_divergent(trained.per_step[name])
        causes.append(t(
            "cli.compare.cause.padding", who=who, padded=count("view.count.row", padded[0].padded), k=k,
            rows=cfg.data_size, first=first, diverges=diverges, tol=format(TOL, "g"),
        ))  # fmt: skip
    reasons = {
        "loss_reduction": ("sum", t("cli.compare.cause.sum", k=k, who=who)),
        "per_rank_batch": (
            True,
            t(
                "cli.compare.cause.per_rank",
                batch=cfg.batch_size,
                global_batch=k * cfg.batch_size,
                k=k,
                who=who,
            ),
        ),
        "scale_lr": (True, t("cli.compare.cause.scale_lr", k=k, lr=f"{cfg.lr:g}", who=who)),
    }
    for name, (on, text) in reasons.items():
        if getattr(toggles, name) != on or k == 1:
            continue
        off = replace(toggles, **{name: Toggles().__getattribute__(name)})
        without = _worst(train_all(cfg, plan, off, (name,)), name)
        if without < worst / 2 or without <= TOL:  # taking it away brings DDP closer: it made the difference
            measured = t("cli.compare.measured", text=text, worst=f"{worst:.3g}", without=f"{without:.3g}")
            causes.append(measured)
    return causes
