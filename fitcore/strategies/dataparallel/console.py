"""DataParallel's console lines: the tutorial's `In Model:` line from inside each replica's forward, and its
`Outside:` line after the gather, as the study note prints them (torch.Size([100, 2]))."""

from __future__ import annotations

from fitcore.core.events import Replica, Step
from fitcore.core.i18n import t
from fitcore.runs.console import device_label, size


def in_model_line(replica: Replica) -> str:
    """The tutorial's `In Model:` line, printed from inside each replica's forward, plus its device."""
    return t(
        "cli.console.in_model",
        input=size(replica.input_shape),
        output=size(replica.output_shape),
        device=device_label(replica.device),
    )


def outside_line(step: Step) -> str:
    """The tutorial's `Outside:` line, printed by the loop after the gather, plus the loss."""
    return t(
        "cli.console.outside",
        input=size(step.input_shape),
        output=size(step.output_shape),
        loss=f"{step.loss:.6g}",
        epoch=step.epoch,
        step=step.step,
    )


def step_lines(step: Step) -> list[str]:
    """A DataParallel step: one `In Model:` line per replica, then the `Outside:` line."""
    return [in_model_line(r) for r in step.replicas] + [outside_line(step)]
