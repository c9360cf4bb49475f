"""The training loop. It only emits events; printing, plotting and keeping history are its consumers' work."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from itertools import accumulate
from typing import Callable

import torch
import torch.nn.functional as F

from fitcore.config import FitConfig
from fitcore.data import epoch_order, least_squares, make_data, ordered_batches
from fitcore.devices import DevicePlan, parse_devices
from fitcore.events import Event, Replica, RunEnded, Status, Step, run_started
from fitcore.i18n import count, t
from fitcore.parallel import (
    EmulatedDataParallel,
    LinearModel,
    ShapeRecorder,
    init_parameters,
    phase_recorder,
    replica_ids,
    wrap,
)
from fitcore.phases import BACKWARD_END, LOSS_END, OPTIMIZER_END


class Control:
    """Pause, resume, stop, pace and a time limit, all checked by the trainer between steps.

    Args:
        pace: steps per second, or None for as fast as possible. May be changed during a run.
        max_seconds: stop the run once it has run this long (None: no limit).
        clock: monotonic seconds; an input so tests can drive time.
    """

    def __init__(self, pace: float | None = None, max_seconds: float | None = None, clock=time.monotonic):
        self.pace = pace
        self.max_seconds = max_seconds
        self.clock = clock
        self.stop_reason = ""
        self.paused_seconds = 0.0  # time spent paused so far: a run's speed counts running time only
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._one_step = threading.Event()  # Step while paused: let exactly one step through
        self._started = None
        self._next = None

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._one_step.clear()
        self._running.set()

    def step_once(self) -> None:
        """While paused, let exactly one more step run, then stay paused (the page's Step button)."""
        if self.paused:
            self._one_step.set()

    def stop(self, reason: str = "stopped by the user") -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
        self._stop.set()
        self._running.set()  # wake a paused run so that it can end

    @property
    def paused(self) -> bool:
        return not self._running.is_set() and not self._stop.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait(self) -> bool:
        """Block while paused or until the pace allows the next step; False means end the run now."""
        if self._started is None:
            self._started = self.clock()
        if not self._running.is_set():  # checked first: waiting on a set Event takes its lock every step
            if self._wait_paused():
                return not self._stop.is_set()  # one step, at once: Step ignores the pace
        if self.pace and not self._stop.is_set():
            now = self.clock()
            # one step every 1/pace seconds; a late step is not made up for with a burst
            self._next = now if self._next is None else max(self._next + 1 / self.pace, now)
            if self._next > now and self._stop.wait(self._next - now):
                return False
            if not self._running.is_set():  # paused while waiting for the pace: no step after the pause
                self._wait_paused()
        if self.max_seconds is not None:
            self._out_of_time()
        return not self._stop.is_set()

    def _wait_paused(self) -> bool:
        """Block while paused; True when a single step (step_once) was let through.

        The time limit still runs while paused, so a forgotten paused run frees its slot.
        """
        since = self.clock()
        stepped = False
        while not self._running.wait(0.05) and not self._out_of_time():
            if self._one_step.is_set():
                self._one_step.clear()
                stepped = True
                break
        now = self.clock()
        self.paused_seconds += now - since
        self._next = now  # the pace starts afresh after a pause: no burst to catch up
        return stepped

    def _out_of_time(self) -> bool:
        if self.max_seconds is not None and self.clock() - self._started > self.max_seconds:
            self.stop(f"stopped at the time limit of {self.max_seconds:g} s")
        return self._stop.is_set()


def finished_message(steps: int, elapsed: float, paused: float, where: str = "") -> str:
    """How long a finished run took (where: " on 2 processes", say), and how much of that it was paused."""
    paused_text = t("cli.run.paused", seconds=f"{paused:.1f}") if paused > 0 else ""
    return t(
        "cli.run.finished", steps=count("count.step", steps), seconds=f"{elapsed:.2f}", where=where,
        paused=paused_text,
    )  # fmt: skip


def diverged_message(value: float, step: int, epoch: int, lr: float) -> str:
    """Why a run diverged: the loss that stopped being a number, and the learning rate to blame."""
    return t("cli.run.diverged", value=value, step=step, epoch=epoch, lr=f"{lr:g}")


def warm_up() -> None:
    """Pay once, up front, for what the first optimizer costs a process (torch imports its compiler).

    Without it the first run of a server waits about two seconds before its first step.
    """
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def _replicas(records, plan: DevicePlan) -> tuple[Replica, ...]:
    """Order the recorded forwards like the devices (threads finish in any order) and give row ranges."""
    if len(records) > 1:  # one device, or a batch of one row, needs no sorting
        order = {label: i for i, label in enumerate(plan.labels)}
        records = sorted(records, key=lambda r: order.get(r.device, len(order)))
    stops = list(accumulate(r.input_shape[0] for r in records))
    starts = [0] + stops[:-1]
    return tuple(
        Replica(r.device, a, b, tuple(r.input_shape), tuple(r.output_shape))
        for r, a, b in zip(records, starts, stops)
    )


def _readable(p: torch.Tensor):
    """What the loop reads p's values from after each step: p, or on the CPU a NumPy view of its memory.

    Both have the same tolist() and item(), and the view stays current because optimizers update the
    parameters in place (docs/performance.md says why the loop reads a view).
    """
    return p.detach().numpy() if p.is_cpu else p


def make_optimizer(cfg: FitConfig, params):
    """SGD, or Adam in one fused kernel where torch has one for the parameters' device.

    Fused Adam is the same update as the default one (to rounding), in one call instead of a dozen small
    ops per parameter.
    """
    params = list(params)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    try:
        return torch.optim.Adam(params, lr=cfg.lr, fused=True)
    except (RuntimeError, ValueError, TypeError):  # no fused kernel here (older torch, other devices)
        return torch.optim.Adam(params, lr=cfg.lr)


def clear_grads(params) -> None:
    """optimizer.zero_grad(set_to_none=True), without the profiler scaffolding around it."""
    for p in params:
        p.grad = None


def describe_failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(exc).lower():
        return f"out of memory: {text}. Try a smaller data size or batch size."
    return text


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


def _run(cfg, on_event, control, plan, state, clock, t0) -> tuple[Status, str]:
    """Run the loop; return (status, message)."""
    # 1. data, reference and model, on the first device
    plan = plan or parse_devices(cfg.devices)
    X, y = make_data(cfg, plan.first_device)  # (N, d), (N, 1)
    lstsq_w, lstsq_b = least_squares(X, y)
    recorder = ShapeRecorder()
    raw = state.raw = LinearModel(cfg.n_features, recorder)
    init_parameters(raw, cfg.seed + 1)
    model = state.model = wrap(raw, plan)
    params = list(raw.parameters())
    optimizer = make_optimizer(cfg, params)
    perm_gen = torch.Generator().manual_seed(cfg.seed + 2)
    on_event(
        run_started(
            cfg, plan.labels, plan.describe(), cfg.batches_per_epoch, (lstsq_w, lstsq_b),
            emulated=plan.emulated, data_parallel=plan.uses_data_parallel,
        )
    )  # fmt: skip

    # 2. each batch is scattered, run on every replica and gathered; the loss is computed on the
    # gathered output, outside the wrapped module (DataParallel warns about scalar outputs).
    # The wrapper times its own phases (scatter ... gather); the loop marks the end of the loss, of
    # backward and of the optimizer step. A split like the step before's reuses its row ranges and shapes.
    weight, bias = _readable(raw.fc.weight), _readable(raw.fc.bias)
    phases = phase_recorder(model)  # None for a single device: no DataParallel, no phases
    records, ranges, spans, in_shape, out_shape = None, (), (), (), ()
    for epoch in range(1, cfg.epochs + 1):
        order = epoch_order(X.shape[0], cfg.shuffle, perm_gen)  # this epoch's row order (None: 0..N-1)
        ids_of = order.numpy() if order is not None else None  # slices of a NumPy view are cheapest
        offset = 0  # the batch's first position in the order
        for batch, (xb, yb) in enumerate(ordered_batches(X, y, cfg.batch_size, order), 1):  # (B, d), (B, 1)
            if not control.wait():
                return Status.STOPPED, control.stop_reason
            out = model(xb)  # (B, 1), gathered on the first device
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
            seen = recorder.take()
            if seen != records:  # a new split: the batch, and so its shapes, changed too
                records, ranges = seen, _replicas(seen, plan)
                spans = [(r.start, r.stop) for r in ranges]
                in_shape, out_shape = tuple(xb.shape), tuple(out.shape)
            ids = replica_ids(ids_of, offset, spans)  # where this step's rows came from in the dataset
            replicas = tuple(
                Replica(r.device, r.start, r.stop, r.input_shape, r.output_shape, None, i)
                for r, i in zip(ranges, ids)
            )
            offset += xb.shape[0]
            on_event(
                Step(
                    state.step,
                    epoch,
                    batch,
                    value,
                    in_shape,
                    out_shape,
                    replicas,
                    tuple(weight.tolist()[0]),  # (1, d) -> d numbers
                    bias.item(),
                    clock() - t0,
                    phases.take() if phases else None,
                )
            )
    return Status.FINISHED, finished_message(state.step, clock() - t0, control.paused_seconds)
