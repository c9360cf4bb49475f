"""The declared shape of a recording's lines (fitcore.core.schema): its header, each event and each detail,
and the readers that turn a line's JSON into the event it records.

A field of the wrong type, a number that is not finite, a list too long or of the wrong length is refused
with the field's place (`replicas[0][3]: a list of exactly 2 items, found []`), before any page or replay
sees it; fitcore.runs.recording adds the file and the line. The engine's own details are declared here; each
strategy declares its own (`Strategy.detail_schemas`), and a detail no one declares is refused.
"""

from __future__ import annotations

import math
from string import Formatter
from typing import Any

from fitcore.core.config import MAX_FEATURES, FitConfig, validate
from fitcore.core.errors import Text
from fitcore.core.events import ACTIVE, Detail, Replica, RunEnded, RunStarted, Status, Step
from fitcore.core.i18n import LANGUAGES, catalog, using
from fitcore.core.phases import PhaseSpec, StepPhases
from fitcore.core.schema import MEMORY_ROW, RANK, Bool, Int, List, Num, Obj, Opt, SchemaError, Str
from fitcore.protocols import registry

VERSION = 3  # what a recording is written as
GROUP = "group"  # Detail(GROUP): the process group of a ranked run (fitcore.engine)
MESSAGE_DEPTH = 4  # the most a recorded message nests (finished -> where -> processes -> its count)
MAX_DEVICES = 64  # the most devices or ranks a recorded run names (8 hosts of 8 ranks)

# Every event and detail is read through its declared shape (fitcore.core.schema): a field of the wrong type,
# a number that is not finite, a list too long or of the wrong length is refused with the line and the field,
# before any page or replay sees it.
NUM, COUNT, INT, TEXT = Num(), Int(0), Int(), Str()
DEVICE = Str(200)
SHAPE = List(COUNT, least=2, most=2)  # (rows, columns) of a batch or a replica's part of it
SECONDS = Num(0)


def _columns(v: Any, where: str) -> tuple[int, int] | None:
    if v is None:
        return None
    lo, hi = SHAPE(v, where)
    return lo, hi


def _replica(v: Any, where: str) -> Replica:
    if isinstance(v, list) and len(v) == 7:  # before version 3: no columns (every replica held all of them)
        v = [*v, None]
    device, start, stop, ins, outs, loss, ids, cols = List(lambda x, w: x, least=8, most=8)(v, where)
    return Replica(
        DEVICE(device, f"{where}[0]"),
        COUNT(start, f"{where}[1]"),
        COUNT(stop, f"{where}[2]"),
        tuple(SHAPE(ins, f"{where}[3]")),
        tuple(SHAPE(outs, f"{where}[4]")),
        Opt(NUM)(loss, f"{where}[5]"),
        tuple(List(COUNT)(ids, f"{where}[6]")),
        _columns(cols, f"{where}[7]"),
    )


def _spec(v: Any, where: str) -> PhaseSpec:
    name, device, size, start, stop = List(lambda x, w: x, least=5, most=5)(v, where)
    return PhaseSpec(
        Str(64)(name, f"{where}[0]"), DEVICE(device, f"{where}[1]"), COUNT(size, f"{where}[2]"),
        COUNT(start, f"{where}[3]"), COUNT(stop, f"{where}[4]"),
    )  # fmt: skip


def _phases(v: Any, where: str) -> StepPhases | None:
    if v is None:
        return None
    d = Obj({"specs": List(_spec, most=4096), "times": List(NUM, most=8192)})(v, where)
    specs, times = tuple(d["specs"]), tuple(d["times"])
    if any(not (0 <= s.start < len(times) and 0 <= s.stop < len(times)) for s in specs):
        raise SchemaError(f"{where}.specs", "phase slots within the step's times", f"{len(times)} times")
    return StepPhases(specs, times)


