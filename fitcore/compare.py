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
import math
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterator, Mapping, NamedTuple, Protocol

import torch
import torch.nn.functional as F

from fitcore import strategies
from fitcore.cliparse import Parser, command, error_line
from fitcore.config import FitConfig, _parse_bool
from fitcore.data import make_data
from fitcore.devices import DevicePlan, parse_devices
from fitcore.errors import ConfigError, Listed, Text
from fitcore.flags import add_training_flags, config_from_args, flag_error
from fitcore.i18n import t
from fitcore.parallel import EmulatedDataParallel
from fitcore.shards import epoch_shards, is_padding, steps_per_epoch
from fitcore.text import pad
from fitcore.train import first_model, make_optimizer
from fitcore.traps import FLAGS as TRAP_FLAGS
from fitcore.traps import Traps
from fitcore.traps import add_flags as add_trap_flags
from fitcore.traps import apply as apply_traps
from fitcore.traps import from_args as traps_from_args

TOL = 1e-5  # a parameter further than this from the reference's counts as a difference
LOSS_REDUCTIONS = ("mean", "sum")


@dataclass(frozen=True)
class Toggles:
    """What trips real users of DDP, one switch each; the defaults are the ones under which DDP matches."""

    loss_reduction: str = "mean"  # "mean" or "sum": F.mse_loss(reduction=...) on every strategy
    drop_last: bool = False  # DistributedSampler(drop_last=True): floor(N / K) rows a rank, no padding
    set_epoch: bool = True  # sampler.set_epoch(epoch) before each epoch; False: epoch 1's order every epoch
    per_rank_batch: bool = False  # every rank takes --batch-size rows (a global batch of K x B), not B / K
    scale_lr: bool = False  # DDP's learning rate times K (the linear scaling rule); the others keep --lr

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "Toggles":
        """Toggles from raw values (a form, a URL); unknown names and bad values raise ConfigError."""
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for name, raw in values.items():
            if name not in known:
                raise ConfigError(name, raw, Text("config.one_of", names=", ".join(sorted(known))))
            if name == "loss_reduction":
                kwargs[name] = str(raw).strip().lower()
            else:
                kwargs[name] = _parse_bool(name, raw)
        return cls(**kwargs).validate()

    def validate(self) -> "Toggles":
        if self.loss_reduction not in LOSS_REDUCTIONS:
            raise ConfigError("loss_reduction", self.loss_reduction, Listed(LOSS_REDUCTIONS))
        return self


class StepRows(NamedTuple):
    """The dataset rows of one DDP step."""

    epoch: int
    ranks: tuple[list[int], ...]  # each rank's rows, DistributedSampler's padding included
    batches: tuple[list[int], ...]  # the reference's batches: the ranks' rows, in rank order, no padding
    padded: int  # padding duplicates among the ranks' rows


def rank_batch(cfg: FitConfig, k: int, toggles: Toggles) -> int:
    """Rows each rank takes per step: ceil(B / K) as fitcore's DDP does, or B with per_rank_batch."""
    return cfg.batch_size if toggles.per_rank_batch else math.ceil(cfg.batch_size / k)


def schedule(cfg: FitConfig, k: int, toggles: Toggles) -> Iterator[StepRows]:
    """Every DDP step of the run, in order, with the rows each rank holds and the reference's batches.

    Entry i of rank r's shard is position r + i*K of the padded order; positions from N on are the padding.
    """
    b = rank_batch(cfg, k, toggles)
    for epoch in range(1, cfg.epochs + 1):
        n, shuffle, seed = cfg.data_size, cfg.shuffle, cfg.seed
        shards = epoch_shards(n, k, shuffle, seed, epoch, toggles.drop_last, toggles.set_epoch)
        for start in range(0, len(shards[0]), b):
            ranks = tuple(shard[start : start + b] for shard in shards)
            real = [
                row
                for r, rows in enumerate(ranks)
                for i, row in enumerate(rows, start)
                if not is_padding(r, i, k, cfg.data_size)
            ]
            padded = sum(len(rows) for rows in ranks) - len(real)
            # with per_rank_batch the one-device run keeps its --batch-size: several steps on the same rows
            size = cfg.batch_size if toggles.per_rank_batch else len(real)
            batches = tuple(real[i : i + size] for i in range(0, len(real), size))
            yield StepRows(epoch, ranks, batches, padded)


# ---------------------------------------------------------------------------------------------------------
# The three ways to train. Each takes a step on given rows and exposes its parameters.


