"""The equivalence lab's next traps: BatchNorm, gradient accumulation with and without no_sync, uneven inputs.

Each module holds one question and answers it with results in fitcore.lab.compare's shape (`strategy`,
`devices`, `max_abs_diff`, `first_divergent_step`, `causes`, `per_step`, plus what the question measures):

  batchnorm.py   the model becomes BatchNorm1d(d) then the linear layer, on every strategy: DataParallel's
                 replicas and DDP's ranks normalise with their own rows' statistics; SyncBatchNorm's global
                 statistics, computed exactly in one process;
  accumulate.py  N micro-batches per optimizer step on real DDP on gloo, with and without no_sync() and the
                 loss divided by N, every all-reduce counted by a comm hook;
  uneven.py      rank r one batch short of rank r + 1, on real DDP on gloo: the rank left waiting, or Join;
  gloo.py        the spawned gloo ranks the last two run on.

One question at a time: each changes the model or the schedule the others assume.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fitcore.core.errors import ConfigError, Text
from fitcore.strategies.ddp.name import NAME as DDP

MAX_ACCUMULATE = 64


@dataclass(frozen=True)
class Traps:
    """The traps' switches; the defaults ask none of the questions."""

    batchnorm: bool = False  # BatchNorm1d(d) before the linear layer, on every strategy
    sync_batchnorm: bool = False  # DDP's BatchNorm is SyncBatchNorm, global statistics (implies batchnorm)
    accumulate: int = 1  # N micro-batches a rank takes per optimizer step
    no_sync: bool = True  # DDP's no_sync() on the first N - 1 micro-batches of a step
    loss_scaling: bool = True  # each micro-batch's loss divided by N
    uneven: bool = False  # rank r has one batch fewer than rank r + 1 (a real run on gloo)
    join: bool = False  # the uneven run inside torch.distributed.algorithms.Join (implies uneven)

    def questions(self) -> list[str]:
        """The questions these switches ask: "batchnorm", "accumulate", "uneven"."""
        asked = []
        if self.batchnorm or self.sync_batchnorm:
            asked.append("batchnorm")
        if self.accumulate != 1 or not self.no_sync or not self.loss_scaling:
            asked.append("accumulate")
        if self.uneven or self.join:
            asked.append("uneven")
        return asked

    def validate(self) -> "Traps":
        n = self.accumulate
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ACCUMULATE:
            raise ConfigError("accumulate", n, Text("traps.accumulate.range", most=MAX_ACCUMULATE))
        asked = self.questions()
        if len(asked) > 1:
            raise ConfigError(asked[1], getattr(self, asked[1]), Text("traps.one", asked=", ".join(asked)))
        return self


FLAGS = {  # a Traps field -> the compare flag that sets it, for error lines
    "batchnorm": "--batchnorm",
    "sync_batchnorm": "--sync-batchnorm",
    "accumulate": "--accumulate",
    "no_sync": "--no-no-sync",
    "loss_scaling": "--no-loss-scaling",
    "uneven": "--uneven",
    "join": "--join",
}


def add_flags(parser) -> None:
    """compare's flags for the traps, grouped under the question each asks."""
    from fitcore.core.i18n import t

    g = parser.add_argument_group(t("traps.group.batchnorm"))
    g.add_argument("--batchnorm", action="store_true", help=t("traps.help.batchnorm"))
    g.add_argument("--sync-batchnorm", action="store_true", help=t("traps.help.sync_batchnorm"))
    g = parser.add_argument_group(t("traps.group.accumulate"))
    g.add_argument("--accumulate", type=int, default=1, metavar="N", help=t("traps.help.accumulate"))
    g.add_argument("--no-no-sync", action="store_true", help=t("traps.help.no_no_sync"))
    g.add_argument("--no-loss-scaling", action="store_true", help=t("traps.help.no_loss_scaling"))
    g = parser.add_argument_group(t("traps.group.uneven"))
    g.add_argument("--uneven", action="store_true", help=t("traps.help.uneven"))
    g.add_argument("--join", action="store_true", help=t("traps.help.join"))


def from_args(args) -> Traps:
    return Traps(
        batchnorm=args.batchnorm, sync_batchnorm=args.sync_batchnorm, accumulate=args.accumulate,
        no_sync=not args.no_no_sync, loss_scaling=not args.no_loss_scaling, uneven=args.uneven,
        join=args.join,
    ).validate()  # fmt: skip


def as_config(traps: Traps) -> dict:
    return asdict(traps)


def apply(cfg, plan, toggles, traps: Traps, results: list[dict]) -> list[dict]:
    """compare's results with the asked question's rows in place of the plain ones.

    Every DDP row gets `allreduce_calls` and `allreduce_bytes` per optimizer step: counted by a comm hook
    on a real run (`allreduce_measured` true), or, for a simulated row, what DDP's reducer does with these
    parameters: one bucket of float32 gradients a step.
    """
    rows = _asked(cfg, plan, toggles, traps) or results
    for row in rows:
        if row["strategy"] == DDP and "allreduce_calls" not in row:
            n_params = row.pop("n_params", cfg.n_features + 1)
            row.update(allreduce_calls=1, allreduce_bytes=4 * n_params, allreduce_measured=False)
    return rows


def _asked(cfg, plan, toggles, traps: Traps) -> list[dict] | None:
    asked = traps.questions()
    if not asked:
        return None
    if asked[0] == "batchnorm":
        from fitcore.lab.traps import batchnorm

        return batchnorm.results(cfg, plan, toggles, sync=traps.sync_batchnorm)
    if asked[0] == "accumulate":
        from fitcore.lab.traps import accumulate

        return accumulate.results(cfg, plan, toggles, traps)
    from fitcore.lab.traps import uneven

    return uneven.results(cfg, plan, toggles, join=traps.join)
