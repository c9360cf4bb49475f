"""A pipeline's arithmetic: which layers each stage holds, which stages each rank runs, the order its blocks
run in, the bubble (measured and by formula), the activations a stage holds, the bytes between stages.

The model is the fit y = X·W + b made deep: L layers, y = X·A₁ᵀ·A₂ᵀ···A_{L−1}ᵀ·W_Lᵀ + b, the first L − 1
of them without bias, the last (1, h) with b. They multiply to one W (W = W_L·A_{L−1}···A₁), so the same
data has the same least-squares answer; the layers are what a pipeline cuts. Stage s holds layers
stage_layers(L, S)[s]; a rank runs one stage (GPipe, 1F1B) or two (interleaved 1F1B, ZBV: v = 2).

A step cuts the batch into m equal microbatches. Each stage runs each microbatch's forward (F) and backward
(B; the zero-bubble schedule splits it into the input's gradient I and the weights' W) in the schedule's
order; a stage waits for the activation of the stage before it (forward) or the gradient of the stage after
it (backward): that waiting is the bubble.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Sequence

from fitcore.core.config import FitConfig, integer_range
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.i18n import t
from fitcore.core.phases import LOSS_END, OPTIMIZER_END, PhaseSpec

# The schedules: torch.distributed.pipelining's classes by the name the flag takes, the stages each rank
# runs, and how stages are laid on ranks (torch's generate_stage_to_rank_mapping: "loop" deals them round,
# "v" goes down the ranks and back up, so that rank 0 holds the first and the last stage)
GPIPE, ONE_F_ONE_B, INTERLEAVED, ZBV = "gpipe", "1f1b", "interleaved-1f1b", "zbv"
SCHEDULES = (GPIPE, ONE_F_ONE_B, INTERLEAVED, ZBV)
CLASSES = {
    GPIPE: "ScheduleGPipe",
    ONE_F_ONE_B: "Schedule1F1B",
    INTERLEAVED: "ScheduleInterleaved1F1B",
    ZBV: "ScheduleZBVZeroBubble",
}
STAGES_PER_RANK = {GPIPE: 1, ONE_F_ONE_B: 1, INTERLEAVED: 2, ZBV: 2}
MAX_LAYERS = 32
MAX_MICROBATCHES = 32
MAX_BLOCK_MS = 1000  # a block's stand-in work: a second at most
MAX_WIDTH = 1024  # the layers' width: (1024, 1024) float32 is 4 MiB a layer

# A block's kind: a microbatch's forward, its whole backward, or (zero bubble) the input's gradient and the
# weights' gradient apart
F, B, I, W = "F", "B", "I", "W"  # noqa: E741 (torch's own letters for them)
KIND_PHASE = {F: "forward", B: "backward", I: "backward_input", W: "backward_weight"}
WORK = {F: 1, B: 2, I: 1, W: 1}  # a block's work in forwards: a whole backward is about two (input, weights)
SLOW_FACTOR = 3  # the slow stage's blocks take this many times a block's stand-in work (FitConfig.slow_stage)
PP_PHASES = ("forward", "backward", "backward_input", "backward_weight", "loss", "optimizer")

# Time slots after those every layout has (START ... OPTIMIZER_END): the batch loaded, the schedule's start,
# then each block's start and end. A pipeline's rank marks START again after a barrier of the pipeline's
# ranks, just before its schedule: their clocks share that zero, so that idle time reads across ranks
LOADED, SCHEDULE_START, FIRST_BLOCK = 4, 5, 6


class Block(NamedTuple):
    """One block of a rank's schedule: a kind (F, B, I, W) of one stage on one microbatch."""

    kind: str
    stage: int
    microbatch: int


def hidden(cfg) -> int:
    """The layers' width h between the first and the last: cfg.width, or the features d where it is 0."""
    return cfg.width or cfg.n_features


def stages_per_rank(schedule: str) -> int:
    return STAGES_PER_RANK[schedule]


def n_stages(schedule: str, p: int) -> int:
    """The stages S = p·v of p ranks."""
    return p * stages_per_rank(schedule)


def stage_rank(schedule: str, p: int, stage: int) -> int:
    """The rank that runs `stage`: round (stage mod p), or down and back up for ZBV's "v"."""
    if schedule == ZBV:
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def rank_stages(schedule: str, p: int, rank: int) -> tuple[int, ...]:
    """The stages rank `rank` runs, in order."""
    return tuple(s for s in range(n_stages(schedule, p)) if stage_rank(schedule, p, s) == rank)


