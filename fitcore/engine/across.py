"""A ranked run (DDP, FSDP, TP) across hosts on one machine (its hosts module), under torchrun: its checks.

`run(...)` starts `torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d -m fitcore ...` on every host,
gloo bound to that host's eth0, rank 0 recording every step; `checks(...)` verifies the recording: the world
size and the hosts, every rank's rows per step as DistributedSampler cuts them, identical parameters on every
rank, and the parameters against one process and against least squares. `python -m benchmarks.multinode`
prints them; `fitcore check` runs one as a row.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from fitcore.core.chunks import chunk_sizes, columns
from fitcore.core.config import FitConfig, check, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.errors import ConfigError
from fitcore.core.events import Detail, Step
from fitcore.core.outfiles import being_written
from fitcore.core.shards import Layout, epoch_shards
from fitcore.engine.hosts import PORT, Hosts, python_env
from fitcore.protocols import registry
from fitcore.protocols.mesh import DP, TP, grid
from fitcore.runs.recording import GROUP, read

CONFIG = FitConfig(epochs=40, optimizer="sgd", lr=0.3, devices="cpu")  # fitcore check's
RUN_TIMEOUT = 300  # seconds for the whole run: about 13 s here with 4 ranks on 2 cores
SAME_TOL, LSTSQ_TOL = 1e-5, 1e-4  # as fitcore check: one process on the same rows; least squares
LOST_MARGIN = 30  # seconds beyond the collective timeout for torchrun to end the other ranks
COLLECTIVE_TIMEOUT_ENV = "FITCORE_COLLECTIVE_TIMEOUT"  # seconds a collective may wait (its rank module)


Check = tuple[str, bool, str]  # a check's name, whether it passed, and its figures


@dataclass
class Outcome:
    """What a run across hosts left: each host's exit status and output, rank 0's recording and JSON."""

    codes: list[int | None]
    outputs: list[str]
    errors: list[str]
    result: dict | None
    recording: object | None
    seconds: float
    lost: str = ""  # the line naming the host that died, where one was killed
    after_kill: float = 0.0  # seconds from that kill until every other host had ended
    lost_host: tuple[str, ...] = ()  # its address and hostname


def fitcore_args(cfg: FitConfig, record: str) -> list[str]:
    return [
        "--strategy", cfg.strategy, "--devices", cfg.devices, "--epochs", str(cfg.epochs),
        "--optimizer", cfg.optimizer, "--lr", str(cfg.lr), "--data-size", str(cfg.data_size),
        "--batch-size", str(cfg.batch_size), "--seed", str(cfg.seed), "--json", "--record", record,
        *(["--mesh", cfg.mesh] if cfg.mesh else []),
    ]  # fmt: skip


def torchrun_argv(python: str, hosts: Hosts, i: int, procs: int, args: list[str]) -> list[str]:
    """torchrun on host i: the README's multi-machine command, node 0's address as the rendezvous."""
    return [
        python, "-m", "torch.distributed.run", "--nnodes", str(hosts.nodes), "--nproc-per-node", str(procs),
        "--node-rank", str(i), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts.address(0)}:{PORT}",
        "--rdzv-conf", "join_timeout=60", "--local-addr", hosts.address(i), "--max-restarts", "0",
        "-m", "fitcore", *args,
    ]  # fmt: skip


def run(
    cfg: FitConfig,
    nodes: int = 2,
    procs: int = 2,
    rate: str = "",
    python: str | None = None,
    timeout: float = RUN_TIMEOUT,
    kill_after_steps: int = 0,
    collective_timeout: float = 0,
) -> Outcome:
    """Run cfg with nodes x procs ranks on namespace hosts; everything made is removed before returning.

    Args:
        python: the interpreter each host runs (an installed fitcore's venv), or None for this one with
            this source tree on PYTHONPATH.
        kill_after_steps: > 0: SIGKILL every process of the last host once rank 0 has recorded that many
            steps (a host that dies), and wait for the others to end.
        collective_timeout: > 0: seconds a rank's collective may wait before it fails (a short one for
            the host that dies).
    """
    python, env = python_env(python)
    env.update(GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if collective_timeout:
        env[COLLECTIVE_TIMEOUT_ENV] = str(collective_timeout)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fitcore-hosts-") as tmp, Hosts(nodes, rate) as hosts:
        record = str(Path(tmp, "run.fitrec"))
        outs = [open(Path(tmp, f"out{i}"), "w+") for i in range(nodes)]
        errs = [open(Path(tmp, f"err{i}"), "w+") for i in range(nodes)]
        started = [
            hosts.popen(i, torchrun_argv(python, hosts, i, procs, fitcore_args(cfg, record)), env,
                        stdout=outs[i], stderr=errs[i], cwd=tmp)
            for i in range(nodes)
        ]  # fmt: skip
        lost, killed = "", 0.0
        deadline = t0 + timeout
        if kill_after_steps:
            lost = _kill_when(hosts, record, kill_after_steps, deadline, started)
            killed = time.monotonic()
        for p in started:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # left running: hosts.remove() kills it, and its None exit status fails the checks
        codes = [p.poll() for p in started]
        after_kill = time.monotonic() - killed if killed else 0.0
        texts = [_read(f) for f in outs]
        errors = [_read(f) for f in errs]
        for f in outs + errs:
            f.close()
        seconds = time.monotonic() - t0
        recording = _recording(record)
    gone = (hosts.address(nodes - 1), hosts.hostname(nodes - 1)) if kill_after_steps else ()
    return Outcome(codes, texts, errors, _json(texts), recording, seconds, lost, after_kill, gone)


def _kill_when(hosts: Hosts, record: str, steps: int, deadline: float, started=()) -> str:
    """Wait (bounded) until rank 0's recording holds `steps` steps, then kill the last host; a host whose
    torchrun has already ended (a run that failed to start) ends the wait at once."""
    while time.monotonic() < deadline and all(p.poll() is None for p in started):
        text = ""
        for path in being_written(record):  # the run's file in progress, renamed to `record` at its end
            try:
                text = Path(path).read_text()
                break
            except OSError:  # renamed meanwhile: the next name is the whole file
                continue
        if text.count('{"event":"step"') >= steps:  # the file is written as events come, in 8 kB blocks
            break
        time.sleep(0.05)
    last = hosts.nodes - 1
    hosts.kill(last)
    return f"host {hosts.hostname(last)} ({hosts.address(last)}) killed"


def _recording(path: str):
    """Rank 0's recording, or None where it is missing or incomplete (rank 0's host died)."""
    try:
        return read(path)
    except (OSError, ConfigError):
        return None


def _read(f) -> str:
    f.flush()
    f.seek(0)
    return f.read()


def _json(texts: list[str]) -> dict | None:
    """Rank 0's --json object, from whichever host rank 0 ran on (c10d assigns the ranks)."""
    for text in texts:
        for line in text.splitlines():
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    pass
    return None


