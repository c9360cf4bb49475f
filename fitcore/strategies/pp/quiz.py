"""The pipeline's questions for the classroom (fitcore.view.quiz), each answered from the step's own blocks:
how many microbatches' activations stage 0 held at once, and which stage waited longest before its first
block (the bubble's start)."""

from __future__ import annotations

from typing import Sequence

from fitcore.core.config import FitConfig
from fitcore.core.events import Step
from fitcore.kit.live import short_label
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.schedule import blocks_of
from fitcore.strategies.pp.view import step_blocks
from fitcore.view.quiz import Question, _question, text


def held_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question | None:
    """How many microbatches stage 0 keeps at once (GPipe: all m; 1F1B: at most p), from its blocks."""
    p = len(step.replicas)
    blocks = step_blocks(cfg, step, p)
    first = layout.stage_rank(cfg.schedule, p, 0)
    if not blocks[first]:
        return None
    held = layout.held_counts(blocks_of(blocks[first])).get(0, 0)
    m = cfg.microbatches
    others = [m, p, 1, min(m, p + 1), max(1, m // 2), 2 * m]
    ask = text("pp.q.held", step=step.step, schedule=cfg.schedule, p=p, m=m)
    why = text("pp.why.held", schedule=cfg.schedule, n=held, m=m, p=p)
    return _question("pp_held", step, ask, held, others, lambda n: text("pp.c.held", n=n), why)


def wait_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question | None:
    """Which rank starts its first block last: the one whose stage the first microbatch reaches last."""
    p = len(step.replicas)
    if p < 2:
        return None
    blocks = step_blocks(cfg, step, p)
    if not all(blocks):
        return None
    firsts = [rank[0]["start"] for rank in blocks]
    last = max(range(p), key=lambda r: firsts[r])
    names = [short_label(r.device) for r in step.replicas]
    ask = text("pp.q.wait", step=step.step, p=p)
    why = text(
        "pp.why.wait", rank=names[last], ms=f"{1e3 * firsts[last]:.2f}", stage=blocks[last][0]["stage"]
    )
    others = [names[r] for r in range(p) if r != last]
    return _question("pp_wait", step, ask, names[last], others, lambda n: text("pp.c.rank", rank=n), why,
                     order=names.index)  # fmt: skip


def questions(step: Step, cfg: FitConfig, labels: Sequence[str], extra: dict | None = None) -> list[Question]:
    found = [held_question(step, cfg, labels), wait_question(step, cfg, labels)]
    return [q for q in found if q is not None]
