"""Every line the user reads in a console, made from events: the command line prints them, so does the page.

The lines every run prints (its data, its summary) and those of ranks, whatever their strategy: what each
rank did, the process group, the shards and every rank's final parameters (the engine's Detail values).
DataParallel's own, the tutorial's `In Model:` / `Outside:` lines, are its package's (its console.py).
"""

from __future__ import annotations

from fitcore.core.devices import label_parts
from fitcore.core.events import Replica, RunEnded, Step
from fitcore.core.i18n import count, t

LAUNCHERS = {  # a ddp group's launcher, as its Detail value records it, to its words
    "spawned with torch.multiprocessing": "cli.console.launcher.spawned",
    "launched by torchrun": "cli.console.launcher.torchrun",
}


def size(shape: tuple[int, ...]) -> str:
    """A shape as the tutorial prints it: torch.Size([100, 2])."""
    return f"torch.Size({list(shape)})"


def device_label(label: str) -> str:
    """A device's label in the current language: "virtual:0 (emulated on CPU)", "virtual:0（在 CPU 上模拟）".

    The label itself stays English in events and recordings (it names the device); only the words change.
    """
    name, host = label_parts(label)
    return t("cli.console.emulated", name=name, host=host) if host else label


def _vector(values) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def _params(key: str, weights, bias: float) -> str:
    return t(key, w=_vector(weights), b=f"{bias:.4f}")


def rate(per_second: float) -> str:
    """ "1 step/s", "20 steps/s", "20 步/秒": a speed rounded to a whole number."""
    n = f"{per_second:.0f}"
    return t(f"cli.console.rate.{'one' if n == '1' else 'other'}", n=n)


def summary_lines(
    ended: RunEnded,
    true_weights: tuple[float, ...] | None,
    true_bias: float | None,
    lstsq_weights: tuple[float, ...] | None,
    lstsq_bias: float | None,
    steps_per_second: float,
) -> list[str]:
    """Learned, true (None: a CSV file has none) and least-squares parameters, and how the run ended."""
    lines = [_params("cli.console.learned", ended.weights, ended.bias)]
    if true_weights is not None:
        lines.append(_params("cli.console.true", true_weights, true_bias))
    if lstsq_weights is not None:
        lines.append(_params("cli.console.lstsq", lstsq_weights, lstsq_bias))
    loss = f"{ended.final_loss:.6g}" if ended.final_loss is not None else t("cli.console.no_loss")
    status = t(f"cli.status.{ended.status}")
    lines.append(
        t("cli.console.status", status=status, message=ended.message, loss=loss, rate=rate(steps_per_second))
    )
    return lines


def data_lines(source: dict, weights: tuple[float, ...], bias: float) -> list[str]:
    """A CSV run's file and, when its features were standardised, the parameters in the file's units."""
    from fitcore.core.csvdata import data_result

    names = ", ".join(source["features"])
    key = "cli.console.data.standardized" if source.get("standardized") else "cli.console.data.as_is"
    lines = [t(key, file=source["file"], target=source["target"], names=names, rows=source["rows"])]
    if source.get("standardized") and weights:
        r = data_result(source, weights, bias)
        lines.append(_params("cli.console.file_units", r["weights_original"], r["bias_original"]))
    return lines


# ---------------------------------------------------------------------------------------------------------
# DistributedDataParallel: a line per rank and step, and the values of its Details.


def rank_line(replica: Replica) -> str:
    """The tutorial's `In Model:` line, as one rank prints it from inside its forward."""
    return t(
        "cli.console.rank_in_model",
        device=replica.device,
        input=size(replica.input_shape),
        output=size(replica.output_shape),
    )


def global_line(step: Step, key: str = "cli.console.all_ranks") -> str:
    """What the step did over all ranks: there is no gathered output, only the all-reduced gradients (`key`:
    another strategy's words for what its collective did)."""
    return t(
        key,
        input=size(step.input_shape),
        ranks=count("cli.count.rank", len(step.replicas)),
        loss=f"{step.loss:.6g}",
        epoch=step.epoch,
        step=step.step,
    )


def rank_step_lines(step: Step, key: str = "cli.console.all_ranks") -> list[str]:
    """A DDP step: one `In Model:` line per rank, then what the ranks did together."""
    return [rank_line(r) for r in step.replicas] + [global_line(step, key)]


def group_line(value: dict) -> str:
    """Detail('ddp'): the process group and how each step is cut."""
    launcher = value["launcher"]
    return t(
        "cli.console.group",
        ranks=count("cli.count.rank", value["world_size"]),
        backend=value["backend"],
        address=f"{value['master_addr']}:{value['master_port']}",
        launcher=t(LAUNCHERS[launcher]) if launcher in LAUNCHERS else launcher,
        per_rank=value["per_rank_batch"],
        rows=count("count.row", value["rows_per_rank"]),
        steps=count("count.step", value["steps_per_epoch"]),
        global_batch=value["global_batch"],
    )


def _preview(indices: list[int], most: int = 8) -> str:
    head = ", ".join(map(str, indices[:most]))
    return f"[{head}, ...]" if len(indices) > most else f"[{head}]"


def shard_lines(value: dict, which: str = "first") -> list[str]:
    """Detail('shards'): which dataset rows each rank got in the first (or latest) epoch."""
    epoch = value[which]
    fields = dict(
        epoch=epoch["epoch"], set_epoch=epoch["set_epoch"], shuffle=value["shuffle"],
        rows=count("count.row", value["data_size"]), per_rank=value["rows_per_rank"],
    )  # fmt: skip
    if value["padding"]:
        head = t("cli.console.shards.padded", padding=value["padding"], repeated=epoch["repeated"], **fields)
    else:
        head = t("cli.console.shards", **fields)
    lines = [head]
    for r in epoch["ranks"]:
        key = "cli.console.shard.padded" if r["padded"] else "cli.console.shard"
        lines.append(t(key, device=r["device"], rows=_preview(r["indices"]), padded=r["padded"]))
    return lines


def final_lines(value: dict) -> list[str]:
    """Detail('final'): every rank's parameters after the last step, and whether they are identical."""
    lines = [f"\t[{r['device']}] W = {_vector(r['weights'])}  b = {r['bias']:.4f}" for r in value["ranks"]]
    if value["identical"]:
        head = t("cli.console.final.identical")
    else:
        head = t("cli.console.final.different", diff=f"{value['max_abs_diff']:.3g}")
    return [head] + lines