def _step(d: dict) -> Step:
    return Step(
        INT(d["step"], "step"),
        INT(d["epoch"], "epoch"),
        INT(d["batch"], "batch"),
        NUM(d["loss"], "loss"),
        tuple(SHAPE(d["input_shape"], "input_shape")),
        tuple(SHAPE(d["output_shape"], "output_shape")),
        tuple(List(_replica, most=MAX_DEVICES, least=1)(d["replicas"], "replicas")),
        tuple(List(NUM, least=1, most=MAX_FEATURES)(d["weights"], "weights")),
        NUM(d["bias"], "bias"),
        SECONDS(d["elapsed"], "elapsed"),
        _phases(d.get("phases"), "phases"),
    )


def _started(d: dict) -> RunStarted:
    if not isinstance(d["config"], dict):
        raise SchemaError("config", "an object", d["config"])
    cfg = validate(FitConfig.from_mapping(d["config"]), recorded=True)
    return RunStarted(
        cfg,
        tuple(List(DEVICE, least=1, most=MAX_DEVICES)(d["devices"], "devices")),
        Bool()(d["emulated"], "emulated"),
        Bool()(d["data_parallel"], "data_parallel"),
        TEXT(d["header"], "header"),
        INT(d["total_steps"], "total_steps"),
        INT(d["batches_per_epoch"], "batches_per_epoch"),
        tuple(List(NUM, least=1, most=MAX_FEATURES)(d["lstsq_weights"], "lstsq_weights")),
        NUM(d["lstsq_bias"], "lstsq_bias"),
    )


