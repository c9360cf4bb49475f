"""A pipeline rank's part of the engine's one loop: its stages of the deep-linear model, run by PyTorch's own
pipelining (torch.distributed.pipelining's PipelineStage and a schedule: ScheduleGPipe, Schedule1F1B,
ScheduleInterleaved1F1B, ScheduleZBVZeroBubble).

Every rank takes the whole batch (one device's order); stage 0's rank feeds it to the schedule, which cuts it
into m equal microbatches and runs each stage's forward and backward of each, passing activations down and
their gradients back with send and receive. The last stage computes each microbatch's MSE; `scale_grads`
divides the gradients by m, so with equal microbatches a step is one device's step on the whole batch. The
schedule runs backward too: the loop's backward has nothing left to do.

Each block is timed by wrapping the stage's own forward_one_chunk, backward_one_chunk and
backward_weight_one_chunk (every schedule calls them); the schedule starts after a barrier of the pipeline's
ranks, so that their clocks share a zero and the idle time between blocks (the bubble) reads across ranks.
Ranks on one machine read one clock (CLOCK_MONOTONIC: processes, and network namespaces, share it), so their
zero is one instant, the earliest rank's exit from the barrier: a rank that the machine's scheduler ran late
after the barrier then shows that lateness, and a stage never seems to start before the activations it waits
for were made. Ranks on different machines each count from their own exit.
The first step infers the stages' shapes (tens of milliseconds): the part runs it once on zeros before the
loop, with no optimizer step, so that no timed step pays for it.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F_
from torch import nn

from fitcore.core.config import FitConfig
from fitcore.core.data import epoch_ids, order_generator
from fitcore.core.memory import rank_memory
from fitcore.core.phases import START
from fitcore.core.train import make_optimizer
from fitcore.engine.loop import Mark, Place, own_rows
from fitcore.protocols.mesh import PP
from fitcore.strategies.pp import layout
from fitcore.strategies.pp.layout import FIRST_BLOCK, SCHEDULE_START, B, Block, F, I, W, hidden
from fitcore.strategies.pp.model import deep_layers, product

ITEMSIZE = 4  # float32


class PpRank(NamedTuple):
    """What one rank holds: its stages' modules (by stage index), its optimizer, what its last step ran."""

    modules: dict[int, nn.Module]
    optimizer: torch.optim.Optimizer
    group: Any  # the pipeline's process group
    ran: tuple[Block, ...]  # its blocks of the last step, in the order they ran
    times: tuple[tuple[float, float], ...]  # each block's start and end, seconds from the schedule's start
    sent: tuple[int, ...]  # the bytes each block sent
    stages: int  # S
    rank: int  # its place in the pipeline


