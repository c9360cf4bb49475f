"""The equivalence lab: does DataParallel, or DDP, give the same model as one device, and when does it not?

The same data, seed and initial parameters are trained three ways, step by step:
  reference     one device, plain nn.Linear;
  dataparallel  fitcore's DataParallel on the chosen devices (nn.DataParallel on 2+ GPUs, the CPU emulation on
                virtual:K), fed the very same batches as the reference;
  ddp           DDP's arithmetic with K ranks, simulated exactly in this one process: each rank's rows from
                DistributedSampler, its own loss and gradient, the gradients divided by K and summed (what
                DDP's all-reduce hook does), then the same optimizer step for every rank. The ranks' replicas
                stay identical, so one copy of the parameters stands for all of them. tests/test_compare.py
                checks this simulation against torch's own DDP (fitcore.ddp.train_ddp, gloo) to 1e-6.

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
from typing import Any, Iterator, Mapping, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from fitcore.cliparse import Parser, command, error_line
from fitcore.config import FitConfig, _parse_bool
from fitcore.data import make_data
from fitcore.devices import DevicePlan, parse_devices
from fitcore.errors import ConfigError, Listed, Text
from fitcore.i18n import t
from fitcore.parallel import EmulatedDataParallel, LinearModel, init_parameters, wrap
from fitcore.text import pad
from fitcore.train import make_optimizer
from fitcore.traps import FLAGS as TRAP_FLAGS
from fitcore.traps import Traps
from fitcore.traps import add_flags as add_trap_flags
from fitcore.traps import apply as apply_traps
from fitcore.traps import from_args as traps_from_args

TOL = 1e-5  # a parameter further than this from the reference's counts as a difference
LOSS_REDUCTIONS = ("mean", "sum")
STRATEGIES = ("dataparallel", "ddp")


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


def epoch_shards(cfg: FitConfig, k: int, toggles: Toggles, epoch: int) -> list[list[int]]:
    """Each rank's rows for the 1-based `epoch`, from DistributedSampler itself."""
    shards = []
    for rank in range(k):
        sampler = DistributedSampler(
            range(cfg.data_size), num_replicas=k, rank=rank, shuffle=cfg.shuffle, seed=cfg.seed,
            drop_last=toggles.drop_last,
        )  # fmt: skip
        if toggles.set_epoch:  # forgotten, the sampler stays at epoch 0: the same order every epoch
            sampler.set_epoch(epoch - 1)
        shards.append(list(sampler))
    return shards


def schedule(cfg: FitConfig, k: int, toggles: Toggles) -> Iterator[StepRows]:
    """Every DDP step of the run, in order, with the rows each rank holds and the reference's batches.

    Entry i of rank r's shard is position r + i*K of the padded order; positions from N on are the padding.
    """
    b = rank_batch(cfg, k, toggles)
    for epoch in range(1, cfg.epochs + 1):
        shards = epoch_shards(cfg, k, toggles, epoch)
        for start in range(0, len(shards[0]), b):
            ranks = tuple(shard[start : start + b] for shard in shards)
            real = [
                row
                for r, rows in enumerate(ranks)
                for i, row in enumerate(rows, start)
                if r + i * k < cfg.data_size
            ]
            padded = sum(len(rows) for rows in ranks) - len(real)
            # with per_rank_batch the one-device run keeps its --batch-size: several steps on the same rows
            size = cfg.batch_size if toggles.per_rank_batch else len(real)
            batches = tuple(real[i : i + size] for i in range(0, len(real), size))
            yield StepRows(epoch, ranks, batches, padded)


# ---------------------------------------------------------------------------------------------------------
# The three ways to train. Each takes a step on given rows and exposes its parameters.


def _loss(out: torch.Tensor, y: torch.Tensor, reduction: str) -> torch.Tensor:
    return F.mse_loss(out, y, reduction=reduction)


