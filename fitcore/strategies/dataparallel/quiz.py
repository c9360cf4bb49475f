"""DataParallel's questions for the classroom (fitcore.view.quiz), each answered from the step's own events:
how many rows scatter gives a device, which devices stay idle, where the outputs meet, how many bytes gather
moves. One process scatters each batch: the mistakes a student makes are tensor.chunk's."""

from __future__ import annotations

import math
from typing import Sequence

from fitcore.core.config import FitConfig
from fitcore.core.events import Step
from fitcore.core.phases import GATHER, LOSS
from fitcore.kit.live import ITEMSIZE, short_label
from fitcore.view.quiz import Question, Text, _question, asked_rows, text


def rows_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question:
    """How many rows a given device gets: scatter's chunk, the replica's own rows, from the Step."""
    replica, others = asked_rows(step, labels)
    batch, k, device = step.input_shape[0], len(labels), short_label(replica.device)
    size = math.ceil(batch / k)
    ask = text("classroom.q.rows", step=step.step, batch=batch, k=k, device=device)
    why = text("classroom.why.rows", k=k, batch=batch, size=size, device=device, start=replica.start,
               stop=replica.stop, rows=replica.rows)  # fmt: skip
    return _question("rows", step, ask, replica.rows, others, lambda n: Text("count.row", n=n), why)


def idle_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question:
    """Which selected devices stay idle: those without a replica in the Step."""
    busy = {r.device for r in step.replicas}
    names = [short_label(label) for label in labels]
    idle = tuple(short_label(label) for label in labels if label not in busy)
    k, batch = len(labels), step.input_shape[0]
    # tensor.chunk leaves the last devices idle: the wrong guesses are one more or fewer of them, or the first
    others = [tuple(names[k - j :]) if j else () for j in (len(idle) - 1, len(idle) + 1, len(idle) + 2, 0)
              if 0 <= j < k] + [(names[0],)]  # fmt: skip
    ask = text("classroom.q.idle", step=step.step, batch=batch, k=k)
    why = text("classroom.why.idle", k=k, batch=batch, size=math.ceil(batch / k), busy=len(busy),
               idle=len(idle))  # fmt: skip
    return _question("idle", step, ask, idle, others, _devices_text, why)


def _devices_text(devices: tuple[str, ...]) -> Text:
    return text("classroom.c.devices", devices=", ".join(devices)) if devices else text("classroom.c.none")


def meet_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question:
    """Where the outputs meet: the device the Step's loss phase ran on, after gather (device_ids[0])."""
    loss_on = [p.device for p in step.phases.phases() if p.name == LOSS]
    where = short_label(loss_on[0])
    names = [short_label(label) for label in labels]
    own = "(each)"  # the wrong idea that every device computes its own loss, as DDP's ranks do
    others = [names[-1], names[1], own]
    show = lambda o: text("classroom.c.own") if o == own else text("classroom.c.device", device=o)  # noqa: E731
    ask = text("classroom.q.meet", step=step.step, k=len(labels))
    why = text("classroom.why.meet", device=where)
    place = {n: i for i, n in enumerate(names + [own])}  # devices in device order, no gather last
    return _question("meet", step, ask, where, others, show, why, order=place.get)


def gather_bytes_question(step: Step, cfg: FitConfig, labels: Sequence[str]) -> Question:
    """How many bytes gather moves: the sum of the Step's recorded gather phases."""
    moved = sum(p.bytes for p in step.phases.phases() if p.name == GATHER)
    batch, d = step.input_shape
    own = step.replicas[0].rows  # the first device's output is already where the outputs meet
    others = [batch * ITEMSIZE, (batch - own) * d * ITEMSIZE, batch * d * ITEMSIZE, (batch - own), 0]
    ask = text("classroom.q.gather_bytes", step=step.step, batch=batch, k=len(step.replicas),
               first=short_label(labels[0]))  # fmt: skip
    why = text("classroom.why.gather_bytes", first=short_label(labels[0]), batch=batch, own=own,
               itemsize=ITEMSIZE, bytes=moved)  # fmt: skip
    return _question("gather_bytes", step, ask, moved, others, lambda n: Text("classroom.c.bytes", n=n), why)


def questions(step: Step, cfg: FitConfig, labels: Sequence[str], extra: dict | None = None) -> list[Question]:
    """One process scattering each batch: the rows, the idle devices, where outputs meet, gather's bytes."""
    out = [rows_question(step, cfg, labels)] if step.replicas else []
    if len(labels) > 1:
        out.append(idle_question(step, cfg, labels))
        if step.phases is not None:
            out += [meet_question(step, cfg, labels), gather_bytes_question(step, cfg, labels)]
    return out
