"""A strategy that lives in tests/ only: `solo`, one device, nothing split.

It is registered through the public registration (`fitcore.protocols.registry.register`, what an installed
package's `fitcore.strategies` entry point does) and gives every hook of the `Strategy` contract, each the
smallest true one: its training is one device's (the dataparallel loop on `cpu`, which splits nothing), its
picture is its own drawer (tests/solo_drawer.js, which the page serves and imports as it would an installed
package's), its check row trains and meets least squares, its compare
column steps on the reference's own batches, its what-if row holds everything on one device and sends
nothing. tests/test_contract.py runs it through the command line, the page, a recording, check, compare
and whatif without a line changed outside tests/.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from fitcore.core.devices import parse_devices
from fitcore.core.projection import Projection
from fitcore.kit import check
from fitcore.kit.equivalence import Trainer, max_diff
from fitcore.protocols.registry import Strategy

if TYPE_CHECKING:  # the config its hooks read, bound to the registry's C
    from fitcore.core.config import FitConfig

NAME = "solo"
LABEL = "One device"


def _steps_per_epoch(cfg) -> int:
    return math.ceil(cfg.data_size / cfg.batch_size)


def _train(cfg, on_event=lambda event: None, control=None, plan=None, **kwargs):
    # one device splits nothing, whatever devices the page's controls hold: the DataParallel loop on `cpu`
    # is exactly one device's training
    from fitcore.strategies.dataparallel.train import train

    return train(cfg, on_event, control, plan=parse_devices("cpu"), **kwargs)


def _step_lines(step) -> list[str]:
    return [f"solo · step {step.step} · loss {step.loss:.6g} · X {step.input_shape}"]


def _view():
    from fitcore.strategies.dataparallel import view

    return view


def _check_rows(machine) -> list:
    def run() -> check.Verified:
        from fitcore.core.config import FitConfig, validate
        from fitcore.core.data import least_squares, make_data

        cfg = validate(FitConfig(strategy=NAME, devices="cpu", epochs=300, data_size=64, batch_size=64))
        ended = _train(cfg)
        w, b = least_squares(*make_data(cfg))
        diff = max(abs(x - y) for x, y in zip((*ended.weights, ended.bias), (*w, b)))
        if not (ended.steps == cfg.total_steps and diff <= 1e-3):
            raise check.CheckFailed(f"{ended.steps} of {cfg.total_steps} steps; |W - W_lstsq| = {diff:.1g}")
        return check.Verified(f"one device, {ended.steps} steps; |W - W_lstsq| = {diff:.1g}", {"diff": diff})

    return [check.row("solo on cpu", run)]


class _Comparer(Trainer):
    """Its column of the lab: one device on the reference's own batches, as near to it as arithmetic is."""

    def __init__(self, cfg, data, device, plan, toggles):
        super().__init__(cfg, data, device)

    def batch(self, ids, reduction, n, reference) -> None:
        Trainer.step(self, ids, reduction)

    def step(self, rows, reduction, n, reference) -> float:
        return max_diff(self.flat(), reference.flat())


PROJECTIONS = (Projection(NAME, LABEL, lambda p, g, o, k: p + g + o, lambda params, k, batch=0.0: 0.0, 0),)


STRATEGY: Strategy[FitConfig] = Strategy(
    name=NAME,
    label=LABEL,
    short=LABEL,
    processes=False,
    drawer=NAME,  # its own drawer, a module beside it that the page serves (drawer_file)
    steps_per_epoch=_steps_per_epoch,
    train=_train,
    step_lines=_step_lines,
    markdown=lambda cfg=None: "**One device.** Nothing is split: the whole batch and the model, one device.",
    bytes_of_step=lambda rows, k, d, itemsize, cfg=None: 0,
    view=_view,
    check_rows=_check_rows,
    comparer=_Comparer,
    compare_causes=lambda cfg, plan, toggles, trained: [],
    engine=lambda plan: "one device in this process",
    engine_word=lambda plan: "one device",
    projections=lambda: PROJECTIONS,
    questions=lambda step, cfg, labels, extra=None: [],
    words={"title": "solo.title", "explain": "solo.explain", "lab": "solo.lab", "who": "solo.who"},
    locale=str(Path(__file__).with_name("solo_locale.json")),
    phases=lambda: ("forward", "loss", "backward", "step"),
    drawer_file=str(Path(__file__).with_name("solo_drawer.js")),
)
