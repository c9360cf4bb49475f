"""Every line the user reads in a console, made from events: the command line prints them, so does the page.

DataParallel's are the tutorial's `In Model:` / `Outside:` lines; DistributedDataParallel's say what each rank
did, and describe the process group, the shards and every rank's final parameters (its Detail values).
"""

from __future__ import annotations

from fitcore.events import Replica, RunEnded, Step
from fitcore.text import plural, rate


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
    """A DataParallel step: one `In Model:` line per replica, then the `Outside:` line."""
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
    lines.append(f"Status: {ended.status} ({ended.message}); final loss {loss}; {rate(steps_per_second)}")
    return lines


def data_lines(source: dict, weights: tuple[float, ...], bias: float) -> list[str]:
    """A CSV run's file and, when its features were standardised, the parameters in the file's units."""
    from fitcore.csvdata import data_result

    names = ", ".join(source["features"])
    standardised = "features and target standardised (mean 0, std 1)"
    scaled = standardised if source.get("standardized") else "features as in the file"
    lines = [f"Data:           {source['file']}: {source['target']} from {names}, {source['rows']} rows; "
             f"{scaled}"]  # fmt: skip
    if source.get("standardized") and weights:
        r = data_result(source, weights, bias)
        lines.append(f"In file units:  W = {_vector(r['weights_original'])}  b = {r['bias_original']:.4f}")
    return lines


# ---------------------------------------------------------------------------------------------------------
# DistributedDataParallel: a line per rank and step, and the values of its Details.


def rank_line(replica: Replica) -> str:
    """The tutorial's `In Model:` line, as one rank prints it from inside its forward."""
    return (
        f"\t[{replica.device}] In Model: input size {size(replica.input_shape)} "
        f"output size {size(replica.output_shape)}"
    )


def global_line(step: Step) -> str:
    """What the step did over all ranks: there is no gathered output, only the all-reduced gradients."""
    return (
        f"All ranks: input size {size(step.input_shape)} over {plural(len(step.replicas), 'rank')}, "
        "no gather; "
        f"mean loss: {step.loss:.6g}, gradients all-reduced  (epoch {step.epoch}, step {step.step})"
    )


def rank_step_lines(step: Step) -> list[str]:
    """A DDP step: one `In Model:` line per rank, then what the ranks did together."""
    return [rank_line(r) for r in step.replicas] + [global_line(step)]


def group_line(value: dict) -> str:
    """Detail('ddp'): the process group and how each step is cut."""
    return (
        f"Process group: {plural(value['world_size'], 'rank')}, backend {value['backend']}, "
        f"{value['master_addr']}:{value['master_port']} ({value['launcher']}); each rank takes "
        f"{value['per_rank_batch']} of its {plural(value['rows_per_rank'], 'row')} per step, "
        f"{plural(value['steps_per_epoch'], 'step')} per epoch, "
        f"global batch {value['global_batch']}"
    )


def _preview(indices: list[int], most: int = 8) -> str:
    head = ", ".join(map(str, indices[:most]))
    return f"[{head}, ...]" if len(indices) > most else f"[{head}]"


def shard_lines(value: dict, which: str = "first") -> list[str]:
    """Detail('shards'): which dataset rows each rank got in the first (or latest) epoch."""
    epoch = value[which]
    lines = [
        f"Epoch {epoch['epoch']} shards (DistributedSampler, set_epoch({epoch['set_epoch']}), "
        f"shuffle={value['shuffle']}): {plural(value['data_size'], 'row')}, {value['rows_per_rank']} per rank"
        + (f", {value['padding']} repeated to pad: {epoch['repeated']}" if value["padding"] else "")
    ]
    for r in epoch["ranks"]:
        pad = f" (padded with {r['padded']})" if r["padded"] else ""
        lines.append(f"\t[{r['device']}] rows {_preview(r['indices'])}{pad}")
    return lines


def final_lines(value: dict) -> list[str]:
    """Detail('final'): every rank's parameters after the last step, and whether they are identical."""
    lines = [f"\t[{r['device']}] W = {_vector(r['weights'])}  b = {r['bias']:.4f}" for r in value["ranks"]]
    same = (
        "identical on every rank"
        if value["identical"]
        else f"NOT identical (largest difference {value['max_abs_diff']:.3g})"
    )
    return ["Parameters per rank after the last step: " + same] + lines