class PpPart:
    """A pipeline rank's part of the engine's loop (fitcore.engine.loop): its stages, the schedule."""

    def __init__(self, cfg: FitConfig, place: Place, mark: Mark):
        from torch.distributed.pipelining import PipelineStage, schedules

        self.cfg, self.mark, self.device = cfg, mark, place.device
        self.width = hidden(cfg)
        p, m = place.mesh.size(PP), cfg.microbatches
        self.p = p
        self.rank = place.coords.get(PP, place.rank)
        self.group = place.mesh.device_mesh(place.device.type)[PP].get_group()
        self.n_stages = layout.n_stages(cfg.schedule, p)
        layers = deep_layers(cfg)
        bounds = layout.stage_layers(cfg.layers, self.n_stages)
        self.modules: dict[int, nn.Module] = {}
        stages = []
        for s in layout.rank_stages(cfg.schedule, p, self.rank):
            lo, hi = bounds[s]
            module = nn.Sequential(*layers[lo:hi]).to(place.device)
            self.modules[s] = module
            stage = PipelineStage(module, s, self.n_stages, place.device, group=self.group)
            self._time(stage, s)
            stages.append(stage)
        self.first = any(st.is_first for st in stages)
        self.last = any(st.is_last for st in stages)
        params = [q for module in self.modules.values() for q in module.parameters()]
        self.optimizer = make_optimizer(cfg, params)
        cls = getattr(schedules, layout.CLASSES[cfg.schedule])
        one = layout.stages_per_rank(cfg.schedule) == 1
        self.schedule = cls(
            stages[0] if one else stages, n_microbatches=m, loss_fn=F_.mse_loss, scale_grads=True
        )
        self.generator = order_generator(cfg.seed)  # one device's order (dataparallel's)
        self.ran: list[Block] = []
        self.times: list[tuple[float, float]] = []
        self.block_bytes: list[int] = []
        self.rows: dict[tuple[int, int], int] = {}  # (stage, microbatch) -> its rows, as its forward saw them
        self.zero = 0.0
        self.one_clock = place.device.type == "cpu" and one_machine(self.group)
        self.recording = False
        rows = min(cfg.batch_size, cfg.data_size)
        x = torch.zeros(rows, cfg.n_features, device=place.device)
        self._run(x, torch.zeros(rows, 1, device=place.device))  # the shapes inferred, untimed, no step
        self.optimizer.zero_grad(set_to_none=True)
        self.recording = True

    # ---- timing each block, as the schedule calls the stage's own methods

    def _time(self, stage: Any, s: int) -> None:
        for method, kind in (
            ("forward_one_chunk", F),
            ("backward_one_chunk", B),
            ("backward_weight_one_chunk", W),
        ):
            setattr(stage, method, self._timed(getattr(stage, method), kind, s))

    def _timed(self, run: Any, kind: str, s: int) -> Any:
        def timed(chunk: int, *args: Any, **kwargs: Any) -> Any:
            if not self.recording:
                return run(chunk, *args, **kwargs)
            full = kwargs.get("full_backward", args[1] if kind == B and len(args) > 1 else True)
            block = Block(I if kind == B and not full else kind, s, chunk)
            i = len(self.ran)
            self.mark(FIRST_BLOCK + 2 * i)
            start = self._now()
            out = run(chunk, *args, **kwargs)
            if self.cfg.block_ms:  # the stand-in work of a bigger model's block (FitConfig.block_ms)
                time.sleep(layout.block_seconds(self.cfg, block.kind, block.stage))
            self.mark(FIRST_BLOCK + 2 * i + 1)
            self.times.append((start, self._now()))
            self.ran.append(block)
            self.block_bytes.append(self._sent(block, out))
            return out

        return timed

    def _sent(self, block: Block, out: Any) -> int:
        """The bytes the block sends another rank: a forward's output to the next stage, a backward's
        gradient of its input to the stage before (the shape of what its forward took), as the tensors
        measure them; none to a stage on this rank (layout.receiver)."""
        if block.kind == F:
            rows = out.shape[0] if isinstance(out, torch.Tensor) else 0
            self.rows[(block.stage, block.microbatch)] = rows
        if layout.receiver(block.kind, block.stage, self.cfg.schedule, self.p) is None:
            return 0
        if block.kind == F:
            return out.numel() * out.element_size()
        return self.rows.get((block.stage, block.microbatch), 0) * self.width * ITEMSIZE  # its input's grad

    # ---- the loop's calls

    def _clock(self) -> float:
        """Now, the work queued so far done (a GPU's queue waited for)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _shared_zero(self) -> float:
        """The step's zero, read just after the barrier: on one machine the earliest rank's reading (one
        clock), else this rank's own."""
        now = self._clock()
        if not self.one_clock:
            return now
        zero = torch.tensor([now], dtype=torch.float64)
        dist.all_reduce(zero, op=dist.ReduceOp.MIN, group=self.group)
        return zero.item()

    def _now(self) -> float:
        """Seconds from the schedule's start: the part's own record of its last step, which it reports at
        the end (the step's slots go to the parent)."""
        return self._clock() - self.zero

    @property
    def holds(self) -> PpRank:
        return PpRank(self.modules, self.optimizer, self.group, tuple(self.ran), tuple(self.times),
                      tuple(self.block_bytes), self.n_stages, self.rank)  # fmt: skip

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        """Every row of the epoch, in one device's order, in whole batches: every rank takes every row."""
        cfg = self.cfg
        return epoch_ids(cfg.data_size, cfg.batch_size, cfg.shuffle, self.generator)

    def inputs(self, X, y, idx):
        return own_rows(X, y, idx)  # the whole batch: stage 0's rank feeds it, the last takes its targets

    def forward_loss(self, x: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole schedule, forward and backward of every microbatch, after a barrier of the pipeline's
        ranks; the batch's loss (the mean of the microbatches' on the last stage) summed to every rank."""
        dist.barrier(group=self.group)
        self.zero = self._shared_zero()
        at = self.zero if self.one_clock else None  # a pipeline's step counts from its ranks' zero
        self.mark(START, at)
        self.mark(SCHEDULE_START, at)
        loss = self._run(x, yb)
        return torch.empty(x.shape[0], 1 if self.last else self.width), loss

    def _run(self, x: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        losses: list[torch.Tensor] = []
        args = (x,) if self.first else ()
        self.schedule.step(*args, target=yb if self.last else None, losses=losses)
        mean = (
            torch.stack([v.detach() for v in losses]).mean() if losses else torch.zeros((), device=x.device)
        )
        dist.all_reduce(mean, group=self.group)  # the last stage's loss, on every rank (the others add 0)
        return mean

    def backward(self, loss: torch.Tensor) -> None:
        pass  # the schedule ran every microbatch's backward

    def begin_step(self) -> None:
        self.ran, self.times, self.block_bytes, self.rows = [], [], [], {}

    def end_backward(self) -> None:
        pass

    def end_early(self) -> None:
        pass

    def sent(self, out: torch.Tensor) -> tuple[int, ...]:
        """The bytes each of the step's blocks sent, in the order they ran."""
        return tuple(self.block_bytes)


