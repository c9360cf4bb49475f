"""fitcore's training loop against the tutorial's Dataset + DataLoader loop, on the same data and model.

Both fit y = X·W + b with nn.Linear, MSE, backward and Adam. The tutorial's RandomDataset returns one row per
__getitem__ and DataLoader(shuffle=True) collates a batch from them; fitcore takes a batch by index from one
tensor. Times are whole calls (data, and for fitcore also its least-squares reference, included) and loops
alone. Targets: at least 20x faster on one epoch of 1,000,000 rows (batch 1000), at least 3x on the
tutorial's 200 rows (batch 200, 200 epochs).

    python -m benchmarks.data_path [--quick]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from benchmarks import common
from benchmarks.overhead import bare_loop
from fitcore.core.data import make_data
from fitcore.core.parallel import LinearModel, init_parameters

TARGETS = {"1M rows, 1 epoch": 20.0, "200 rows, 200 epochs": 3.0}


class RandomDataset(Dataset):
    """The tutorial's Dataset: the whole data set in memory, one row (x, y) per __getitem__."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor):
        self.X, self.y = X, y  # (N, d), (N, 1)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.X[index], self.y[index]

    def __len__(self) -> int:
        return len(self.X)


def tutorial(cfg, device: str) -> dict:
    """The tutorial's loop: DataLoader batches moved to the device, forward, MSE, backward, Adam."""
    t0 = common.clock()
    X, y = make_data(cfg)  # the same data as fitcore's, drawn on the CPU where the Dataset keeps it
    loader = DataLoader(RandomDataset(X, y), batch_size=cfg.batch_size, shuffle=True)
    model = _tutorial_model(cfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    t1 = common.clock()
    steps = 0
    for _ in range(cfg.epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)  # tensor.to returns a copy
            loss = F.mse_loss(model(xb), yb)
            loss.item()  # what the tutorial prints; fitcore reads it every step too
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
    common.sync(device)
    t2 = common.clock()
    return {"total_s": t2 - t0, "setup_s": t1 - t0, "loop_s": t2 - t1, "steps": steps}


def bare(cfg) -> dict:
    """The ceiling: the same data, a bare loop over fitcore's batches (no events), whole call and loop."""
    t0 = common.clock()
    X, y = make_data(cfg)
    t1 = common.clock()
    result = bare_loop(cfg, X, y)
    t2 = common.clock()
    steps = cfg.total_steps
    return {"total_s": t2 - t0, "setup_s": t1 - t0, "loop_s": steps / result["steps_per_s"], "steps": steps}


def _tutorial_model(cfg) -> nn.Linear:
    """A plain nn.Linear(d, 1), starting from the very values fitcore starts from."""
    raw = LinearModel(cfg.n_features)
    init_parameters(raw, cfg.seed + 1)
    return raw.fc


def measure(name: str, cfg, device: str, repeats: int) -> dict:
    samples = common.interleave(
        {
            "fitcore": lambda: common.time_fitcore(cfg),
            "tutorial": lambda: tutorial(cfg, device),
            "bare": lambda: bare(cfg),
        },
        repeats,
    )
    row = {
        "case": name,
        "device": device,
        "rows": cfg.data_size,
        "batch": cfg.batch_size,
        "epochs": cfg.epochs,
    }
    for who, runs in samples.items():
        for key in ("total_s", "loop_s"):
            row[f"{who}_{key}"] = common.median([r[key] for r in runs])
        row[f"{who}_steps_per_s"] = runs[0]["steps"] / row[f"{who}_loop_s"]
    row["speedup_total"] = row["tutorial_total_s"] / row["fitcore_total_s"]
    row["speedup_loop"] = row["tutorial_loop_s"] / row["fitcore_loop_s"]
    # what even a bare PyTorch loop reaches: the most any instrumented loop could
    row["bare_speedup_total"] = row["tutorial_total_s"] / row["bare_total_s"]
    row["samples_total_s"] = {who: [r["total_s"] for r in runs] for who, runs in samples.items()}
    return row


def main() -> None:
    args = common.parse_args(common.parser(__doc__.splitlines()[0]))
    big = 100_000 if args.quick else 1_000_000
    cases = [
        ("1M rows, 1 epoch", dict(data_size=big, batch_size=1000, epochs=1), 2 if args.quick else 5),
        ("200 rows, 200 epochs", dict(data_size=200, batch_size=200, epochs=200), 3 if args.quick else 31),
    ]
    rows = []
    for device in common.single_devices():
        for name, fields, repeats in cases:
            cfg = common.config(devices=device, **fields)
            row = measure(name, cfg, device, repeats)
            row["target"] = common.target(row["speedup_total"], at_least=TARGETS[name])
            rows.append(row)
    print(
        common.table(
            [
                "case",
                "device",
                "rows",
                "fitcore s",
                "tutorial s",
                "speed-up",
                "loop speed-up",
                "bare loop's speed-up",
                "target",
                "met",
            ],
            [
                [
                    r["case"],
                    r["device"],
                    r["rows"],
                    r["fitcore_total_s"],
                    r["tutorial_total_s"],
                    f"{r['speedup_total']:.1f}x",
                    f"{r['speedup_loop']:.1f}x",
                    f"{r['bare_speedup_total']:.1f}x",
                    r["target"]["target"],
                    r["target"]["met"],
                ]
                for r in rows
            ],
        )
    )
    print(
        "Times are medians of whole calls; the speed-up is the tutorial's time over fitcore's; the bare "
        "loop's speed-up is the tutorial's time over a bare PyTorch loop's on fitcore's batches (no events)."
    )
    common.emit("data_path", {"rows": rows}, args.quick)


if __name__ == "__main__":
    main()