def loss_of(out: torch.Tensor, y: torch.Tensor, reduction: str) -> torch.Tensor:
    return F.mse_loss(out, y, reduction=reduction)


class Trainer:
    """A model, its optimizer and the data: the reference, and the base of the other two."""

    def __init__(self, cfg: FitConfig, data, device, model=None, lr: float | None = None, make=None):
        self.X, self.y = data
        self.device = device
        self.raw = first_model(cfg, make=make)  # LinearModel, or fitcore.traps' models with the same .fc
        self.raw.to(device)
        self.model = model(self.raw) if model else self.raw
        self.params = list(self.raw.parameters())
        self.optimizer = make_optimizer(replace(cfg, lr=lr or cfg.lr), self.params)

    def rows(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.tensor(ids, dtype=torch.long, device=self.device)
        return self.X.index_select(0, idx), self.y.index_select(0, idx)  # (b, d), (b, 1)

    def step(self, ids: list[int], reduction: str) -> float:
        xb, yb = self.rows(ids)
        loss = loss_of(self.model(xb), yb, reduction)  # outside the wrapped module, as the trainers do
        for p in self.params:
            p.grad = None
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def flat(self) -> torch.Tensor:
        """Every parameter in one vector: W's d entries, then b."""
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def close(self) -> None:
        if isinstance(self.model, EmulatedDataParallel):
            self.model.close()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


class Comparer(Protocol):
    """One strategy's column of the lab (its package's `comparer` makes it)."""

    def batch(self, ids: list[int], reduction: str, n: int, reference: Trainer) -> None:
        """The reference has just stepped on the batch `ids` of step n."""

    def step(self, rows: StepRows, reduction: str, n: int, reference: Trainer) -> float:
        """Step n is over for the reference: take it, and return the largest |parameter - reference|."""

    def flat(self) -> torch.Tensor: ...

    def close(self) -> None: ...


def finite(value: float, who: str, step: int, lr: float) -> None:
    if not math.isfinite(value):
        why = Text("cli.compare.diverged", who=Text(f"cli.compare.who.{who}"), step=step, value=value)
        raise ConfigError("lr", lr, why)


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


def first_divergent(per_step: list[float], tol: float = TOL) -> int | None:
    """The 1-based step where the difference first exceeds `tol`; None if it never does."""
    return next((i for i, v in enumerate(per_step, 1) if v > tol), None)


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
    results = []
    for name in strategies.NAMES:
        per_step = trained.per_step[name]
        results.append(
            {
                "strategy": name,
                "devices": k,
                "max_abs_diff": max(per_step, default=0.0),
                "first_divergent_step": first_divergent(per_step),
                "final_abs_diff": per_step[-1] if per_step else 0.0,  # where the difference ends
                "causes": causes[name],
                "per_step": per_step,
            }
        )
    results = apply_traps(cfg, plan, toggles, traps, results)
    config = {
        **cfg.to_dict(),
        **asdict(toggles),
        **asdict(traps),
        "k": k,
        "steps": len(trained.steps),
        "rows_per_rank_step": rank_batch(cfg, k, toggles),
        "tolerance": TOL,
        "engines": engines(plan),
        "final_parameters": trained.finals,
        "seconds": time.perf_counter() - t0,
    }
    return {"config": config, "results": results}


def table_lines(result: dict, plan: DevicePlan | None = None) -> list[str]:
    """The result for a terminal: a row per strategy, its causes beneath it (plan: the run's devices)."""
    cfg = result["config"]
    plan = plan or parse_devices(cfg["devices"])
    head = (t("cli.compare.col.strategy"), t("cli.compare.col.devices"), t("cli.compare.col.diff"),
            t("cli.compare.col.first", tol=format(TOL, "g")), t("cli.compare.col.engine"))  # fmt: skip
    lines = [
        t("cli.compare.title", steps=cfg["steps"], k=cfg["k"]),
        t("cli.compare.rows"),
        "",
        f"{pad(head[0], 14)}{pad(head[1], 8, True)}{pad(head[2], 13, True)}  {pad(head[3], 20)}{head[4]}",
    ]
    for r in result["results"]:
        first = "-" if r["first_divergent_step"] is None else str(r["first_divergent_step"])
        engine = strategies.strategy(r["strategy"]).engine_word(plan)
        if "seconds" in r:  # a real run of fitcore.traps: its engine and its own time
            engine = t("traps.word.real", engine=r["engine"], seconds=f"{r['seconds']:.1f}")
        lines.append(f"{r['strategy']:<14}{r['devices']:>8}{r['max_abs_diff']:>13.3g}  {first:<20}{engine}")
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
    return 0
