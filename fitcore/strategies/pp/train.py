"""The pipeline's Engine (`engine(cfg)`, its record's `ranks`): what each rank runs (its stages, torch's
schedule: fitcore.strategies.pp.rank) and what the parent emits, on the engine's launchers (spawned ranks,
or one rank of a torchrun launch).

Besides the engine's events, a pipeline run emits Detail('pp') after step 1 and at the end: the stages, their
layers and ranks, each block as it ran (kind, stage, microbatch, times, bytes sent), the bubble measured and
by its formula, the activations each stage held, and each rank's memory.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import torch

from fitcore.core.config import FitConfig
from fitcore.core.events import Detail
from fitcore.core.phases import PhaseSpec
from fitcore.engine.contract import Engine, Final, StepReport, first_memory_details, memory_details
from fitcore.protocols.mesh import PP
from fitcore.protocols.split import WHOLE
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.layout import hidden
from fitcore.strategies.pp.model import product
from fitcore.strategies.pp.name import NAME
from fitcore.strategies.pp.rank import PpPart, final_rows, first_step_extra, joined_products, own_products
from fitcore.strategies.pp.schedule import schedule_value
from fitcore.strategies.pp.view import holds_lines


def pp_specs(schedule: str, m: int, h: int, labels: Sequence[str], d: int, itemsize: int, reports,
             mesh=None) -> tuple[PhaseSpec, ...]:  # fmt: skip
    """Every rank's specs, rank r's over slots r·slots ...: its blocks in the schedule's order, each with the
    bytes it sent as the rank measured them (its StepReport's `sent`), or, where the lead rank has only the
    shared table (torchrun), by the formula on the batch's rows."""
    p = len(labels)
    runs, n = layout.order(schedule, p, m), layout.slots(schedule, p, m)
    specs: list[PhaseSpec] = []
    for r, label in enumerate(labels):
        measured = tuple(reports[r].sent) if r < len(reports) else ()
        rows = reports[r].input_shape[0] // m if r < len(reports) else 0
        sent = (
            measured
            if len(measured) == len(runs[r])
            else tuple(layout.sent_bytes(b.kind, b.stage, schedule, p, rows, h, itemsize) for b in runs[r])
        )
        specs += layout.rank_specs(label, runs[r], sent, r * n)
    return tuple(specs)


def joined_reports(schedule: str, layers: int, d: int, h: int, reports: Sequence[StepReport]
                   ) -> tuple[tuple[float, ...], float]:  # fmt: skip
    """The step's W and b from the ranks' reports, in rank order: each rank's stages' products (flat, in
    its stage order, each (out, in) of its first and last layers), multiplied in stage order by the parent,
    no collective."""
    p = len(reports)
    stages = layout.n_stages(schedule, p)
    bounds = layout.stage_layers(layers, stages)
    by_stage: dict[int, torch.Tensor] = {}
    for r, report in enumerate(reports):
        values, at = list(report.weights or ()), 0
        for s in layout.rank_stages(schedule, p, r):
            lo, hi = bounds[s]
            shape = (layout.layer_shape(hi - 1, layers, d, h)[0], layout.layer_shape(lo, layers, d, h)[1])
            size = shape[0] * shape[1]
            by_stage[s] = torch.tensor(values[at : at + size]).view(shape)
            at += size
    w = product([by_stage[s] for s in range(stages)])
    return tuple(w.view(-1).tolist()), next(m.bias for m in reports if m.bias is not None)


def _first_step_details(cfg: FitConfig, labels, reports) -> list[Detail]:
    if reports[0].extra is None:
        return []
    memory = [report.extra["memory"] for report in reports]
    blocks = [report.extra["blocks"] for report in reports]
    value = schedule_value(cfg, labels, blocks, memory)
    return [Detail(NAME, value, "\n".join(holds_lines(value))), *first_memory_details(cfg, labels, reports)]


def _details(cfg: FitConfig, labels, finals: Sequence[Final]) -> list[Detail]:
    memory = [final.extra["memory"] for final in finals if "memory" in final.extra]
    blocks = [final.extra.get("blocks", []) for final in finals]
    return [Detail(NAME, schedule_value(cfg, labels, blocks, memory)), *memory_details(cfg, labels, finals)]


def engine(cfg: FitConfig) -> Engine:
    """The Engine of this run's pipeline: its schedule's order and slots depend on p, m and the schedule."""
    p = dict(cfg.mesh_dims).get(PP, cfg.workers)
    return Engine(
        part=PpPart,
        step_params=own_products,
        final=final_rows,
        specs=partial(pp_specs, cfg.schedule, cfg.microbatches, hidden(cfg)),
        slots=layout.slots(cfg.schedule, p, cfg.microbatches),
        words=NAME,
        weights=partial(joined_reports, cfg.schedule, cfg.layers, cfg.n_features, hidden(cfg)),
        details=_details,
        step_extra=first_step_extra,
        step_details=_first_step_details,
        joined=joined_products,
        split=WHOLE,
    )
