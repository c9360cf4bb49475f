"""What a strategy's view module gives the page, with the types it reads and returns: the contract the type
checker holds every registered view module to (tests/typed_contracts.py, run by tests/test_types.py).

The registry sits below the floor that declares these types, so its record names the view module only as a
module (`Strategy.view`); this protocol, one floor up, is where its functions are typed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fitcore.core.config import FitConfig
from fitcore.core.devices import DevicePlan
from fitcore.core.events import RunStarted, Step
from fitcore.runs.runner import Snapshot
from fitcore.view.common import Section


@runtime_checkable
class StrategyView(Protocol):
    """A strategy's view module: its planned first step, its panels, its parallelism line, its console."""

    CONSOLE_HINT: str  # the catalog key of what the console will show before a run

    def planned_step(self, cfg: FitConfig, plan: DevicePlan) -> tuple[Step, tuple[str, ...]]:
        """The first step as it will be split over `plan` (config.check's), before any run; the labels."""
        ...

    def sections(
        self, snap: Snapshot | None, cfg: FitConfig | None, plan: DevicePlan | None
    ) -> list[Section]:
        """Its panels below the live view: the run's (`snap`, on Snapshot.plan) or, before a run, the
        controls' (`cfg` on `plan`; None where the controls are not valid yet)."""
        ...

    def parallelism(self, cfg: FitConfig, started: RunStarted) -> str:
        """What ran the run, in a line: "DDP, 2 ranks, gloo"."""
        ...

    def console_frame(self, snap: Snapshot) -> tuple[list[str], list[str]]:
        """The command line's lines before and after a run's steps."""
        ...
