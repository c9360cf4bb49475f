"""All-reduce, all-gather and reduce-scatter timed from 4 B to 16 MiB, and the alpha-beta link fitted to them.

    python -m benchmarks.collectives [--where hosts loopback nccl] [--rates "" 100mbit] [--repeats 3]
                                     [--quick]

- `hosts`: two network-namespace hosts (strategies.ddp.hosts, gloo on their veth), at each `--rates` (tbf);
- `loopback`: two processes on one host, gloo over 127.0.0.1;
- `nccl`: two GPUs under nccl, where there are two or more.

Each point is printed with its algorithm and bus bandwidth as nccl-tests define them (algbw = S / t, where S
is the whole buffer: all-reduce's input, all-gather's output, reduce-scatter's input; busbw = algbw x
2(n-1)/n for all-reduce and (n-1)/n for the other two). Then, per setting, alpha (latency per ring step) and
beta (bandwidth) are fitted to every point, t = steps x alpha + bus bytes / beta (a ring: 2(n-1) steps for
all-reduce, n-1 for the others; bus bytes = busbw x t), by least squares on the relative error, and each
point's measured time is printed beside the model's, with the error. Each setting's sweep runs `--repeats`
times and is fitted each time: one sweep's alpha on a shared machine is noise as much as latency, so the link
keeps the median fit and the spread of the repeats. The two-host fits are merged into
fitcore/core/measured_links.json (a rate not run this time keeps its link), which `fitcore whatif --link` and
the page's What if offer beside the presets. `--quick`: every other size up to 1 MiB, 2 repeats (about a
minute on two namespace hosts without tbf).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

SIZES = [4 * 4**k for k in range(12)]  # 4 B .. 16 MiB, in float32
OPS = ("all_reduce", "all_gather", "reduce_scatter")
ROOT = Path(__file__).resolve().parents[1]
LINKS_FILE = ROOT / "fitcore" / "core" / "measured_links.json"
PORT = 29511
WORKER_TIMEOUT = 300  # seconds for one setting's whole sweep


QUICK_SIZES = [size for size in SIZES[::2] if size <= 1024 * 1024]  # 4 B, 64 B, ... 1 MiB


def iterations(size: int) -> int:
    """Timed repetitions of one size: more for the small ones, whose times are noisy."""
    return 20 if size <= 64 * 1024 else 5 if size <= 1024 * 1024 else 2


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw."""
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def ring_steps(op: str, n: int) -> int:
    return 2 * (n - 1) if op == "all_reduce" else n - 1


# ---------------------------------------------------------------------------------------------------------
# One rank of a sweep.