class _Trainer:
    """A model, its optimizer and the data: the reference, and the base of the other two."""

    def __init__(self, cfg: FitConfig, data, device, model=None, lr: float | None = None, make=LinearModel):
        self.X, self.y = data
        self.device = device
        self.raw = make(cfg.n_features)  # LinearModel, or fitcore.traps' models with the same .fc
        init_parameters(self.raw, cfg.seed + 1)
        self.raw.to(device)
        self.model = model(self.raw) if model else self.raw
        self.params = list(self.raw.parameters())
        self.optimizer = make_optimizer(replace(cfg, lr=lr or cfg.lr), self.params)

    def rows(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.tensor(ids, dtype=torch.long, device=self.device)
        return self.X.index_select(0, idx), self.y.index_select(0, idx)  # (b, d), (b, 1)

    def step(self, ids: list[int], reduction: str) -> float:
        xb, yb = self.rows(ids)
        loss = _loss(self.model(xb), yb, reduction)  # outside the wrapped module, as fitcore.train does
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


class _SimulatedDDP(_Trainer):
    """DDP's arithmetic for K ranks in one process: per-rank loss and gradient, then DDP's averaging."""

    def ddp_step(self, ranks: tuple[list[int], ...], reduction: str) -> float:
        k = len(ranks)
        total, losses = None, []
        for ids in ranks:  # rank r: forward and backward on its own rows only
            xb, yb = self.rows(ids)
            loss = _loss(self.raw(xb), yb, reduction)
            grads = torch.autograd.grad(loss, self.params)
            # DDP's allreduce_hook divides each rank's gradient by K, then all-reduces with a sum
            shares = [g / k for g in grads]
            total = shares if total is None else [t + s for t, s in zip(total, shares)]
            losses.append(loss.item())
        for p, g in zip(self.params, total):
            p.grad = g
        self.optimizer.step()
        return sum(losses) / k


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def _finite(value: float, who: str, step: int, lr: float) -> None:
    if not math.isfinite(value):
        why = Text("cli.compare.diverged", who=Text(f"cli.compare.who.{who}"), step=step, value=value)
        raise ConfigError("lr", lr, why)


class _Trained(NamedTuple):
    per_step: dict[str, list[float]]  # strategy -> the largest |parameter - reference| after each step
    finals: dict[str, list[float]]  # "reference" and each strategy -> the final parameters
    steps: list[StepRows]


def train_all(cfg: FitConfig, plan: DevicePlan, toggles: Toggles, strategies=STRATEGIES) -> _Trained:
    """Train the reference and `strategies` on DDP's schedule: per-step differences and final parameters."""
    k = len(plan.labels)
    device = plan.first_device
    data = make_data(cfg, device)
    reference = _Trainer(cfg, data, device)
    trainers: dict[str, _Trainer] = {}
    if "dataparallel" in strategies:
        trainers["dataparallel"] = _Trainer(cfg, data, device, lambda raw: wrap(raw, plan))
    if "ddp" in strategies:
        lr = cfg.lr * k if toggles.scale_lr else cfg.lr
        trainers["ddp"] = _SimulatedDDP(cfg, data, device, lr=lr)
    per_step: dict[str, list[float]] = {name: [] for name in trainers}
    steps = list(schedule(cfg, k, toggles))
    red = toggles.loss_reduction
    try:
        for n, rows in enumerate(steps, 1):
            dp_worst = 0.0
            for ids in rows.batches:  # the reference and DataParallel: the very same batches
                _finite(reference.step(ids, red), "reference", n, cfg.lr)
                if "dataparallel" in trainers:
                    _finite(trainers["dataparallel"].step(ids, red), "dataparallel", n, cfg.lr)
                    dp_worst = max(dp_worst, _max_diff(trainers["dataparallel"].flat(), reference.flat()))
            if "dataparallel" in trainers:
                per_step["dataparallel"].append(dp_worst)
            if "ddp" in trainers:
                ddp = trainers["ddp"]
                _finite(ddp.ddp_step(rows.ranks, red), "ddp", n, ddp.optimizer.param_groups[0]["lr"])
                per_step["ddp"].append(_max_diff(ddp.flat(), reference.flat()))
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


def _ddp_causes(cfg, plan, toggles, trained) -> list[str]:
    """The reasons DDP differs from the reference, each measured; none when it matches."""
    k, worst = len(plan.labels), _worst(trained, "ddp")
    if first_divergent(trained.per_step["ddp"]) is None:
        return []
    causes = []
    padded = [s for s in trained.steps if s.padded]
    if padded:
        first = trained.steps.index(padded[0]) + 1
        causes.append(
            t("cli.compare.cause.padding", padded=padded[0].padded, k=k, rows=cfg.data_size, first=first)
        )
    reasons = {
        "loss_reduction": ("sum", t("cli.compare.cause.sum", k=k)),
        "per_rank_batch": (
            True,
            t("cli.compare.cause.per_rank", batch=cfg.batch_size, global_batch=k * cfg.batch_size, k=k),
        ),
        "scale_lr": (True, t("cli.compare.cause.scale_lr", k=k, lr=f"{cfg.lr:g}")),
    }
    for name, (on, text) in reasons.items():
        if getattr(toggles, name) != on or k == 1:
            continue
        off = replace(toggles, **{name: Toggles().__getattribute__(name)})
        without = _worst(train_all(cfg, plan, off, ("ddp",)), "ddp")
        if without < worst / 2 or without <= TOL:  # taking it away brings DDP closer: it made the difference
            measured = t("cli.compare.measured", text=text, worst=f"{worst:.3g}", without=f"{without:.3g}")
            causes.append(measured)
    return causes


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
    k = len(plan.labels)
    if plan.uses_data_parallel:
        dp = t("cli.compare.engine.real", spec=plan.spec)
    elif plan.emulated:
        dp = t("cli.compare.engine.emulated", host=plan.host, spec=plan.spec)
    else:
        dp = t("cli.compare.engine.one")
    return {
        "reference": t("cli.compare.engine.reference", device=plan.first_device),
        "dataparallel": dp,
        "ddp": t("cli.compare.engine.ddp", k=k),
    }


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
        "causes", "per_step"}, ...]}: per_step[i] is the largest |parameter - reference| after DDP's step
        i + 1 (for DataParallel, the largest over the reference's batches of that step).
    """
    toggles, traps = toggles.validate(), traps.validate()
    plan = plan or parse_devices(cfg.devices)
    k = len(plan.labels)
    if max_steps is not None:
        b = rank_batch(cfg, k, toggles)
        shard = cfg.data_size // k if toggles.drop_last else math.ceil(cfg.data_size / k)
        steps = cfg.epochs * math.ceil(shard / b)
        if steps > max_steps:
            allowed = Text("cli.compare.max_steps", most=max_steps, steps=steps)
            raise ConfigError("epochs", cfg.epochs, allowed)
    t0 = time.perf_counter()
    trained = train_all(cfg, plan, toggles)
    shared = _shared_causes(cfg, plan, toggles, trained)
    causes = {"dataparallel": shared["dataparallel"], "ddp": _ddp_causes(cfg, plan, toggles, trained)}
    causes["ddp"] += shared["ddp"]
    results = []
    for name in STRATEGIES:
        per_step = trained.per_step[name]
        results.append(
            {
                "strategy": name,
                "devices": k,
                "max_abs_diff": max(per_step, default=0.0),
                "first_divergent_step": first_divergent(per_step),
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


def table_lines(result: dict) -> list[str]:
    """The result for a terminal: a row per strategy, its causes beneath it."""
    cfg = result["config"]
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
        engine = t("cli.compare.word.simulated") if r["strategy"] == "ddp" else _engine_word(cfg)
        if "seconds" in r:  # a real run of fitcore.traps: its engine and its own time
            engine = t("traps.word.real", engine=r["engine"], seconds=f"{r['seconds']:.1f}")
        lines.append(f"{r['strategy']:<14}{r['devices']:>8}{r['max_abs_diff']:>13.3g}  {first:<20}{engine}")
        lines += [f"    - {c}" for c in r["causes"]]
    names = {"reference": t("cli.compare.name.reference")}  # the strategies keep their code names
    engines = cfg["engines"] | {r["strategy"]: r["engine"] for r in result["results"] if "engine" in r}
    lines += ["", *(f"{names.get(name, name)}: {text}" for name, text in engines.items())]
    return lines


def _engine_word(cfg: dict) -> str:
    """DataParallel's engine in a word: the real nn.DataParallel, the emulation, or one device."""
    if cfg["engines"]["dataparallel"].startswith("torch.nn.DataParallel"):
        return t("cli.compare.word.real")
    emulated = str(cfg["devices"]).startswith("virtual")
    return t("cli.compare.word.emulated") if emulated else t("cli.compare.word.one")


# ---------------------------------------------------------------------------------------------------------
# `python -m fitcore compare`


def build_parser() -> argparse.ArgumentParser:
    from fitcore.cli import add_training_flags

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
    from fitcore.cli import flag_error

    toggles = {"loss_reduction": "--loss-reduction", **TRAP_FLAGS}
    return exc.named(toggles[exc.field]) if exc.field in toggles else flag_error(exc)


@command
def main(argv: list[str]) -> int:
    """`python -m fitcore compare [training flags] [toggles] [--json]`; returns the exit status."""
    from fitcore.cli import config_from_args

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
        result = run(cfg, toggles, traps=traps_from_args(args))
    except ConfigError as exc:
        print(error_line("fitcore compare", _flag(exc)), file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else "\n".join(table_lines(result)), flush=True)
    return 0
