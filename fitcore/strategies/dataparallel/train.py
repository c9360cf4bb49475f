"""DataParallel's training loop. It only emits events; printing, plotting and keeping history are its
consumers' work."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import accumulate
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from fitcore.core.config import FitConfig
from fitcore.core.data import epoch_order, least_squares, make_data, order_generator, ordered_batches
from fitcore.core.devices import DevicePlan, parse_devices
from fitcore.core.errors import Text
from fitcore.core.events import MAX_IDS, Detail, Event, Replica, RunEnded, Status, Step, run_started
from fitcore.core.parallel import LinearModel, ShapeRecorder
from fitcore.core.phases import BACKWARD_END, LOSS_END, OPTIMIZER_END
from fitcore.core.train import (
    Control,
    clear_grads,
    describe_failure,
    diverged_message,
    finished_message,
    first_model,
    make_optimizer,
    warm_up,
)
from fitcore.strategies.dataparallel.memory import dataparallel_memory
from fitcore.strategies.dataparallel.wrappers import EmulatedDataParallel, phase_recorder, wrap


class _Cut(NamedTuple):
    """One replica's part of a split: what its steps' Replica repeats, worked out once per split."""

    device: str
    start: int  # its rows [start, stop) of the batch
    stop: int
    ids_stop: int  # the end of its first rows, the ones whose dataset ids it names (MAX_IDS at most)
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]


def _cuts(records, plan: DevicePlan) -> tuple[_Cut, ...]:
    """Order the recorded forwards like the devices (threads finish in any order) and give row ranges."""
    if len(records) > 1:  # one device, or a batch of one row, needs no sorting
        order = {label: i for i, label in enumerate(plan.labels)}
        records = sorted(records, key=lambda r: order.get(r.device, len(order)))
    stops = list(accumulate(r.input_shape[0] for r in records))
    starts = [0] + stops[:-1]
    return tuple(
        _Cut(r.device, a, b, min(b, a + MAX_IDS), tuple(r.input_shape), tuple(r.output_shape))
        for r, a, b in zip(records, starts, stops)
    )


def _readable(p: torch.Tensor):
    """What the loop reads p's values from after each step: p, or on the CPU a NumPy view of its memory.

    Both have the same tolist() and item(), and the view stays current because optimizers update the
    parameters in place (docs/performance.md says why the loop reads a view).
    """
    return p.detach().numpy() if p.is_cpu else p


def train(
    cfg: FitConfig,
    on_event: Callable[[Event], None] = lambda event: None,
    control: Control | None = None,
    clock: Callable[[], float] = time.perf_counter,
    plan: DevicePlan | None = None,
) -> RunEnded:
    """Fit y = X·W + b with `cfg`, emitting RunStarted, one Step per batch, then RunEnded.

    The config must already be validated. A non-finite loss ends the run as diverged, Control.stop as
    stopped, and an exception inside the loop as failed with its message; the RunEnded is also returned.
    """
    control = control or Control()
    warm_up()  # the first optimizer of a process imports torch's compiler: keep that out of the timings
    t0 = clock()
    state = _Progress()
    try:
        status, message = _run(cfg, on_event, control, plan, state, clock, t0)
    except Exception as exc:  # noqa: BLE001 - a failed run must end with its message, never a dead thread
        status, message = Status.FAILED, describe_failure(exc)
    finally:
        if isinstance(state.model, EmulatedDataParallel):
            state.model.close()
    raw = state.raw
    if state.optimizer is not None and state.step:  # what each device held: device 0 the optimizer state
        held = dataparallel_memory(
            list(raw.parameters()), state.optimizer, state.devices, state.gpus, cfg.batch_size
        )
        on_event(Detail("memory", held))
    weights = tuple(raw.fc.weight.detach().view(-1).tolist()) if raw is not None else ()
    bias = raw.fc.bias.item() if raw is not None else float("nan")
    ended = RunEnded(status, message, state.step, weights, bias, state.loss, clock() - t0)
    on_event(ended)
    return ended


@dataclass
class _Progress:
    """What the loop has reached, kept outside it so that a failure can still report it."""

    step: int = 0
    loss: float | None = None
    raw: LinearModel | None = None
    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    devices: int = 1  # the selected devices (DataParallel's replicas, idle ones included)
    gpus: tuple[int, ...] = ()  # their CUDA indices, one a device (a virtual plan's one GPU is not k)


def _run(cfg, on_event, control, plan, state, clock, t0) -> tuple[Status, Text]:
    """Run the loop; return (status, message)."""
    # 1. data, reference and model, on the first device
    plan = plan or parse_devices(cfg.devices)
    X, y = make_data(cfg, plan.first_device)  # (N, d), (N, 1)
    lstsq_w, lstsq_b = least_squares(X, y)
    recorder = ShapeRecorder()
    raw = state.raw = first_model(cfg, recorder)
    model = state.model = wrap(raw, plan)
    params = list(raw.parameters())
    optimizer = state.optimizer = make_optimizer(cfg, params)
    state.devices = len(plan.labels)
    gpus = state.gpus = plan.device_ids if plan.kind == "cuda" else ()
    perm_gen = order_generator(cfg.seed)
    on_event(
        run_started(
            cfg, plan.labels, plan.describe(), cfg.batches_per_epoch, (lstsq_w, lstsq_b),
            emulated=plan.emulated, data_parallel=plan.uses_data_parallel,
        )
    )  # fmt: skip

    # 2. each batch is scattered, run on every replica and gathered; the loss is computed on the
    # gathered output, outside the wrapped module (DataParallel warns about scalar outputs).
    # The wrapper times its own phases (scatter ... gather); the loop marks the end of the loss, of
    # backward and of the optimizer step. The replicas record what they saw when the batch's rows change
    # (tensor.chunk splits the same rows the same way): a step like the step before reuses its records.
    weight, bias = _readable(raw.fc.weight), _readable(raw.fc.bias)
    phases = phase_recorder(model)  # None for a single device: no DataParallel, no phases
    # one device runs the model unwrapped: its steps call its nn.Linear itself, but for the first of each
    # split, whose shapes the recorder takes (LinearModel's own forward costs 2 µs a step, 3 % of the
    # tutorial's step on a CPU; benchmarks/overhead.py)
    direct = raw.fc if model is raw else None
    w_flat = weight.reshape(-1)  # (1, d) -> (d,): a view, read with tolist() after each step
    rows, cuts, in_shape, out_shape = 0, (), (), ()
    # the unshuffled epochs' order, 0..N-1, made once (a shuffled run draws its own order every epoch)
    everyone = None if cfg.shuffle else memoryview(torch.arange(X.shape[0]).numpy())
    for epoch in range(1, cfg.epochs + 1):
        order = epoch_order(X.shape[0], cfg.shuffle, perm_gen)  # this epoch's row order (None: 0..N-1)
        # a memoryview of the order's memory: its slices' tolist() are the cheapest way to each replica's ids
        ids_of = memoryview(order.numpy()) if order is not None else everyone
        offset = 0  # the batch's first position in the order
        for batch, (xb, yb) in enumerate(ordered_batches(X, y, cfg.batch_size, order), 1):  # (B, d), (B, 1)
            if not control.wait():
                return Status.STOPPED, control.stop_reason
            recorder.on = xb.shape[0] != rows  # a new split: the replicas say what they see
            out = direct(xb) if direct is not None and not recorder.on else model(xb)  # (B, 1), on device 0
            loss = F.mse_loss(out, yb)
            value = loss.item()
            if not math.isfinite(value):
                return Status.DIVERGED, diverged_message(value, state.step + 1, epoch, cfg.lr)
            if phases:
                phases.mark(LOSS_END)
            clear_grads(params)  # optimizer.zero_grad(set_to_none=True)
            loss.backward()  # the replicas' gradients are summed here, onto the one set of parameters
            if phases:
                phases.mark(BACKWARD_END)
            optimizer.step()
            if phases:
                phases.mark(OPTIMIZER_END)
            state.step, state.loss = state.step + 1, value
            if recorder.on:  # a new split: its row ranges and shapes, as the replicas recorded them
                cuts = _cuts(recorder.take(), plan)
                rows, in_shape, out_shape = xb.shape[0], tuple(xb.shape), tuple(out.shape)
            # each replica's part of the step: its cut, with the dataset ids of its first rows (where they
            # came from). Every step builds these; a split's cuts are worked out once (benchmarks/overhead.py)
            replicas = tuple([
                Replica(d, a, b, i, o, None, tuple(ids_of[offset + a : offset + c].tolist()))
                for d, a, b, c, i, o in cuts
            ])  # fmt: skip
            offset += rows
            on_event(
                Step(
                    state.step,
                    epoch,
                    batch,
                    value,
                    in_shape,
                    out_shape,
                    replicas,
                    tuple(w_flat.tolist()),
                    bias.item(),
                    clock() - t0,
                    phases.take() if phases else None,
                )
            )
            if state.step == 1:  # what each device holds, measured once Adam's state exists: the chips' bytes
                held = dataparallel_memory(params, optimizer, state.devices, gpus, cfg.batch_size)
                on_event(Detail("memory", held))
    return Status.FINISHED, finished_message(state.step, clock() - t0, control.paused_seconds)
