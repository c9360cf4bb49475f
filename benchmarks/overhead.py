"""What fitcore's instrumentation costs: its loop, recording every split and emitting every event, against a
bare PyTorch loop on the same tensors.

The bare loop is nn.Linear, MSE, backward and the optimizer fitcore builds, over the very batches fitcore
takes (one permutation per epoch from a generator seeded as fitcore seeds it), so both end on the same
parameters, which the benchmark checks. Samples alternate between the candidates; figures are medians. Target:
fitcore at least 0.90x the bare loop's steps per second, at batch 200 and at batch 10,000.

The bare loop also runs a second time in every round, as a candidate of its own: its ratio to the first
("A/A") is what the same code scores against itself on this machine, the noise floor of every other ratio.

    python -m benchmarks.overhead [--quick]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks import common
from fitcore.core.data import epoch_batches, make_data
from fitcore.core.events import RunEnded, RunStarted
from fitcore.core.parallel import LinearModel, init_parameters
from fitcore.core.train import clear_grads, make_optimizer
from fitcore.runs.runner import Run
from fitcore.strategies.dataparallel.train import train

TARGET = 0.90


def bare_loop(cfg, X: torch.Tensor, y: torch.Tensor, marks: list[float] | None = None) -> dict:
    """The loop with nothing around it: no recorder, no events, no control; steps per second, parameters.

    marks, if given, gets a clock reading after every step (benchmarks.step_times times single steps).
    """
    raw = LinearModel(cfg.n_features)
    init_parameters(raw, cfg.seed + 1)  # fitcore's initial values
    model = raw.fc.to(X.device)  # a plain nn.Linear(d, 1)
    params = list(model.parameters())
    optimizer = make_optimizer(cfg, params)  # the same optimizer, built the same way
    generator = torch.Generator().manual_seed(cfg.seed + 2)  # fitcore's permutation seed
    steps = 0
    t0 = common.clock()
    for _ in range(cfg.epochs):
        for xb, yb in epoch_batches(X, y, cfg.batch_size, cfg.shuffle, generator):  # fitcore's batches
            loss = F.mse_loss(model(xb), yb)
            loss.item()  # fitcore reads every loss (and stops on a non-finite one)
            clear_grads(params)
            loss.backward()
            optimizer.step()
            steps += 1
            if marks is not None:
                marks.append(common.clock())
    common.sync(str(X.device))
    rate = steps / (common.clock() - t0)
    return {"steps_per_s": rate, "params": model.weight.detach().view(-1).tolist() + [model.bias.item()]}


def fitcore_loop(cfg) -> dict:
    """fitcore's DataParallel train with a consumer that keeps the latest event, as a UI's would."""
    latest = [None]

    def keep(event):  # the latest event only: each Step is freed when the next one comes, as on a page
        latest[0] = event

    timing = common.time_fitcore(cfg, keep)
    ended = latest[0]
    return {"steps_per_s": timing["steps"] / timing["loop_s"], "params": list(ended.weights) + [ended.bias]}


def runner_loop(cfg) -> dict:
    """The same run inside runner.Run: a background thread, the lock, bounded history (the dashboard's)."""
    marks = {}

    def timed_train(cfg, on_event, control, plan=None):
        def tap(event):
            if isinstance(event, (RunStarted, RunEnded)):
                marks[type(event)] = common.clock()
            on_event(event)

        return train(cfg, tap, control, plan=plan)

    run = Run(cfg, trainer=timed_train).start()
    run.wait()
    snap = run.snapshot()
    rate = snap.step / (marks[RunEnded] - marks[RunStarted])
    return {"steps_per_s": rate, "params": list(snap.weights) + [snap.bias]}


def measure(batch: int, device: str, repeats: int, epochs: int) -> dict:
    cfg = common.config(data_size=10 * batch, batch_size=batch, epochs=epochs, devices=device)
    X, y = make_data(cfg, torch.device(device))
    samples = common.interleave(
        {
            "fitcore": lambda: fitcore_loop(cfg),
            "bare": lambda: bare_loop(cfg, X, y),
            "runner": lambda: runner_loop(cfg),
            "bare_again": lambda: bare_loop(cfg, X, y),
        },
        repeats,
    )
    rates = {who: [s["steps_per_s"] for s in runs] for who, runs in samples.items()}
    fit, bare, run, again = (common.median(rates[k]) for k in ("fitcore", "bare", "runner", "bare_again"))
    paired = [f / b for f, b in zip(rates["fitcore"], rates["bare"])]
    noise = [a / b for a, b in zip(rates["bare_again"], rates["bare"])]
    return {
        "device": device,
        "batch": batch,
        "rows": cfg.data_size,
        "steps": cfg.total_steps,
        "fitcore_steps_per_s": fit,
        "bare_steps_per_s": bare,
        "runner_steps_per_s": run,
        "ratio": fit / bare,
        "paired_ratio_median": common.median(paired),
        "runner_ratio": run / bare,
        "aa_ratio": again / bare,  # the bare loop against itself: 1.0 on a quiet machine
        "aa_paired_ratio_median": common.median(noise),
        "same_parameters": samples["fitcore"][0]["params"] == samples["bare"][0]["params"],
        "overhead_us_per_step": (1 / fit - 1 / bare) * 1e6,
        "target": common.target(fit / bare, at_least=TARGET),
        "samples_steps_per_s": rates,
    }


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    repeats = 5 if args.quick else 31
    rows = []
    for device in common.single_devices():
        for batch, epochs in ((200, 100), (10_000, 30)):
            rows.append(measure(batch, device, repeats, epochs // 4 if args.quick else epochs))
    print(
        common.table(
            ["device", "batch", "bare steps/s", "fitcore steps/s", "ratio", "paired", "us/step", "Run ratio"]
            + ["A/A", "same params", "target", "met"],
            [
                [
                    r["device"],
                    r["batch"],
                    r["bare_steps_per_s"],
                    r["fitcore_steps_per_s"],
                    f"{r['ratio']:.3f}",
                    f"{r['paired_ratio_median']:.3f}",
                    f"{r['overhead_us_per_step']:.1f}",
                    f"{r['runner_ratio']:.3f}",
                    f"{r['aa_ratio']:.3f}",
                    r["same_parameters"],
                    r["target"]["target"],
                    r["target"]["met"],
                ]
                for r in rows
            ],
        )
    )
    print(
        f"Medians of {repeats} alternating samples. ratio: fitcore over bare; paired: the median of the "
        "per-round ratios; us/step: what the instrumentation adds; Run ratio: runner.Run (thread, lock, "
        "history) over bare, for information; A/A: the bare loop over itself, the noise floor."
    )
    common.emit("overhead", {"repeats": repeats, "rows": rows}, args.quick)


if __name__ == "__main__":
    main()