def _message(v: Any, depth: int = 0) -> Text:
    """A recorded message: a key of this fitcore's catalog and exactly its fields, each text, a number or a
    message in turn; checked by putting it into words in every language, so that no page fails on it."""
    if not isinstance(v, dict) or set(v) != {"key", "fields"} or not isinstance(v["fields"], dict):
        raise SchemaError("message", 'a message {"key": ..., "fields": {...}}', v)
    key = Str(200)(v["key"], "message.key")
    if key not in catalog():
        raise SchemaError("message.key", "a message key of this fitcore", key)
    fields = {}
    for name, value in v["fields"].items():
        if isinstance(value, dict) and depth < MESSAGE_DEPTH:
            fields[name] = _message(value, depth + 1)
        elif isinstance(value, str):
            fields[name] = Str(1000)(value, f"message.fields.{name}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            NUM(value, f"message.fields.{name}")  # finite; an int stays an int
            fields[name] = value
        else:
            raise SchemaError(f"message.fields.{name}", "text, a number or a message", value)
    for lang in LANGUAGES:
        names = {name for _, name, _, _ in Formatter().parse(catalog()[key][lang]) if name is not None}
        if names != set(fields):
            raise SchemaError("message.fields", f"the fields of {key!r}: {sorted(names)}", sorted(fields))
        with using(lang):
            str(Text(key, **fields))  # a field the text cannot format ({n:d} given text) raises here
    return Text(key, **fields)


def _ended(d: dict, version: int = VERSION) -> RunEnded:
    if version > 1:
        message = _message(d["message"])
    else:
        message = Text("run.message.recorded", text=Str(1000)(d["message"], "message"))
    status = Str(32)(d["status"], "status")
    if status not in set(Status):
        raise SchemaError("status", f"one of {', '.join(Status)}", status)
    if status in ACTIVE:  # written while the run still ran: the replay ends at its last event, and says so
        message, status = Text("recording.mid_run", status=Text(f"cli.status.{status}")), Status.STOPPED
    bias = Opt(NUM)(d["bias"], "bias")  # null: a run that ended before its first step has no parameters
    return RunEnded(
        Status(status),
        message,
        INT(d["steps"], "steps"),
        tuple(List(NUM, most=MAX_FEATURES)(d["weights"], "weights")),
        math.nan if bias is None else bias,
        Opt(NUM)(d["final_loss"], "final_loss"),
        SECONDS(d["elapsed"], "elapsed"),
    )


# The engine's own details; a strategy declares its own (Strategy.detail_schemas).
RANKS = List(MEMORY_ROW, least=1, most=MAX_DEVICES)
_SHARDS_EPOCH = Obj({
    "epoch": COUNT, "set_epoch": COUNT, "repeated": List(COUNT),
    "ranks": List(Obj({"rank": RANK, "device": DEVICE, "count": COUNT, "first": COUNT, "last": COUNT,
                       "indices": List(COUNT), "truncated": Bool(), "padded": List(COUNT)}),
                  most=MAX_DEVICES),
})  # fmt: skip
ENGINE_DETAILS = {
    GROUP: Obj(
        {"backend": Str(32), "world_size": Int(1, MAX_DEVICES), "master_addr": Str(256),
         "master_port": Int(0, 65535), "launcher": Str(64), "devices": List(DEVICE, most=MAX_DEVICES),
         "labels": List(DEVICE, most=MAX_DEVICES), "rows_per_rank": COUNT, "padding": COUNT,
         "per_rank_batch": COUNT, "global_batch": COUNT, "steps_per_epoch": COUNT},
        optional={"pids": List(COUNT, most=MAX_DEVICES), "hosts": List(Str(256), most=MAX_DEVICES),
                  "startup_seconds": SECONDS},
    ),
    "shards": Obj(
        {"data_size": COUNT, "world_size": Int(1, MAX_DEVICES), "rows_per_rank": COUNT, "total_size": COUNT,
         "padding": COUNT, "shuffle": Bool(), "seed": INT, "drop_last": Bool(), "per_rank_batch": COUNT,
         "steps_per_epoch": COUNT, "first": _SHARDS_EPOCH, "latest": _SHARDS_EPOCH},
    ),
    "final": Obj(
        {"ranks": List(Obj({"rank": RANK, "device": DEVICE, "weights": List(NUM, most=MAX_FEATURES),
                            "bias": NUM}), least=1, most=MAX_DEVICES),
         "identical": Bool(), "max_abs_diff": Num(0)},
    ),
    "memory": RANKS,
}  # fmt: skip


def detail_schemas() -> dict[str, Any]:
    """Every detail key this fitcore writes, with its declared shape: the engine's and each strategy's."""
    own = {key: check for s in registry.STRATEGIES.values() for key, check in s.detail_schemas.items()}
    return {**ENGINE_DETAILS, **own}


def _detail(d: dict, version: int = VERSION) -> Detail:
    key, value = Str(64)(d["key"], "key"), d["value"]
    if version < 3 and isinstance(value, dict) and "master_addr" in value:  # the process group, keyed then
        key = GROUP  # by the strategy that owned the launcher whatever the run's strategy
    known = detail_schemas()
    if key not in known:
        raise SchemaError("key", f"a detail this fitcore writes ({', '.join(sorted(known))})", key)
    return Detail(key, known[key](value, "value"), TEXT(d.get("text", ""), "text"))


READERS = {"step": _step, "started": _started, "ended": _ended, "detail": _detail}


MACHINE = Obj({}, optional={
    "python": Str(64), "torch": Str(64), "cuda": Opt(Str(64)), "cpu": Str(64), "os": Str(64),
    "gpus": List(Str(200)),
})  # fmt: skip
SOURCE = Obj(
    {"file": Str(4096), "sha256": Opt(Str(64)), "target": Str(1000), "rows": COUNT, "standardized": Bool(),
     "features": List(Str(1000), most=MAX_FEATURES)},
    optional={"mean": List(NUM, most=MAX_FEATURES), "scale": List(Num(1e-300), most=MAX_FEATURES),
              "target_mean": NUM, "target_scale": Num(1e-300)},
)  # fmt: skip
HEADER = Obj({"format": Str(64), "version": Int()}, optional={"recorded": Str(64), "machine": MACHINE,
                                                              "data": SOURCE})