def config(ranks: int, strategy: str) -> FitConfig:
    """fitcore check's config for a ranked `strategy`, its rows a multiple of the ranks: no padding, one
    step per epoch."""
    rows = ranks * math.ceil(CONFIG.data_size / ranks)
    cfg = replace(CONFIG, data_size=rows, batch_size=rows, workers=ranks, strategy=strategy)
    return validate(registry.strategy(strategy).check_config(cfg))


def checks(cfg: FitConfig, outcome: Outcome, nodes: int, procs: int, reference) -> list[Check]:
    """(name, passed, figures) per check of a finished run; reference: one process's parameters."""
    ranks = nodes * procs
    out: list[Check] = []
    ok = all(code == 0 for code in outcome.codes) and outcome.recording is not None and outcome.result
    out.append(("finished", bool(ok), f"exit status {outcome.codes} in {outcome.seconds:.1f} s"))
    if not ok:
        return out
    events = outcome.recording.events
    group = next(e.value for e in events if isinstance(e, Detail) and e.key == GROUP)
    hosts = group.get("hosts", [])
    per_host = {h: hosts.count(h) for h in hosts}
    spread = ", ".join(f"{h} {n}" for h, n in per_host.items())
    placed = group["world_size"] == ranks and len(per_host) == nodes and set(per_host.values()) == {procs}
    out.append(("ranks", placed, f"{group['world_size']} ranks on {len(per_host)} hosts: {spread}"))
    out.append(_rows_check(cfg, [e for e in events if isinstance(e, Step)], ranks))
    final = next(e.value for e in events if isinstance(e, Detail) and e.key == "final")
    spread = f"max |diff| between ranks = {final['max_abs_diff']:.1g}"
    out.append(("identical", bool(final["identical"]), spread))
    learned = tuple(outcome.result["weights"]) + (outcome.result["bias"],)
    diff = max(abs(a - b) for a, b in zip(learned, reference))
    out.append(("one process", diff <= SAME_TOL, f"|W - W_1proc| = {diff:.1g} <= {SAME_TOL:.0e}"))
    w, b = least_squares(*make_data(cfg))
    diff = max(abs(a - b) for a, b in zip(learned, tuple(w) + (b,)))
    out.append(("least squares", diff <= LSTSQ_TOL, f"|W - W_lstsq| = {diff:.1g} <= {LSTSQ_TOL:.0e}"))
    return out


