"""DataParallel's part of the page: its planned first step, the table of each replica's shapes, how it ran.

Every strategy's view module exposes the same names, which fitcore.protocols.registry loads by the entry's
`view`: `planned_step`, `sections`, `parallelism`, `console_frame` and `CONSOLE_HINT`.
"""

from __future__ import annotations

import math
from typing import Any

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import Replica, RunStarted, Step
from fitcore.core.i18n import t
from fitcore.core.memory import whole_model
from fitcore.core.parallel import chunk_sizes
from fitcore.core.text import format_bytes
from fitcore.runs.runner import Snapshot
from fitcore.strategies.dataparallel.memory import dataparallel_rows, gathered_bytes
from fitcore.view.common import Section, device_text, memory_notes, memory_rows, shape_text, shown

CONSOLE_HINT = "view.console_hint.dataparallel"  # the catalog's words for what the console will show


def split_table(step: Step) -> list[dict[str, Any]]:
    """One row per replica that ran (device, rows, index range, input and output shape), then `Outside`."""
    device, rows_, batch_rows = t("view.col.device"), t("view.col.rows"), t("view.col.batch_rows")
    inp, out = t("view.col.input_shape"), t("view.col.output_shape")
    rows = [
        {
            device: device_text(r.device),
            rows_: r.rows,
            batch_rows: f"{r.start}–{r.stop - 1}",
            inp: shape_text(r.input_shape),
            out: shape_text(r.output_shape),
        }
        for r in step.replicas
    ]
    rows.append(
        {
            device: t("view.outside"),
            rows_: step.input_shape[0],
            batch_rows: f"0–{step.input_shape[0] - 1}",
            inp: shape_text(step.input_shape),
            out: shape_text(step.output_shape),
        }
    )
    return rows


def planned_step(cfg: FitConfig, plan: DevicePlan) -> tuple[Step, tuple[str, ...]]:
    """(the first step as DataParallel will split it over `plan`, the devices) before any run: no loss, no
    times."""
    labels = plan.labels
    batch = min(cfg.batch_size, cfg.data_size)
    replicas, start = [], 0
    for label, n in zip(labels, chunk_sizes(batch, len(labels))):
        replicas.append(Replica(label, start, start + n, (n, cfg.n_features), (n, 1)))
        start += n
    step = Step(1, 1, 1, math.nan, (batch, cfg.n_features), (batch, 1), tuple(replicas), (), 0.0, 0.0)
    return step, labels


def planned_split(cfg: FitConfig, plan: DevicePlan) -> list[dict[str, Any]]:
    """The first batch's split before any run: DataParallel's chunking of batch_size over the devices."""
    return split_table(planned_step(cfg, plan)[0])


def sections(snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None) -> list[Section]:
    """The shapes of the run's latest step (or before a step the first one as it will be split), and what
    each device holds."""
    config, plan = shown(snap, cfg, plan)
    if snap is not None and snap.latest is not None:
        step, labels = snap.latest, tuple(r.device for r in snap.latest.replicas)
    elif config is not None and plan is not None:
        step, labels = planned_step(config, plan)
    else:
        return []
    shapes = Section("shapes", title=t("view.shapes.title"), tables=(split_table(step),))
    return [shapes, memory_section(config, step, labels, snap)]


def memory_section(cfg: FitConfig, step: Step, labels, snap: Snapshot | None) -> Section:
    """What each device holds, measured from its tensors after the run's first step (the formula's before):
    device 0 holds the model, its gradients and all of the optimizer state, and during a step also every
    replica's outputs, gathered, and the loss; each other device a copy of W, b and their gradients. The
    question users ask most about DataParallel: why device 0 fills up."""
    measured = (snap.extra.get("memory") if snap is not None else None) or None
    k = len(labels)
    memory = measured if measured and len(measured) == k else dataparallel_rows(whole_model(cfg), k)
    outputs, itemsize = step.output_shape, 4  # the gathered outputs (batch, 1), float32
    gathered = {0: {t("view.memory.gathered"): format_bytes(gathered_bytes(math.prod(outputs), itemsize))}}
    notes = memory_notes(memory, bool(measured))
    return Section(
        "memory",
        title=t("view.memory.title.devices"),
        tables=(memory_rows(labels, memory, gathered if k > 1 else None),),
        text_columns=(t("view.col.rank"),),
        notes=(*notes, t("view.memory.device0", outputs=shape_text(outputs))) if k > 1 else notes,
    )


def parallelism(cfg: FitConfig, started: RunStarted) -> str:
    """ "DataParallel emulated on the CPU (virtual:3)", "nn.DataParallel on cuda:0,1", "one device, no split
    (cpu)"."""
    if started.emulated:
        host = cfg.devices.split("@", 1)[1] if "@" in cfg.devices else "the CPU"
        return f"DataParallel emulated on {host} ({cfg.devices})"
    if started.data_parallel:
        return "nn.DataParallel on cuda:" + ",".join(d.split(":", 1)[1] for d in started.devices)
    return f"one device, no split ({', '.join(started.devices)})"


def console_frame(snap: Snapshot) -> tuple[list[str], list[str]]:
    """Lines around the steps in the console panel: none, the tutorial prints only its steps."""
    return [], []
