"""What every strategy's training loop shares: the Control between steps, the model's first parameters, the
optimizer, and the messages a run ends with. Each loop lives in its strategy's package (fitcore.strategies).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol

import torch

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.errors import Text
from fitcore.core.events import Event, RunEnded
from fitcore.core.parallel import LinearModel, ShapeRecorder, init_parameters


class Trainer(Protocol):
    """A strategy's training, with the types it takes and gives (its record's `train`, and `torchrun`): it
    emits the run's events to `on_event` and returns its RunEnded; `control` pauses, paces and stops it, and
    `plan` is the device plan config.check made (a bare config's devices are read by the trainer itself).
    The registry's record types it loosely, from below the floor; tests/typed_contracts.py holds every
    trainer to this one."""

    def __call__(
        self,
        cfg: FitConfig,
        on_event: Callable[[Event], None] = ...,
        control: Control | None = None,
        *,
        plan: DevicePlan | None = None,  # by name, as every caller passes it
    ) -> RunEnded: ...


class Control:
    """Pause, resume, stop, pace and two time limits, all checked by the trainer between steps.

    A teacher who pauses to explain is not training: the time limit counts running time only, and a pause
    has a limit of its own, longer, so that a paused run whose page stays open keeps its slot for a lesson
    and a forgotten one still frees it (a closed page frees its run sooner: the pool's idle timeout).

    Args:
        pace: steps per second, or None for as fast as possible. May be changed during a run.
        max_seconds: stop the run once it has run (not been paused) this long (None: no limit).
        max_paused_seconds: stop the run once one pause has lasted this long (None: no limit).
        clock: monotonic seconds; an input so tests can drive time.
    """

    def __init__(
        self,
        pace: float | None = None,
        max_seconds: float | None = None,
        clock=time.monotonic,
        max_paused_seconds: float | None = None,
    ):
        self.pace = pace
        self.max_seconds = max_seconds
        self.max_paused_seconds = max_paused_seconds
        self.clock = clock
        self._paused_since: float | None = None  # when the pause under way began
        self.stop_reason: Text | None = None  # why the run was stopped, once it was
        self.paused_seconds = 0.0  # time spent paused so far: a run's speed counts running time only
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._one_step = threading.Event()  # Step while paused: let exactly one step through
        self._started = None
        self._next = None
        self._stepping = False  # between a wait() that let a step through and the next wait(): a step is on

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._one_step.clear()
        self._running.set()

    def step_once(self) -> None:
        """While paused, let exactly one more step run, then stay paused (the page's Step button)."""
        if self.paused:
            self._one_step.set()

    def stop(self, reason: Text = Text("run.message.stopped")) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
        self._stop.set()
        self._running.set()  # wake a paused run so that it can end

    @property
    def paused(self) -> bool:
        return not self._running.is_set() and not self._stop.is_set()

    @property
    def holding(self) -> bool:
        """Paused, and no step under way: a Pause that came during a step holds once that step has ended,
        and a run says it is paused from then (its status, the step it shows)."""
        return self.paused and not self._stepping

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait(self) -> bool:
        """Block while paused or until the pace allows the next step; False means end the run now."""
        self._stepping = False
        go = self._wait()
        self._stepping = go
        return go

    def _wait(self) -> bool:
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

        The pause's own limit runs meanwhile, so a forgotten paused run frees its slot.
        """
        since = self._paused_since = self.clock()
        stepped = False
        while not self._running.wait(0.05) and not self._out_of_time():
            if self._one_step.is_set():
                self._one_step.clear()
                stepped = True
                break
        now = self.clock()
        self.paused_seconds += now - since
        self._paused_since = None
        self._next = now  # the pace starts afresh after a pause: no burst to catch up
        return stepped

    def running_seconds(self) -> float:
        """How long the run has trained: since its first step, less every pause (the one under way too)."""
        if self._started is None:
            return 0.0
        now = self.clock()
        pausing = now - self._paused_since if self._paused_since is not None else 0.0
        return now - self._started - self.paused_seconds - pausing

    def limit_left(self) -> tuple[str, float, float] | None:
        """The limit that would stop the run next, as (its kind, its seconds, the seconds left): "pause" while
        paused, "run" while running; None without a limit (or before the first step)."""
        since = self._paused_since
        if since is not None and self.max_paused_seconds is not None:
            return "pause", self.max_paused_seconds, self.max_paused_seconds - (self.clock() - since)
        if since is None and self.max_seconds is not None and self._started is not None:
            return "run", self.max_seconds, self.max_seconds - self.running_seconds()
        return None

    def _out_of_time(self) -> bool:
        limit = self.limit_left()  # the pause's while paused, the training's while running
        if limit is not None and limit[2] < 0:
            key = "run.message.pause_limit" if limit[0] == "pause" else "run.message.time_limit"
            self.stop(Text(key, seconds=f"{limit[1]:g}"))
        return self._stop.is_set()


def finished_message(steps: int, elapsed: float, paused: float, where: Text | str = "") -> Text:
    """How long a finished run took (where: " on 2 processes", say), and how much of that it was paused.

    A run's messages are Texts, put into words where they are shown, in the language of the page or the
    command line that shows them (a run's thread or rank has none of its own).
    """
    paused_text = Text("run.message.paused_for", seconds=f"{paused:.1f}") if paused > 0 else ""
    return Text(
        "run.message.finished", steps=Text.count("count.step", steps), seconds=f"{elapsed:.2f}", where=where,
        paused=paused_text,
    )  # fmt: skip


def diverged_message(value: float, step: int, epoch: int, lr: float) -> Text:
    """Why a run diverged: the loss that stopped being a number, and the learning rate to blame."""
    return Text("run.message.diverged", value=str(value), step=step, epoch=epoch, lr=f"{lr:g}")


def warm_up() -> None:
    """Pay once, up front, for what the first optimizer costs a process (torch imports its compiler).

    Without it the first run of a server waits about two seconds before its first step.
    """
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def first_model(cfg: FitConfig, recorder: ShapeRecorder | None = None, make=None) -> LinearModel:
    """The model every strategy starts from: the same first parameters from the seed, in every process
    (`make(d)` builds another model with the same `.fc`, as the lab's BatchNorm model)."""
    raw = make(cfg.n_features) if make else LinearModel(cfg.n_features, recorder)
    init_parameters(raw, cfg.seed + 1)
    return raw


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


def describe_failure(exc: BaseException) -> Text:
    """A failed run's message: the exception's own text ("ValueError: cannot draw"), kept as written."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(exc).lower():
        return Text("run.message.out_of_memory", error=text)
    return Text("run.message.error", error=text)