def _rows_check(cfg: FitConfig, steps: list[Step], ranks: int) -> Check:
    """Every step's rows on every rank: as many as DistributedSampler's shard gives, and its first ids; or,
    for ranks that split the columns (TP), every row of the batch on every rank, each its torch.chunk
    columns."""
    if not registry.of(cfg).split.rows:
        return _columns_check(cfg, steps, ranks)
    if len(cfg.mesh_dims) > 1:
        return _blocks_check(cfg, steps, ranks)
    layout = Layout(cfg.data_size, ranks, cfg.batch_size)
    bad = [] if len(steps) == cfg.epochs * layout.steps_per_epoch else [f"{len(steps)} steps"]
    shards: dict[int, list[list[int]]] = {}
    for step in steps:
        if step.epoch not in shards:
            shards[step.epoch] = epoch_shards(cfg.data_size, ranks, cfg.shuffle, cfg.seed, step.epoch)
        shard = shards[step.epoch]
        start = (step.batch - 1) * layout.per_rank_batch
        for r, replica in enumerate(step.replicas):
            want = shard[r][start : start + layout.local_rows(step.batch)]
            if replica.rows != len(want) or list(replica.ids) != want[: len(replica.ids)]:
                bad.append(f"step {step.step} rank {r}")
    sizes = "/".join(str(layout.local_rows(1)) for _ in range(ranks))
    text = f"rows per rank {sizes} = DistributedSampler's shards on all {len(steps)} steps"
    return ("rows", not bad and len(steps) > 0, text if not bad else "differs: " + ", ".join(bad[:4]))


def _blocks_check(cfg: FitConfig, steps: list[Step], ranks: int) -> Check:
    """A 2-D mesh's steps: each rank its dp coordinate's rows (DistributedSampler's shards over dp), the
    same for the ranks of one tp group, and its tp coordinate's columns (torch.chunk's)."""
    sizes, at_rank = dict(cfg.mesh_dims), grid(cfg.mesh_dims)
    dp, tp = sizes[DP], sizes[TP]
    layout, cuts = Layout(cfg.data_size, dp, cfg.batch_size), columns(cfg.n_features, tp)
    bad = [] if len(steps) == cfg.epochs * layout.steps_per_epoch else [f"{len(steps)} steps"]
    for step in steps:
        shards = epoch_shards(cfg.data_size, dp, cfg.shuffle, cfg.seed, step.epoch)
        start = (step.batch - 1) * layout.per_rank_batch
        for r, replica in enumerate(step.replicas):
            at = at_rank[r]
            want = shards[at[DP]][start : start + layout.local_rows(step.batch)]
            rows_ok = replica.rows == len(want) and list(replica.ids) == want[: len(replica.ids)]
            if not rows_ok or replica.columns != cuts[at[TP]]:
                bad.append(f"step {step.step} rank {r}")
    split = "/".join(f"{lo}:{hi}" for lo, hi in cuts)
    text = (f"each rank its block: rows of its {DP} coordinate ({dp} shards of {layout.local_rows(1)}), "
            f"columns of its {TP} coordinate ({split}) on all {len(steps)} steps")  # fmt: skip
    return ("rows", not bad and len(steps) > 0, text if not bad else "differs: " + ", ".join(bad[:4]))


