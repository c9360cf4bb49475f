"""What the tests of fitcore.view share: runs trained to the end, their steps, and snapshots made by hand."""

from __future__ import annotations

from fitcore.core.config import FitConfig, check, validate
from fitcore.core.devices import DevicePlan
from fitcore.core.events import Replica, Step
from fitcore.engine import rank as ddp
from fitcore.runs.runner import Run, Snapshot
from fitcore.strategies.dataparallel.train import train


def run_to_end(cfg: FitConfig) -> Snapshot:
    """Train cfg to the end in a Run and return its final snapshot."""
    run = Run(validate(cfg)).start()
    assert run.wait(60)
    return run.snapshot()


def trained_steps(cfg: FitConfig) -> list[Step]:
    """The Step events of training cfg with DataParallel's loop."""
    events: list = []
    train(validate(cfg), events.append)
    return [e for e in events if isinstance(e, Step)]


def plan_of(cfg: FitConfig) -> DevicePlan:
    """cfg's device plan as config.check makes it of a run shown (its file not read, its GPUs taken as the
    run had them): what the views draw."""
    return check(cfg, recorded=True).plan


def snapshot(**kw) -> Snapshot:
    """A running DataParallel run's snapshot at step 12, with kw's fields instead (its plan: its config's)."""
    base = dict(run_id="run-9", status="running", message="epoch 12, step 12", config=FitConfig())
    base.update(kw)
    base.setdefault("plan", plan_of(base["config"]))
    return Snapshot(**base)


def ddp_step(losses=None) -> Step:
    """A 2-rank step of 3 rows per rank, as ddp reports it (ranks' losses where given)."""
    replicas = tuple(
        Replica(f"rank {r} · cpu · gloo", 0, 3, (3, 2), (3, 1), None if losses is None else losses[r])
        for r in range(2)
    )
    mean = 2.0 if losses is None else sum(losses) / 2
    return Step(7, 4, 2, mean, (6, 2), (6, 1), replicas, (1.0, 2.0), 3.0, 0.5)


def ddp_snapshot(finals, **kw) -> Snapshot:
    """A 2-rank ddp run's snapshot, with its ranks' final parameters where given."""
    cfg = FitConfig(strategy="ddp", workers=2, devices="cpu")
    return snapshot(config=cfg, extra={"final": ddp.final_value(finals)} if finals else {}, **kw)