def stage_layers(layers: int, stages: int) -> list[tuple[int, int]]:
    """Each stage's layers [lo, hi), as even as they go, the first ones one more (10 over 4: 3, 3, 2, 2)."""
    base, extra = divmod(layers, stages)
    bounds, lo = [], 0
    for s in range(stages):
        hi = lo + base + (1 if s < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


# order, ticks and torch's order are pure in (schedule, p, m) and read for every picture a page polls, every
# spec and every config check: each is made once (torch's builds a schedule on stand-ins, about a ms)
@functools.lru_cache(maxsize=64)
def order(schedule: str, p: int, m: int) -> tuple[tuple[Block, ...], ...]:
    """Each rank's blocks in the order its schedule runs them (what a run measures, tests/test_pp.py holds
    them equal): GPipe's all forwards then all backwards; 1F1B's p − r forwards first, then one backward and
    one forward in turn; the interleaved and zero-bubble schedules' own order, as torch computes it."""
    if schedule == GPIPE:
        return tuple(
            tuple(Block(F, r, i) for i in range(m)) + tuple(Block(B, r, i) for i in range(m))
            for r in range(p)
        )
    if schedule == ONE_F_ONE_B:
        ranks = []
        for r in range(p):
            warm = min(m, p - r)
            blocks = [Block(F, r, i) for i in range(warm)]
            for i in range(m - warm):
                blocks += [Block(B, r, i), Block(F, r, warm + i)]
            blocks += [Block(B, r, i) for i in range(m - warm, m)]
            ranks.append(tuple(blocks))
        return tuple(ranks)
    return _torch_order(schedule, p, m)


@functools.lru_cache(maxsize=64)
def _torch_order(schedule: str, p: int, m: int) -> tuple[tuple[Block, ...], ...]:
    """The order torch's multi-stage schedules compute for every rank (their pipeline_order), read from a
    schedule made on stand-ins for the stages: it reads only their sizes and indices."""
    from types import SimpleNamespace

    from torch import nn
    from torch.distributed.pipelining import schedules

    cls = getattr(schedules, CLASSES[schedule])
    stand_ins = [
        SimpleNamespace(group_size=p, group_rank=0, num_stages=n_stages(schedule, p), stage_index=s,
                        submod=nn.Identity(), stage_index_to_group_rank=None)
        for s in rank_stages(schedule, p, 0)
    ]  # fmt: skip
    made = cls(stand_ins, n_microbatches=m)
    kinds = {"F": F, "B": B, "I": I, "W": W}  # the compute actions' values; the rest are sends, receives
    out = []
    for r in range(p):
        blocks = []
        for action in made.pipeline_order[r]:
            kind = kinds.get(action.computation_type.value) if action is not None else None
            if kind is not None:
                blocks.append(Block(kind, action.stage_index, action.microbatch_index))
        out.append(tuple(blocks))
    return tuple(out)


def uneven(data_size: int, batch_size: int, m: int) -> str:
    """The field that keeps m microbatches from cutting every batch equally ("batch_size": the last batch
    would be smaller; "microbatches": the batch does not divide by m), or "" where they all are equal."""
    b = min(batch_size, data_size)
    return "batch_size" if data_size % b else "microbatches" if b % m else ""


def schedule_problem(schedule: str, p: int, m: int) -> str | None:
    """What torch's schedule refuses for p ranks and m microbatches (its own ValueError's words), or None."""
    if schedule == ONE_F_ONE_B and m < p:
        return f"Schedule1F1B needs at least as many microbatches as stages ({p})"
    if schedule in (INTERLEAVED, ZBV):
        try:
            _torch_order(schedule, p, m)
        except (ValueError, RuntimeError, AssertionError) as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


# ---------------------------------------------------------------------------------------------------------
# The schedule in unit time, and the bubble.


@functools.lru_cache(maxsize=64)
def ticks(schedule: str, p: int, m: int) -> tuple[tuple[int, ...], ...]:
    """Each rank's blocks' start in unit time (every block one tick, as the textbook figures draw them): a
    block starts when its rank is free and what it needs is done (a forward the stage before's forward of
    its microbatch, a backward the stage after's backward, W its own I). The phase walk steps through them."""
    runs = order(schedule, p, m)
    last_stage = n_stages(schedule, p) - 1
    done: dict[tuple[str, int, int], int] = {}  # (kind, stage, microbatch) -> its end tick
    free = [0] * p
    nxt = [0] * p
    starts: list[list[int]] = [[] for _ in range(p)]
    while any(nxt[r] < len(runs[r]) for r in range(p)):
        moved = False
        for r in range(p):
            if nxt[r] >= len(runs[r]):
                continue
            blk = runs[r][nxt[r]]
            need = _needs(blk, last_stage)
            if any(n not in done for n in need):
                continue
            start = max([free[r], *(done[n] for n in need)])
            starts[r].append(start)
            done[(blk.kind if blk.kind != I else B, blk.stage, blk.microbatch)] = start + 1
            if blk.kind == I:
                done[(I, blk.stage, blk.microbatch)] = start + 1
            free[r], nxt[r], moved = start + 1, nxt[r] + 1, True
        if not moved:
            raise ValueError(f"the {schedule} order of p={p}, m={m} waits on itself")
    return tuple(tuple(s) for s in starts)


def _needs(blk: Block, last_stage: int) -> list[tuple[str, int, int]]:
    s, i = blk.stage, blk.microbatch
    if blk.kind == F:
        return [(F, s - 1, i)] if s > 0 else []
    if blk.kind == W:
        return [(I, s, i)]
    return [(F, s, i)] + ([(B, s + 1, i)] if s < last_stage else [])  # B or I: the stage after's input grad


def formula_bubble(schedule: str, p: int, m: int) -> float:
    """The bubble's share of the step by its formula: GPipe's and 1F1B's (p − 1)/(m + p − 1) of the step
    (Huang et al., 2019; the share of p·(m + p − 1) slots left idle), v-fold less when each rank runs v
    stages (Narayanan et al., 2021: (p − 1)/(v·m) of the ideal compute, here of the step); the zero-bubble
    schedule's is its unit-time schedule's own (Qi et al., 2024)."""
    if schedule in (GPIPE, ONE_F_ONE_B):
        return (p - 1) / (m + p - 1)
    if schedule == INTERLEAVED:
        v = stages_per_rank(schedule)
        return (p - 1) / v / (m + (p - 1) / v)
    return unit_bubble(schedule, p, m)


def formula_text(schedule: str) -> str:
    """The formula as the page writes it."""
    return {GPIPE: "(p−1)/(m+p−1)", ONE_F_ONE_B: "(p−1)/(m+p−1)", INTERLEAVED: "(p−1)/(v·m+p−1)",
            ZBV: "unit-time ZB-V"}[schedule]  # fmt: skip


def unit_bubble(schedule: str, p: int, m: int) -> float:
    """The idle share of the unit-time schedule (ticks): 1 − blocks / (p × its length)."""
    starts = ticks(schedule, p, m)
    length = max(s for rank in starts for s in rank) + 1
    return 1 - sum(len(rank) for rank in starts) / (p * length)


def measured_bubble(busy: Sequence[float], spans: Sequence[float]) -> float:
    """The idle share of a measured step: 1 − Σ each rank's busy time / (p × the longest rank's span), where
    a rank's span is from the schedule's start (a barrier: every rank's zero) to its last block's end."""
    window = max(spans, default=0.0)
    if window <= 0:
        return 0.0
    return max(0.0, 1 - sum(busy) / (len(busy) * window))


# ---------------------------------------------------------------------------------------------------------
# What a stage holds and sends.


def held_counts(blocks: Sequence[Block]) -> dict[int, int]:
    """Per stage, the most microbatches whose activations it keeps at once (their forward run, their
    backward not yet done: GPipe's m, 1F1B's at most p − r); a zero-bubble stage frees them at W."""
    now: dict[int, int] = {}
    most: dict[int, int] = {}
    split = any(b.kind == W for b in blocks)
    for b in blocks:
        if b.kind == F:
            now[b.stage] = now.get(b.stage, 0) + 1
            most[b.stage] = max(most.get(b.stage, 0), now[b.stage])
        elif b.kind == (W if split else B):
            now[b.stage] -= 1
    return most


def layer_shape(layer: int, layers: int, d: int, h: int) -> tuple[int, int]:
    """A layer's weight (out, in): the first takes d features, the last gives 1, the others h wide."""
    return (1 if layer == layers - 1 else h, d if layer == 0 else h)


def activation_bytes(rows: int, d: int, h: int, bounds: tuple[int, int], itemsize: int = 4) -> int:
    """What a stage of layers [lo, hi) keeps of one microbatch for backward: each layer's input, (rows, d)
    for the first layer, (rows, h) for the others."""
    lo, hi = bounds
    return sum(rows * (d if layer == 0 else h) for layer in range(lo, hi)) * itemsize


def receiver(kind: str, stage: int, schedule: str, p: int) -> int | None:
    """The stage a block hands its tensor to, where that stage is on another rank: a forward's next stage,
    a backward's (or I's) stage before; None for the last stage's forward (its output is the loss's), the
    first stage's backward, W, and a neighbour on the same rank (ZBV's middle stages: no message)."""
    to = stage + 1 if kind == F else stage - 1 if kind in (B, I) else None
    if to is None or not 0 <= to < n_stages(schedule, p):
        return None
    return to if stage_rank(schedule, p, to) != stage_rank(schedule, p, stage) else None


def sent_bytes(kind: str, stage: int, schedule: str, p: int, rows: int, h: int, itemsize: int = 4) -> int:
    """What a block sends another rank's stage: a forward's activations, or a backward's gradient of its
    input, (rows, h) each; nothing where receiver() names none."""
    return rows * h * itemsize if receiver(kind, stage, schedule, p) is not None else 0


def step_bytes(rows: int, h: int, p: int, schedule: str, itemsize: int = 4) -> int:
    """A whole step's bytes between ranks: each microbatch's activations down every link between stages on
    two ranks and their gradients back up, (rows, h) each: 2·links·B·h·itemsize, whatever the number of
    microbatches (links = S − 1 but where the "v" keeps two neighbouring stages on one rank)."""
    stages = n_stages(schedule, p)
    links = sum(stage_rank(schedule, p, s) != stage_rank(schedule, p, s + 1) for s in range(stages - 1))
    return 2 * links * rows * h * itemsize


def planned_memory(cfg, rank: int, p: int, itemsize: int = 4) -> dict:
    """The bytes rank `rank` of p will hold: its stages' layers (layer_shape's numbers, b with the last),
    their gradients, and Adam's two moments of each number and a 4-byte step per tensor."""
    d, h, stages = cfg.n_features, hidden(cfg), n_stages(cfg.schedule, p)
    numbers = tensors = 0
    for s in rank_stages(cfg.schedule, p, rank):
        lo, hi = stage_layers(cfg.layers, stages)[s]
        for layer in range(lo, hi):
            last = layer == cfg.layers - 1
            out, inp = layer_shape(layer, cfg.layers, d, h)
            numbers += out * inp + (1 if last else 0)
            tensors += 2 if last else 1
    optimizer = 2 * numbers * itemsize + 4 * tensors if cfg.optimizer == "adam" else 0
    return {"rank": rank, "parameters": numbers * itemsize, "gradients": numbers * itemsize,
            "optimizer_state": optimizer}  # fmt: skip


def steps_per_epoch(data_size: int, batch_size: int) -> int:
    """Every step takes one device's whole batch, cut into microbatches: ceil(N / B)."""
    return math.ceil(data_size / batch_size)


# ---------------------------------------------------------------------------------------------------------
# One rank's phases: its load, each block, the loss shared, its optimizer step.


def rank_specs(label: str, blocks: Sequence[Block], sent: Sequence[int], base: int) -> tuple[PhaseSpec, ...]:
    """One rank's step specs, its slots from `base`: each block between its two slots (the bytes it sends),
    from the shared zero; the loss shared after the schedule; the optimizer."""
    specs = []
    for i, (blk, nbytes) in enumerate(zip(blocks, sent)):
        specs.append(PhaseSpec(KIND_PHASE[blk.kind], label, nbytes, base + FIRST_BLOCK + 2 * i,
                               base + FIRST_BLOCK + 2 * i + 1))  # fmt: skip
    last = base + FIRST_BLOCK + 2 * len(blocks) - 1
    specs.append(PhaseSpec("loss", label, 0, last, base + LOSS_END))
    specs.append(PhaseSpec("optimizer", label, 0, base + LOSS_END, base + OPTIMIZER_END))
    return tuple(specs)


def slots(schedule: str, p: int, m: int) -> int:
    """A rank's time slots: the six every rank has, and two for each of its blocks (every rank runs as
    many)."""
    return FIRST_BLOCK + 2 * len(order(schedule, p, m)[0])


def block_seconds(cfg: Any, kind: str, stage: int) -> float:
    """A block's stand-in work (FitConfig.block_ms, in seconds): its kind's share of it, SLOW_FACTOR times
    that on the slow stage."""
    slow = SLOW_FACTOR if stage == cfg.slow_stage else 1
    return cfg.block_ms * WORK[kind] * slow / 1000


def bytes_of_step(rows: int, k: int, d: int, itemsize: int, cfg: FitConfig | None = None) -> int:
    """One step's bytes on k ranks (its record's `bytes_of_step`): activations down, gradients up, which
    grow with the rows (1F1B and the model's own width without a config)."""
    schedule = cfg.schedule if cfg is not None else ONE_F_ONE_B
    return step_bytes(rows, (cfg.width if cfg is not None else 0) or d, k, schedule, itemsize)


def rules(cfg: FitConfig, plan: object) -> None:
    """Its own config rules (its record's `rules`): a schedule torch has, at least a layer a stage, equal
    microbatches every step, and the microbatches the schedule needs (1F1B: at least p); each refused with
    one line that names the field."""
    if cfg.schedule not in SCHEDULES:
        raise ConfigError("schedule", cfg.schedule, Listed(SCHEDULES))
    p = cfg.workers
    stages = n_stages(cfg.schedule, p)
    if not (isinstance(cfg.layers, int) and stages <= cfg.layers <= MAX_LAYERS):
        most = MAX_LAYERS
        raise ConfigError("layers", cfg.layers, Text("config.pp_layers", stages=stages, most=most,
                                                      schedule=cfg.schedule))  # fmt: skip
    if not (isinstance(cfg.microbatches, int) and 1 <= cfg.microbatches <= MAX_MICROBATCHES):
        raise ConfigError("microbatches", cfg.microbatches, integer_range(1, MAX_MICROBATCHES))
    if not (isinstance(cfg.width, int) and 0 <= cfg.width <= MAX_WIDTH):
        raise ConfigError("width", cfg.width, Text("config.pp_width", most=MAX_WIDTH))
    if not (math.isfinite(cfg.block_ms) and 0 <= cfg.block_ms <= MAX_BLOCK_MS):
        raise ConfigError("block_ms", cfg.block_ms, Text("config.pp_block_ms", most=MAX_BLOCK_MS))
    if not (isinstance(cfg.slow_stage, int) and -1 <= cfg.slow_stage < stages):
        raise ConfigError("slow_stage", cfg.slow_stage, Text("config.pp_slow_stage", last=stages - 1))
    if cfg.slow_stage >= 0 and not cfg.block_ms:  # slower than nothing is nothing: say what makes it slow
        slow = Text("config.pp_slow_needs_block", factor=SLOW_FACTOR)
        raise ConfigError("slow_stage", cfg.slow_stage, slow)
    b = min(cfg.batch_size, cfg.data_size)
    field = uneven(cfg.data_size, cfg.batch_size, cfg.microbatches)
    if field == "batch_size":
        raise ConfigError("batch_size", cfg.batch_size, Text("config.pp_batches", rows=cfg.data_size))
    if field == "microbatches":
        fits = Listed(tuple(m for m in range(1, MAX_MICROBATCHES + 1) if b % m == 0))
        raise ConfigError("microbatches", cfg.microbatches, Text("config.pp_equal", batch=b, allowed=fits))
    problem = schedule_problem(cfg.schedule, p, cfg.microbatches)
    if problem:
        raise ConfigError("microbatches", cfg.microbatches, Text("config.pp_schedule", schedule=cfg.schedule,
                                                                  why=problem))  # fmt: skip


def lab_skip(cfg: FitConfig) -> str:
    """Why the lab has no pp column for cfg (its record's `lab_skip`): the microbatches would not cut its
    batches equally (a pipeline refuses the config: its receive buffers keep the first microbatch's shape)."""
    if uneven(cfg.data_size, cfg.batch_size, cfg.microbatches):
        b = min(cfg.batch_size, cfg.data_size)
        return t("cli.compare.skip.pp", batch=b, rows=cfg.data_size, m=cfg.microbatches)
    return ""