def _columns_check(cfg: FitConfig, steps: list[Step], ranks: int) -> Check:
    """Every rank every row: its columns torch.chunk's where the strategy cuts them (TP), else every one (a
    pipeline, which cuts the layers)."""
    cut = registry.of(cfg).split.columns is not None
    sizes = list(chunk_sizes(cfg.n_features, ranks)) if cut else [None] * ranks
    bad = [] if len(steps) == cfg.total_steps else [f"{len(steps)} steps"]
    for step in steps:
        widths = [r.columns[1] - r.columns[0] if r.columns else None for r in step.replicas]
        whole = all(r.rows == step.input_shape[0] and r.ids == step.replicas[0].ids for r in step.replicas)
        if widths != sizes or not whole:
            bad.append(f"step {step.step}")
    split = "/".join(map(str, sizes))
    text = (f"every rank every row, columns {split} = torch.chunk on all {len(steps)} steps" if cut
            else f"every rank every row and column on all {len(steps)} steps")  # fmt: skip
    return ("rows", not bad and len(steps) > 0, text if not bad else "differs: " + ", ".join(bad[:4]))


def reference(cfg: FitConfig) -> tuple[float, ...]:
    """The parameters one process on one CPU device learns on the same rows (fitcore check's reference), of
    the strategy's own model where it has one (a pipeline's deep one)."""
    own = registry.of(cfg).one_device
    if own is not None:
        return own(cfg)
    one = replace(cfg, strategy=registry.DEFAULT, devices="cpu", workers=FitConfig().workers, mesh="")
    checked = check(one)
    ended = registry.of(one).train(checked.config, lambda event: None, plan=checked.plan)
    return tuple(ended.weights) + (ended.bias,)


def lost_checks(outcome: Outcome, collective_timeout: float) -> list[Check]:
    """A host killed mid-run: every other host ended, failed, within the collective timeout (and torchrun's
    own margin), with a line naming the lost peer's address or rank."""
    survivors = outcome.codes[:-1]
    bound = collective_timeout + LOST_MARGIN
    ended = all(code is not None and code != 0 for code in survivors)
    named = _lost_line(outcome)
    return [
        ("killed", bool(outcome.lost), outcome.lost or "no host was killed"),
        ("ended", ended and outcome.after_kill <= bound,
         f"the other hosts ended with {survivors}, {outcome.after_kill:.1f} s after it (<= {bound:.0f} s)"),
        ("named", bool(named), named or "no line names the lost host"),
    ]  # fmt: skip


def _lost_line(outcome: Outcome) -> str:
    """One line naming the lost host and its ranks (from rank 0's recording) and how rank 0 ended."""
    if not outcome.lost_host or outcome.recording is None or outcome.result is None:
        return ""
    group = next(e.value for e in outcome.recording.events if isinstance(e, Detail) and e.key == GROUP)
    address, name = outcome.lost_host
    ranks = [r for r, host in enumerate(group.get("hosts", [])) if host == name]
    first = (outcome.result.get("message") or "").splitlines()[:1]
    if not ranks or outcome.result.get("status") != "failed":
        return ""
    # the innermost error of the chain gloo's callbacks wrap it in, without gloo's source position
    why = re.sub(r"^\[[^]]*\] ", "", first[0].rsplit("Error: ", 1)[-1]) if first else ""
    return f"lost host {name} ({address}), ranks {', '.join(map(str, ranks))}: rank 0 failed: {why[:120]}"
