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
import sys
import time
from dataclasses import asdict, replace

from fitcore.core.cliparse import Parser, command, error_line
from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan, parse_devices
from fitcore.core.errors import ConfigError, Text
from fitcore.core.i18n import count, t
from fitcore.core.schema import dumps
from fitcore.core.shards import steps_per_epoch
from fitcore.core.text import pad
from fitcore.kit.compare_mesh import is_2d, mesh_row
from fitcore.kit.equivalence import (
    FAILED,
    TOL,
    Toggles,
    rank_batch,
)
from fitcore.kit.equivalence import (
    result as row_of,
)
from fitcore.kit.flags import add_training_flags, checked_from_args, flag_error
from fitcore.kit.labmath import train_all
from fitcore.lab.traps import FLAGS as TRAP_FLAGS
from fitcore.lab.traps import Traps
from fitcore.lab.traps import add_flags as add_trap_flags
from fitcore.lab.traps import apply as apply_traps
from fitcore.lab.traps import from_args as traps_from_args
from fitcore.protocols import registry


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
    named = {name: s.engine(plan) for name, s in registry.STRATEGIES.items()}
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
        traps: the question of fitcore.lab.traps to ask (BatchNorm, accumulation, uneven inputs), if any; its
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
    # a strategy that could not run this config has no column (a pipeline's unequal microbatches): it says why
    skipped = {name: why for name, s in registry.STRATEGIES.items() if (why := s.lab_skip(cfg))}
    names = tuple(name for name in registry.NAMES if name not in skipped)
    trained = train_all(cfg, plan, toggles, names)
    shared = _shared_causes(cfg, plan, toggles, trained)
    causes = {name: registry.strategy(name).compare_causes(cfg, plan, toggles, trained) + shared[name]
              for name in names}  # fmt: skip
    results = [row_of(name, k, trained.per_step[name], causes[name]) for name in names]
    results = apply_traps(cfg, plan, toggles, traps, results)
    if is_2d(cfg):  # a 2-D mesh: its strategy's row is the real run's, on its mesh
        results = [mesh_row(cfg, toggles) if r["strategy"] == cfg.strategy else r for r in results]
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
        "not_compared": skipped,
    }
    return {"config": config, "results": results}


def same_as_one_device(result: dict) -> bool:
    """Did every row finish within the tolerance of one device at every step?"""
    return all(r["status"] != FAILED and r["first_divergent_step"] is None for r in result["results"])


def verdict(result: dict, name_of=lambda strategy: strategy) -> str:
    """The one sentence that answers the class's question, "is it the same model as one device?": the
    largest difference of all rows under the tolerance, or the row that differs most, from which step and
    its cause, the last the row gives: a row's causes say what ran first and why it differs last (name_of:
    a strategy's name as the reader knows it)."""
    tol = format(result["config"]["tolerance"], "g")
    rows = result["results"]
    failed = [r for r in rows if r["status"] == FAILED]
    worst = failed[0] if failed else max(rows, key=lambda r: r["max_abs_diff"])
    diff = f"{worst['max_abs_diff']:.2g}"
    if failed:
        said = t("cli.compare.verdict.failed", name=name_of(worst["strategy"]))
    elif same_as_one_device(result):
        return t("cli.compare.verdict.same", diff=diff, tol=tol)
    else:
        said = t("cli.compare.verdict.differs", name=name_of(worst["strategy"]), diff=diff, tol=tol,
                 step=worst["first_divergent_step"])  # fmt: skip
    if worst["causes"]:
        said = t("cli.compare.verdict.because", verdict=said, cause=worst["causes"][-1].rstrip("."))
    return said


def table_lines(result: dict, plan: DevicePlan) -> list[str]:
    """The result for a terminal: a row per strategy, its causes beneath it (plan: the run's devices)."""
    cfg = result["config"]
    head = (t("cli.compare.col.strategy"), t("cli.compare.col.devices"), t("cli.compare.col.result"),
            t("cli.compare.col.diff"), t("cli.compare.col.first", tol=format(TOL, "g")),
            t("cli.compare.col.engine"))  # fmt: skip
    steps, devices = count("count.step", cfg["steps"]), count("count.device", cfg["k"])
    lines = [
        t("cli.compare.title", steps=steps, devices=devices),
        verdict(result),
        t("cli.compare.rows"),
        "",
        f"{pad(head[0], 14)}{pad(head[1], 8, True)}  {pad(head[2], 9)}{pad(head[3], 13, True)}  "
        f"{pad(head[4], 20)}{head[5]}",
    ]
    for r in result["results"]:
        first = "-" if r["first_divergent_step"] is None else str(r["first_divergent_step"])
        engine = registry.strategy(r["strategy"]).engine_word(plan)
        if "seconds" in r:  # a real run of fitcore.lab.traps: its engine and its own time
            engine = t("traps.word.real", engine=r["engine"], seconds=f"{r['seconds']:.1f}")
        status = pad(t(f"cli.compare.status.{r['status']}"), 9)
        lines.append(
            f"{r['strategy']:<14}{r['devices']:>8}  {status}{r['max_abs_diff']:>13.3g}  {first:<20}{engine}"
        )
        lines += [f"    - {c}" for c in r["causes"]]
    names = {"reference": t("cli.compare.name.reference")}  # the strategies keep their code names
    engines = cfg["engines"] | {r["strategy"]: r["engine"] for r in result["results"] if "engine" in r}
    lines += ["", *(f"{names.get(name, name)}: {text}" for name, text in engines.items())]
    lines += [f"{name}: {why}" for name, why in cfg.get("not_compared", {}).items()]
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
        checked = checked_from_args(args)
        toggles = Toggles(
            loss_reduction=str(args.loss_reduction).strip().lower(),
            drop_last=args.drop_last,
            set_epoch=not args.no_set_epoch,
            per_rank_batch=args.per_rank_batch,
            scale_lr=args.scale_lr,
        ).validate()
        plan = checked.plan
        result = run(checked.config, toggles, plan, traps=traps_from_args(args))
    except ConfigError as exc:
        print(error_line("fitcore compare", _flag(exc)), file=sys.stderr)
        return 2
    print(dumps(result) if args.json else "\n".join(table_lines(result, plan)), flush=True)
    return 1 if any(r["status"] == FAILED for r in result["results"]) else 0  # a failed run is no pass