def _one(op: str, size: int, n: int, device: str):
    """A callable that runs one collective of a size-S buffer (S as nccl-tests count it)."""
    import torch.distributed as dist

    count = size // 4
    if op == "all_reduce":
        t = torch.ones(count, device=device)
        return lambda: dist.all_reduce(t)
    if op == "all_gather":
        out, part = torch.empty(count, device=device), torch.ones(count // n, device=device)
        return lambda: dist.all_gather_into_tensor(out, part)
    inp, part = torch.ones(count, device=device), torch.empty(count // n, device=device)
    return lambda: dist.reduce_scatter_tensor(part, inp)


def worker(backend: str, sizes: list[int] = SIZES) -> None:
    """Be one rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0 prints a JSON line per point."""
    import datetime

    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=n, timeout=datetime.timedelta(seconds=60))
    for op in OPS:
        for size in sizes:
            if op != "all_reduce" and (size // 4) % n:
                continue  # a buffer that does not split into n equal parts
            run = _one(op, size, n, device)
            run()  # warm-up: connections, buffers
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iterations(size)):
                run()
            if backend == "nccl":
                torch.cuda.synchronize()
            seconds = (time.perf_counter() - t0) / iterations(size)
            if rank == 0:
                print(json.dumps({"op": op, "bytes": size, "seconds": seconds}), flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # as fitcore's ranks end after gloo (fitcore.engine.torchrun.exit_rank)


# ---------------------------------------------------------------------------------------------------------
# The settings.


def _worker_argv(backend: str, quick: bool = False) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchmarks.collectives",
        "--worker",
        backend,
        *(["--quick"] if quick else []),
    ]


def _points(outputs: list[str]) -> list[dict]:
    return [json.loads(line) for text in outputs for line in text.splitlines() if line.startswith("{")]


def on_hosts(rate: str, quick: bool = False) -> list[dict]:
    """The sweep between two namespace hosts, at tbf `rate` ('' for none)."""
    from fitcore.engine.hosts import Hosts, python_env

    _, env = python_env(None)
    with Hosts(2, rate) as hosts:
        procs = []
        for i in range(2):
            env_i = dict(env, RANK=str(i), WORLD_SIZE="2", MASTER_ADDR=hosts.address(0),
                         MASTER_PORT=str(PORT), GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1")  # fmt: skip
            procs.append(
                hosts.popen(
                    i, _worker_argv("gloo", quick), env_i, stdout=subprocess.PIPE, text=True, cwd=ROOT
                )
            )
        outputs = [p.communicate(timeout=WORKER_TIMEOUT)[0] for p in procs]
    return _points(outputs)


def on_one_host(backend: str, quick: bool = False) -> list[dict]:
    """The sweep between two processes of this host: gloo over 127.0.0.1, or nccl on two GPUs."""
    procs = []
    for i in range(2):
        env = dict(os.environ, RANK=str(i), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(PORT + 1), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")  # fmt: skip
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        procs.append(
            subprocess.Popen(
                _worker_argv(backend, quick), env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT
            )
        )
    try:
        return _points([p.communicate(timeout=WORKER_TIMEOUT)[0] for p in procs])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


# ---------------------------------------------------------------------------------------------------------
# The fit.


def with_bandwidths(points: list[dict], n: int = 2) -> list[dict]:
    """Each point with algbw and busbw (bytes/s) as nccl-tests define them."""
    out = []
    for p in points:
        algbw = p["bytes"] / p["seconds"]
        out.append({**p, "algbw": algbw, "busbw": algbw * bus_factor(p["op"], n)})
    return out


def fit_alpha_beta(points: list[dict], n: int = 2) -> tuple[float, float]:
    """(alpha seconds per ring step, beta bytes/s) minimising the relative error of steps·α + bus bytes/β.

    Each point is one row of a least-squares problem in (α, 1/β), divided by its measured time, so that a
    4 B point counts as much as a 16 MiB one; a negative α (noise) is clamped to 0 and 1/β refitted.
    """
    a = torch.tensor(
        [[ring_steps(p["op"], n), p["bytes"] * bus_factor(p["op"], n)] for p in points], dtype=torch.float64
    )
    t = torch.tensor([p["seconds"] for p in points], dtype=torch.float64)
    scaled = a / t[:, None]
    alpha, inv_beta = torch.linalg.lstsq(scaled, torch.ones_like(t)[:, None]).solution[:, 0].tolist()
    if alpha < 0:
        alpha = 0.0
        col = scaled[:, 1]
        inv_beta = float((col @ torch.ones_like(t)) / (col @ col))
    return alpha, 1 / inv_beta


def predicted(p: dict, alpha: float, beta: float, n: int = 2) -> float:
    return ring_steps(p["op"], n) * alpha + p["bytes"] * bus_factor(p["op"], n) / beta


def report(name: str, points: list[dict]) -> dict:
    """Print a setting's points, its fit and each point's error; return them as a dict."""
    points = with_bandwidths(points)
    alpha, beta = fit_alpha_beta(points)
    print(f"\n{name}: alpha = {alpha * 1e6:.1f} us per ring step, beta = {beta / 1e6:.1f} MB/s "
          f"({beta * 8 / 1e6:.1f} Mbit/s)")  # fmt: skip
    print(f"{'op':<15}{'bytes':>10}{'time':>12}{'algbw MB/s':>12}{'busbw MB/s':>12}{'model':>12}{'error':>9}")
    errors = []
    for p in points:
        model = predicted(p, alpha, beta)
        err = (model - p["seconds"]) / p["seconds"]
        errors.append(abs(err))
        p["model"], p["error"] = model, err
        print(f"{p['op']:<15}{p['bytes']:>10}{p['seconds'] * 1e6:>10.0f}us{p['algbw'] / 1e6:>12.2f}"
              f"{p['busbw'] / 1e6:>12.2f}{model * 1e6:>10.0f}us{err * 100:>8.0f}%")  # fmt: skip
    reached = max(p["busbw"] for p in points if p["op"] == "all_reduce")
    print(f"largest all-reduce bus bandwidth: {reached / 1e6:.1f} MB/s = {reached * 8 / 1e6:.1f} Mbit/s; "
          f"mean |error| {sum(errors) / len(errors) * 100:.0f}%, max {max(errors) * 100:.0f}%")  # fmt: skip
    mean = sum(errors) / len(errors)
    return {"alpha": alpha, "beta": beta, "reached_busbw": reached, "mean_abs_error": mean,
            "max_abs_error": max(errors), "points": points}  # fmt: skip


def repeated(name: str, sweep, repeats: int) -> dict:
    """A setting swept and fitted `repeats` times (report() each time): the fit of the median alpha, with
    the spread of the repeats' alpha and beta, low to high."""
    fits = [report(f"{name}, repeat {r + 1} of {repeats}", sweep()) for r in range(repeats)]
    alphas = sorted(f["alpha"] for f in fits)
    betas = sorted(f["beta"] for f in fits)
    middle = sorted(fits, key=lambda f: f["alpha"])[(len(fits) - 1) // 2]  # one real fit: its beta with it
    print(f"{name}: alpha {alphas[0] * 1e6:.0f}..{alphas[-1] * 1e6:.0f} us, beta {betas[0] / 1e6:.1f}.."
          f"{betas[-1] / 1e6:.1f} MB/s over {repeats} repeats; "
          f"median alpha {middle['alpha'] * 1e6:.0f} us")  # fmt: skip
    return {**middle, "alpha_range": [alphas[0], alphas[-1]], "beta_range": [betas[0], betas[-1]],
            "repeats": repeats}  # fmt: skip


def link_entries(fits: dict[str, dict], sizes: list[int]) -> dict[str, dict]:
    """The two-host fits as links for fitcore.lab.whatif: name, bandwidth, latency, their spread, source."""
    links = {}
    for rate, fit in fits.items():
        key = "measured-tbf" + rate.removesuffix("mbit") if rate else "measured-veth"
        label = f"tbf {rate.removesuffix('mbit')} Mbit/s" if rate else "veth, unlimited"
        links[key] = {
            "name": f"measured: 2 hosts, {label}",
            "bandwidth": fit["beta"],
            "latency": fit["alpha"],
            "bandwidth_range": fit.get("beta_range", [fit["beta"]] * 2),
            "latency_range": fit.get("alpha_range", [fit["alpha"]] * 2),
            "repeats": fit.get("repeats", 1),
            "source": "benchmarks.collectives: gloo between 2 namespace hosts, "
            f"{_size(sizes[0])}..{_size(sizes[-1])}, alpha-beta fit, the median of "
            f"{fit.get('repeats', 1)} repeats, mean |error| "
            f"{fit['mean_abs_error'] * 100:.0f}%, max {fit['max_abs_error'] * 100:.0f}%",
        }
    return links


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 2**10} KiB" if n >= 2**10 else f"{n} B"


def write_links(links: dict[str, dict], path: Path = LINKS_FILE) -> dict[str, dict]:
    """Merge `links` into the file: the links of the rates run now replace theirs, the others stay."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    merged = {**(kept if isinstance(kept, dict) else {}), **links}
    path.write_text(json.dumps(merged, indent=1) + "\n")
    kept_now = ", ".join(k for k in merged if k not in links) or "none"
    print(f"\nwrote {path.name}: {', '.join(links)} (kept: {kept_now})")
    return merged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.collectives", description=__doc__.split("\n")[0])
    p.add_argument("--worker", choices=("gloo", "nccl"), help=argparse.SUPPRESS)
    p.add_argument(
        "--where", nargs="+", default=["hosts", "loopback", "nccl"], choices=("hosts", "loopback", "nccl")
    )
    p.add_argument(
        "--rates", nargs="+", default=["", "100mbit"], help="tbf rates between the hosts; '' for none"
    )
    p.add_argument("--repeats", type=int, default=3, help="sweeps of each setting, each fitted (default 3)")
    p.add_argument("--quick", action="store_true", help="every other size up to 1 MiB, 2 repeats")
    args = p.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.worker:
        worker(args.worker, sizes)
        return 0
    repeats = 2 if args.quick else args.repeats
    if repeats < 1:
        p.error(f"--repeats: {repeats}: at least 1")
    fits: dict[str, dict] = {}
    summary = {}
    if "hosts" in args.where:
        from fitcore.engine.hosts import available

        reason = available()
        if reason:
            print(f"hosts: skipped: {reason}")
        for rate in [] if reason else args.rates:
            name = f"2 hosts, {'tbf ' + rate if rate else 'veth unlimited'}"
            fits[rate] = repeated(name, functools.partial(on_hosts, rate, args.quick), repeats)
    if "loopback" in args.where:
        sweep = functools.partial(on_one_host, "gloo", args.quick)
        summary["loopback"] = repeated("1 host, gloo over loopback", sweep, repeats)
    if "nccl" in args.where:
        if torch.cuda.device_count() >= 2:
            sweep = functools.partial(on_one_host, "nccl", args.quick)
            summary["nccl"] = repeated("1 host, nccl on 2 GPUs", sweep, repeats)
        else:
            print("\nnccl: skipped: needs 2 GPUs")
    if fits:
        write_links(link_entries(fits, sizes))
    summary.update({f"hosts {r or 'unlimited'}": f for r, f in fits.items()})
    keys = ("alpha", "beta", "alpha_range", "beta_range", "reached_busbw", "mean_abs_error", "max_abs_error")
    print(json.dumps({name: {k: fit[k] for k in keys} for name, fit in summary.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
