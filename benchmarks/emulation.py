"""What the DataParallel emulation costs: steps per second on virtual:1, 2, 4 and 8 against one device.

virtual:K scatters each batch with DataParallel's rule (views, no copies), runs K-1 replicas on a persistent
thread pool and the first inline, and gathers with one torch.cat, as DataParallel does. On one CPU this buys
no speed: the figure to keep small is the cost per replica, (time per step on virtual:K - time on cpu) / K.
Where CUDA GPUs are present, the real nn.DataParallel over all of them is measured too.

    python -m benchmarks.emulation [--quick]
"""

from __future__ import annotations

from concurrent.futures import Future
from unittest import mock

from benchmarks import common

SPECS = ("cpu", "virtual:1", "virtual:2", "virtual:4", "virtual:8")


class InlineExecutor:
    """A stand-in for the replica pool that runs each replica at once in the calling thread.

    Measuring virtual:K with it and without it splits the emulation's cost into the threads' share and the
    share of the K-branch graph itself (K forwards, K backward branches, K gradient additions).
    """

    def __init__(self, *args, **kwargs):
        pass

    def submit(self, fn, *args) -> Future:
        future = Future()
        future.set_result(fn(*args))
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


def without_threads(cfg) -> dict:
    with mock.patch("fitcore.strategies.dataparallel.wrappers.ThreadPoolExecutor", InlineExecutor):
        return common.time_fitcore(cfg)


def specs() -> list[str]:
    gpus = common.gpu_count()
    extra = ["cuda:0"] if gpus else []
    if gpus >= 2:
        extra.append("cuda:" + ",".join(str(i) for i in range(gpus)))  # the real nn.DataParallel
    return list(SPECS) + extra


def measure(batch: int, repeats: int, epochs: int) -> list[dict]:
    configs = {
        spec: common.config(data_size=10 * batch, batch_size=batch, epochs=epochs, devices=spec)
        for spec in specs()
    }
    candidates = {spec: (lambda cfg=cfg: common.time_fitcore(cfg)) for spec, cfg in configs.items()}
    for spec, cfg in configs.items():
        if spec.startswith("virtual:") and spec != "virtual:1":
            candidates[spec + " inline"] = lambda cfg=cfg: without_threads(cfg)
    samples = common.interleave(candidates, repeats)
    rates = {name: common.median([s["steps"] / s["loop_s"] for s in runs]) for name, runs in samples.items()}
    base = rates["cpu"]
    rows = []
    for spec in configs:
        rate = rates[spec]
        k = int(spec.split(":")[1]) if spec.startswith("virtual:") else len(spec.split(","))
        extra_us = (1 / rate - 1 / base) * 1e6
        inline = rates.get(spec + " inline")
        threads_us = (1 / rate - 1 / inline) * 1e6 if inline else 0.0
        rows.append(
            {
                "batch": batch,
                "devices": spec,
                "replicas": k,
                "steps_per_s": rate,
                "relative": rate / base,
                "extra_us_per_step": extra_us,
                "us_per_replica": extra_us / k if spec != "cpu" else 0.0,
                "threads_us_per_replica": threads_us / k,
                "samples_steps_per_s": [s["steps"] / s["loop_s"] for s in samples[spec]],
            }
        )
    return rows


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    repeats = 3 if args.quick else 11
    rows = []
    for batch, epochs in ((200, 60), (10_000, 20)):
        rows += measure(batch, repeats, max(2, epochs // 5) if args.quick else epochs)
    print(
        common.table(
            ["batch", "devices", "steps/s", "vs cpu", "extra us/step", "us per replica", "of which threads"],
            [
                [
                    r["batch"],
                    r["devices"],
                    r["steps_per_s"],
                    f"{r['relative']:.2f}x",
                    f"{r['extra_us_per_step']:.0f}",
                    f"{r['us_per_replica']:.0f}",
                    f"{r['threads_us_per_replica']:.0f}"
                    if r["replicas"] > 1 and r["devices"] != "cpu"
                    else "",
                ]
                for r in rows
            ],
        )
    )
    print(
        f"Medians of {repeats} alternating samples of the loop alone (RunStarted to RunEnded). "
        "us per replica: (time per step - cpu's) / K; of which threads: what the pool adds over running "
        "the replicas inline."
    )
    per_replica = max(r["us_per_replica"] for r in rows if r["devices"].startswith("virtual:"))
    common.emit(
        "emulation", {"repeats": repeats, "rows": rows, "max_us_per_replica": per_replica}, args.quick
    )


if __name__ == "__main__":
    main()
