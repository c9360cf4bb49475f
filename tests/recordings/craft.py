"""The crafted recordings of tests/recordings/: each a shipped (or good-*) recording with one thing changed,
as a hostile or careless hand would change it. `python -m tests.recordings.craft` writes them again;
tests/test_hostile_recordings.py checks that the files here are what this script makes, and that every
`bad-*` is refused in one line and every `ok-*` replays to strict JSON.

The first ones are the findings of a hostile afternoon (a detail's `hosts` as a number, `input_shape` as [],
`memory` as text, NaN in times, 30,000 GPU names); the rest cover one rule of the schema each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
NAN = float("nan")


def _lines(source: str) -> list[str]:
    path = HERE / source if (HERE / source).exists() else EXAMPLES / source
    return path.read_text(encoding="utf-8").splitlines()


def _where(lines: list[str], event: str, key: str | None = None, nth: int = 0) -> int:
    """The index of the nth line of `event` (a detail of `key`)."""
    found = [
        i for i, line in enumerate(lines)
        if (d := json.loads(line)).get("event") == event and (key is None or d.get("key") == key)
    ]  # fmt: skip
    return found[nth]


def _change(source: str, event: str, change: Callable[[dict], Any], key: str | None = None, nth: int = 0):
    def make() -> list[str]:
        lines = _lines(source)
        i = 0 if event == "header" else _where(lines, event, key, nth)
        data = json.loads(lines[i])
        change(data)
        lines[i] = json.dumps(data, separators=(",", ":"))  # NaN and Infinity written as Python writes them
        return lines

    return make


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """Set the field at a dotted path ("value.hosts", "phases.times.0") to `value`."""

    def change(data: dict) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


DP, DDP, FSDP, TP = "good-dataparallel.fitrec", "good-ddp.fitrec", "good-fsdp.fitrec", "good-tp.fitrec"
H200 = "h200-cuda0.fitrec"  # shipped: a recording made on a GPU names it in its header
GPUS = [f"G{i % 100}" for i in range(30_000)]  # 30,000 names, 100 of them distinct

CRAFTED: dict[str, Callable[[], list[str]]] = {
    # the findings
    "bad-hosts-as-a-number": _change(DDP, "detail", _set("value.hosts", 3), key="group"),
    "bad-input-shape-empty": _change(DP, "step", _set("input_shape", [])),
    "bad-memory-as-text": _change(FSDP, "detail", _set("value", "12 B"), key="memory"),
    "bad-nan-in-times": _change(DP, "step", _set("phases.times.0", NAN)),
    "bad-epochs-of-4300-digits": _change(DP, "started", _set("config.epochs", int("7" * 4300))),
    "ok-30000-gpu-names": _change(H200, "header", _set("machine.gpus", GPUS)),
    "ok-ends-while-running": _change(DP, "ended", _set("status", "running")),
    "ok-ends-while-paused": _change(DP, "ended", _set("status", "paused")),
    # one rule of the schema each
    "bad-infinite-loss": _change(DP, "step", _set("loss", float("inf"))),
    "bad-loss-as-text": _change(DP, "step", _set("loss", "0.5")),
    "bad-bias-as-true": _change(DP, "step", _set("bias", True)),
    "bad-weights-empty": _change(DP, "step", _set("weights", [])),
    "bad-weights-of-17": _change(DP, "step", _set("weights", [0.0] * 17)),
    "bad-replica-device-a-number": _change(DP, "step", _set("replicas.0.0", 7)),
    "bad-replica-of-three-fields": _change(DP, "step", _set("replicas.0", ["cpu", 0, 1])),
    "bad-output-shape-of-three": _change(DP, "step", _set("output_shape", [1, 2, 3])),
    "bad-negative-row-id": _change(DP, "step", _set("replicas.0.6", [-1])),
    "bad-phase-name-a-list": _change(DP, "step", _set("phases.specs.0.0", [])),
    "bad-elapsed-negative": _change(DP, "step", _set("elapsed", -1.0)),
    "bad-devices-empty": _change(DP, "started", _set("devices", [])),
    "bad-emulated-as-text": _change(DP, "started", _set("emulated", "yes")),
    "bad-status-unknown": _change(DP, "ended", _set("status", "exploded")),
    "bad-final-loss-nan": _change(DP, "ended", _set("final_loss", NAN)),
    "bad-detail-unknown-key": _change(DDP, "detail", _set("key", "secrets"), key="final"),
    "bad-group-port-too-big": _change(DDP, "detail", _set("value.master_port", 70_000), key="group"),
    "bad-group-world-size-zero": _change(DDP, "detail", _set("value.world_size", 0), key="group"),
    "bad-group-labels-a-string": _change(DDP, "detail", _set("value.labels", "rank 0"), key="group"),
    "bad-shards-index-huge": _change(
        DDP, "detail", _set("value.first.ranks.0.indices.0", 10**30), key="shards"
    ),
    "bad-shards-ranks-an-object": _change(DDP, "detail", _set("value.first.ranks", {}), key="shards"),
    "bad-final-diff-infinite": _change(DDP, "detail", _set("value.max_abs_diff", float("inf")), key="final"),
    "bad-memory-bytes-negative": _change(TP, "detail", _set("value.0.parameters", -12), key="memory"),
    "bad-fsdp-zero-stage-7": _change(FSDP, "detail", _set("value.zero", 7), key="fsdp"),
    "bad-fsdp-ranks-an-object": _change(FSDP, "detail", _set("value.ranks", {"0": 1}), key="fsdp"),
    "bad-fsdp-collective-bytes-text": _change(
        FSDP, "detail", _set("value.ranks.0.collectives.0.input_bytes", "8"), key="fsdp", nth=1
    ),
    "bad-tp-columns-of-three": _change(TP, "detail", _set("value.ranks.0.columns", [0, 1, 2]), key="tp"),
    "bad-tp-shard-nan": _change(TP, "detail", _set("value.ranks.0.shard.weights.0", NAN), key="tp", nth=1),
    "bad-header-machine-a-list": _change(DP, "header", _set("machine", [])),
    "bad-header-gpu-name-a-number": _change(H200, "header", _set("machine.gpus.0", 200)),
    "bad-header-recorded-a-number": _change(DP, "header", _set("recorded", 2026)),
}


def main() -> None:
    for name, make in CRAFTED.items():
        (HERE / f"{name}.fitrec").write_text("\n".join(make()) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
