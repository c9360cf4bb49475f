"""The equivalence lab's parts: its toggles, DDP's step schedule, the one-device trainer the strategies are
held to, and a row of its results. fitcore.lab.compare runs the lab on them; each strategy's `comparer` (its
column) and fitcore.lab.traps' questions build on them, below fitcore.lab.compare, which imports both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Iterator, Mapping, NamedTuple, Protocol

import torch
import torch.nn.functional as F

from fitcore.core.config import FitConfig, _parse_bool
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.shards import epoch_shards, is_padding
from fitcore.core.train import first_model, make_optimizer
from fitcore.protocols import registry

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

    def ranks_lr(self, cfg: FitConfig, k: int) -> float:
        """The learning rate of K ranks on their own rows: --lr, times K where scale_lr says so."""
        return cfg.lr * k if self.scale_lr else cfg.lr

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
        self.raw = first_model(cfg, make=make)  # LinearModel, or fitcore.lab.traps' models with the same .fc
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
        close = getattr(self.model, "close", None)  # DataParallel's emulation stops its replica threads
        if callable(close):
            close()


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
    """Refuse a loss that is no longer finite: `who` ("reference" or a strategy's name) diverged."""
    if not math.isfinite(value):
        key = registry.STRATEGIES[who].words["who"] if who in registry.STRATEGIES else REFERENCE_WHO
        why = Text("cli.compare.diverged", who=Text(key), step=step, value=value)
        raise ConfigError("lr", lr, why)


REFERENCE_WHO = "cli.compare.who.reference"


def first_divergent(per_step: list[float], tol: float = TOL) -> int | None:
    """The 1-based step where the difference first exceeds `tol`; None if it never does."""
    return next((i for i, v in enumerate(per_step, 1) if v > tol), None)


def result(strategy: str, k: int, per_step: list[float], causes: list[str], **extra) -> dict:
    """One row in compare's shape, its figures from per_step."""
    row = {
        "strategy": strategy,
        "devices": k,
        "max_abs_diff": max(per_step, default=0.0),
        "first_divergent_step": first_divergent(per_step),
        "final_abs_diff": per_step[-1] if per_step else 0.0,  # where the difference ends
        "causes": causes,
        "per_step": per_step,
        "status": FINISHED,  # a real run of fitcore.lab.traps may end "failed", its reason beside it
    }
    return row | extra


FINISHED, FAILED = "finished", "failed"
