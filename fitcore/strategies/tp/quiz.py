"""TP's questions for the classroom (fitcore.view.quiz), each answered from the step's own events: which
columns of X a rank takes, and how many bytes a rank sends in the all-reduce of the partial outputs."""

from __future__ import annotations

from typing import Sequence

from fitcore.core.config import FitConfig
from fitcore.core.events import Step
from fitcore.kit.live import short_label
from fitcore.strategies.tp.layout import ALLREDUCE
from fitcore.view.quiz import Question, Text, _question, text


def columns_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question | None:
    """Which columns of X one rank takes: its Replica's own columns, from the Step."""
    replica = step.replicas[step.step % len(step.replicas)]
    if replica.columns is None:
        return None
    d, k = cfg.n_features, len(step.replicas)
    others = [r.columns for r in step.replicas if r.columns is not None] + [(0, d)]
    ask = text("tp.q.columns", step=step.step, d=d, k=k, rank=short_label(replica.device))
    lo, hi = replica.columns
    why = text("tp.why.columns", d=d, k=k, lo=lo, hi=hi, rank=short_label(replica.device))

    def show(c: tuple[int, int]) -> Text:
        return Text("tp.c.columns", (("lo", c[0]), ("hi", c[1])))

    return _question(
        "tp_columns", step, ask, replica.columns, others, show, why, order=lambda c: (c[0], c[1])
    )


def bytes_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question | None:
    """How many bytes one rank sends in the all-reduce: the step's recorded phase, per rank."""
    if step.phases is None:
        return None
    sent = [p.bytes for p in step.phases.phases() if p.name == ALLREDUCE]
    if not sent:
        return None
    batch, k, d = step.input_shape[0], len(step.replicas), cfg.n_features
    others = [batch * 4, 2 * (k - 1) * (d + 1) * 4 // k, batch * d * 4, sent[0] // 2 or 1, 2 * sent[0]]
    ask = text("tp.q.bytes", step=step.step, batch=batch, k=k)
    why = text("tp.why.bytes", batch=batch, k=k, bytes=sent[0])
    return _question("tp_bytes", step, ask, sent[0], others, lambda n: Text("classroom.c.bytes", n=n), why)


def questions(step: Step, cfg: FitConfig, labels: Sequence[str], extra: dict | None = None) -> list[Question]:
    """TP's questions on a step, in turn."""
    found = [columns_question(step, cfg, labels), bytes_question(step, cfg, labels)]
    return [q for q in found if q is not None]
