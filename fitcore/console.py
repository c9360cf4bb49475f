"""The tutorial's own printed lines, made from events. Shared by the command line and the dashboard."""

from __future__ import annotations

from fitcore.train import Replica, RunEnded, Step


def size(shape: tuple[int, ...]) -> str:
    """A shape as the tutorial prints it: torch.Size([100, 2])."""
    return f"torch.Size({list(shape)})"


def in_model_line(replica: Replica) -> str:
    """The tutorial's `In Model:` line, printed from inside each replica's forward, plus its device."""
    return (
        f"\tIn Model: input size {size(replica.input_shape)} output size {size(replica.output_shape)}"
        f"  [{replica.device}]"
    )


def outside_line(step: Step) -> str:
    """The tutorial's `Outside:` line, printed by the loop after the gather, plus the loss."""
    return (
        f"Outside: input size {size(step.input_shape)} output_size {size(step.output_shape)} "
        f"loss: {step.loss:.6g}  (epoch {step.epoch}, step {step.step})"
    )


def step_lines(step: Step) -> list[str]:
    return [in_model_line(r) for r in step.replicas] + [outside_line(step)]


def _vector(values) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def summary_lines(
    ended: RunEnded,
    true_weights: tuple[float, ...],
    true_bias: float,
    lstsq_weights: tuple[float, ...] | None,
    lstsq_bias: float | None,
    steps_per_second: float,
) -> list[str]:
    """Learned, true and least-squares parameters, and how the run ended."""
    lines = [
        f"Learned:        W = {_vector(ended.weights)}  b = {ended.bias:.4f}",
        f"True:           W = {_vector(true_weights)}  b = {true_bias:.4f}",
    ]
    if lstsq_weights is not None:
        lines.append(f"Least squares:  W = {_vector(lstsq_weights)}  b = {lstsq_bias:.4f}")
    loss = f"{ended.final_loss:.6g}" if ended.final_loss is not None else "none"
    lines.append(
        f"Status: {ended.status} ({ended.message}); final loss {loss}; {steps_per_second:.0f} steps/s"
    )
    return lines