def machine_id() -> str:
    """This machine's identity: its host name and, on Linux, its kernel's boot id (network namespaces
    share it, and the clock with it)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()} {boot.read_text().strip() if boot.exists() else ''}"


def one_machine(group: Any) -> bool:
    """Do the group's ranks run on one machine, reading one clock? Asked once, when the part is made."""
    every: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, machine_id(), group=group)
    return len(set(every)) == 1


# ---------------------------------------------------------------------------------------------------------
# What a pipeline rank reports (the engine's Engine) and how the parent reads it.


def stage_products(holds: PpRank) -> list[torch.Tensor]:
    """Each of its stages' layers multiplied, in stage order: (its last layer's out, its first layer's in)."""
    return [product([layer.weight.detach() for layer in holds.modules[s]]) for s in sorted(holds.modules)]


def own_products(rank: int, holds: PpRank) -> tuple[tuple[float, ...], float | None]:
    """What a rank reports after each step: its stages' products, flat in stage order; b from the rank
    that holds the last stage."""
    flat = tuple(v for w in stage_products(holds) for v in w.reshape(-1).tolist())
    return flat, own_bias(holds)


def own_bias(holds: PpRank) -> float | None:
    """b, from the rank that holds the last stage (its last layer's); None from the others."""
    last = holds.stages - 1
    return holds.modules[last][-1].bias.item() if last in holds.modules else None


def joined_products(holds: PpRank) -> tuple[tuple[float, ...], float]:
    """W and b as every rank can gather them (an all-gather of every stage's product: torchrun's lead rank,
    the end of a run), multiplied in stage order."""
    mine = {s: w.cpu() for s, w in zip(sorted(holds.modules), stage_products(holds))}
    every: list[Any] = [None] * dist.get_world_size(holds.group)
    dist.all_gather_object(every, (mine, own_bias(holds)), group=holds.group)
    by_stage = {s: w for part, _ in every for s, w in part.items()}
    w = product([by_stage[s] for s in range(holds.stages)])
    return tuple(w.view(-1).tolist()), next(b for _, b in every if b is not None)


def holds_memory(rank: int, holds: PpRank) -> dict:
    """What a rank measured it holds: its stages' layers, their gradients and their optimizer state."""
    params = [q for s in sorted(holds.modules) for q in holds.modules[s].parameters()]
    return rank_memory(rank, params, holds.optimizer)


def last_blocks(holds: PpRank) -> list[dict]:
    """Its last step's blocks as it ran them: kind, stage, microbatch, start and end (seconds from the
    schedule's start), the bytes each sent."""
    return [
        {"kind": b.kind, "stage": b.stage, "microbatch": b.microbatch, "start": t0, "end": t1, "sent": n}
        for b, (t0, t1), n in zip(holds.ran, holds.times, holds.sent)
    ]


def held_and_ran(holds: PpRank) -> dict:
    """What the rank holds, measured, and the blocks of its last step: what it reports after step 1 (Adam's
    state exists then) and at the end."""
    return {"memory": holds_memory(holds.rank, holds), "blocks": last_blocks(holds)}


def final_rows(holds: PpRank) -> tuple[tuple[tuple[float, ...], float], dict]:
    """After the loop: W and b gathered (a collective every rank makes), and what this rank holds and ran."""
    return joined_products(holds), held_and_ran(holds)


def first_step_extra(rank: int, holds: PpRank, step: int) -> dict | None:
    """Step 1's report, for the console and the page's tables from the first step on."""
    return held_and_ran(holds) if step == 1 else None
