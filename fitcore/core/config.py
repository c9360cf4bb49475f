"""The run's configuration: one frozen dataclass, the limits it is checked against, and its validation."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from fitcore.core.chunks import ranks_allowed
from fitcore.core.devices import DevicePlan, parse_devices, run_gpus
from fitcore.core.errors import ConfigError, Listed, Text
from fitcore.core.uploads import shown_path
from fitcore.protocols import registry
from fitcore.protocols.mesh import DIMS, DP, MAX_DIM, TP, MeshError, parse_mesh, world_size

# ConfigError lives in fitcore.core.errors; `from fitcore.core.config import ConfigError` keeps working
__all__ = [
    "GATHER_ROWS",
    "MAX_FEATURES",
    "MAX_LR",
    "MAX_VALUE",
    "MAX_WORKERS",
    "OPTIMIZERS",
    "ConfigError",
    "FitConfig",
    "Limits",
    "available_memory_bytes",
    "estimate_bytes",
    "max_data_size",
    "validate",
]

MAX_FEATURES = 16
OPTIMIZERS = ("adam", "sgd")
MAX_WORKERS = 8
# |W|, |b| and the noise: larger values overflow float32's squared error (about 3.4e38) and would end
# the run as "diverged", blaming the learning rate for what the data did
MAX_VALUE = 1_000_000
# every fit diverges long before this; from about 3.4e37 (Adam's first step is lr / 0.1) float32 cannot hold
# the step and torch raises instead, so the run would fail rather than diverge
MAX_LR = 1e30
# The most work one run may ask for, on the command line too: steps, and rows through the model (epochs x
# data size). About 10 minutes of steps at a CPU's few thousand a second.
MAX_TOTAL_STEPS = 1_000_000
MAX_TOTAL_ROWS = 1_000_000_000
# the most rows a tensor can have (torch's sizes are int64); beyond it the memory estimate in MiB would not
# even fit in a float
MAX_ROWS = 2**63 - 1
# Rows gathered by one index_select (fitcore.core.data.epoch_batches): one over many batches' rows is cheaper
# per row than one per batch (docs/performance.md says by how much), while holding at most this many rows more
# than the data itself.
GATHER_ROWS = 65_536


@dataclass(frozen=True)
class FitConfig:
    """Everything that defines one run of the fitting demo y = X·W + b."""

    weights: tuple[float, ...] = (5.2, 9.6)  # true W, one entry per feature (1..16)
    bias: float = 3.4  # true b
    noise: float = 0.0  # std of Gaussian noise added to y
    data_size: int = 200  # rows N of the synthetic data set
    batch_size: int = 200  # rows per batch; the last batch of an epoch may be smaller
    epochs: int = 200  # full passes over the data
    lr: float = 0.5  # learning rate
    optimizer: str = "adam"  # "adam" or "sgd"
    shuffle: bool = True  # draw each epoch's batches from a fresh permutation, like DataLoader(shuffle=True)
    seed: int = 0  # seeds the data, the initial parameters and the permutations
    devices: str = "virtual:2"  # "cpu", "cuda", "cuda:0,1", or "virtual:K" (K emulated CPU devices)
    # one of fitcore.protocols.registry.NAMES; the first registered (one process) by default, read when a
    # config is made, not when this module is imported, so that no import order can leave it empty
    strategy: str = dataclasses.field(default_factory=lambda: registry.DEFAULT)
    workers: int = 2  # worker processes for a strategy with processes (ddp, fsdp)
    # the ranks' mesh by dimension, "dp=2,tp=2" (fitcore.protocols.mesh); "" is the strategy's own dimension
    # of `workers` ranks ("dp=2" for DDP, "tp=2" for TP); its sizes' product is the world size, `workers`
    mesh: str = ""
    # FSDP's fully_shard(reshard_after_forward=...): True frees the gathered parameters after forward
    # (ZeRO-3), False keeps them until backward ends (ZeRO-2); only that strategy reads it (its `options`)
    reshard_after_forward: bool = True
    # Pipeline parallelism's own (fitcore.strategies.pp): the deep-linear model's layers, whose product is W;
    # the microbatches a batch is cut into; torch.distributed.pipelining's schedule that orders them
    layers: int = 4
    width: int = 0  # the layers' width between them (0: d); wider layers are more work a block
    microbatches: int = 4
    schedule: str = "1f1b"
    # a stand-in for a model large enough that compute, not messages, fills a pipeline's step: each block
    # also takes this many milliseconds (a backward twice as many, as a layer's backward is twice the work)
    block_ms: float = 0.0
    # a straggler: this stage's blocks take SLOW_FACTOR times block_ms, and the class sees the bubble move to
    # the stages around it (-1: every stage alike)
    slow_stage: int = -1
    # Your own data (fitcore.core.csvdata): a CSV file fitted instead of the synthetic data. validate() fills
    # in features, data_size, data_sha256, and as weights and bias the file's least-squares answer.
    data: str = ""  # path of the CSV file; "" for the synthetic y = X·W + b
    target: str = ""  # the column to predict
    features: tuple[str, ...] = ()  # the columns X, 1 to 16; () before validation means every other column
    standardize: bool = True  # scale each feature column to mean 0, std 1 (results also in the file's units)
    data_sha256: str = ""  # the file's checksum, so that every DDP rank reads the very rows validated

    @property
    def n_features(self) -> int:
        return len(self.weights)

    @property
    def mesh_dims(self) -> tuple[tuple[str, int], ...]:
        """The mesh's dimensions, (name, size), outermost first: the strategy's own one of `workers` ranks
        where no mesh is given (validate() has checked a given one)."""
        if self.mesh:
            return parse_mesh(self.mesh)
        return ((registry.strategy(self.strategy).dim, self.workers),)

    @property
    def batches_per_epoch(self) -> int:
        """Optimizer steps per epoch, as the strategy cuts an epoch."""
        return registry.strategy(self.strategy).steps_per_epoch(self)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.batches_per_epoch

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["weights"] = list(self.weights)
        d["features"] = list(self.features)
        return d

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "FitConfig":
        """Build a config from raw values (strings from a CLI, a URL or a form), converting each field.

        Unknown keys are an error; missing keys take the defaults. The result is not yet validated.
        """
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for name, raw in values.items():
            if name not in known:  # named as given, or by its repr where it would break the line
                shown = name if isinstance(name, str) and name.isprintable() else repr(name)
                raise ConfigError(shown, raw, Text("config.one_of", names=", ".join(sorted(known))))
            kwargs[name] = _PARSERS[name](name, raw)
        if kwargs.get("mesh") and "workers" not in kwargs:  # the mesh says how many ranks: its product
            try:
                kwargs["workers"] = world_size(parse_mesh(kwargs["mesh"]))
            except MeshError:
                pass  # validate() refuses the mesh, naming it
        return cls(**kwargs)


@dataclass(frozen=True)
class Limits:
    """Bounds a run is checked against before any tensor is allocated. None means unbounded."""

    max_features: int = MAX_FEATURES  # number of weights
    max_data_size: int | None = None  # rows; None leaves only the memory estimate
    max_epochs: int | None = None  # epochs
    max_steps: int | None = None  # epochs x batches per epoch
    max_seconds: float | None = None  # time a run may train, its pauses not counted (enforced by the runner)
    max_paused_seconds: float | None = None  # time one pause may last (enforced by the runner)
    memory_fraction: float = 0.5  # share of the available memory one run may plan to use


# ---------------------------------------------------------------------------------------------------------
# Parsing raw values into typed fields.


# Numbers as text are read in ASCII only, and the same way by the CLI, a link and the page: Python's int()
# and float() would also take "١٢" (12), full-width "１", "1_000" and surrounding Unicode spaces, so that a
# value could mean a number here and be refused where the same text is read by a stricter reader.
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(  # nan and inf are read, so that validate() refuses them as not finite, by name
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE
)
_SPACE = " \t\n\r\f\v"  # ASCII white space, stripped from text around a value
_WEIGHTS_SEPARATOR = re.compile(r"\s*,\s*|\s+", re.ASCII)  # one comma or spaces: "1,,2" has an empty number


def _text(field: str, raw: Any, allowed: str) -> str:
    try:
        return str(raw)
    except ValueError:  # an int (or a container of one) of more digits than Python turns into text
        raise ConfigError(field, raw, allowed) from None


def _parse_int(field: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ConfigError(field, raw, Text("config.integer"))
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if math.isfinite(raw) and raw == int(raw):
            return int(raw)
        raise ConfigError(field, raw, Text("config.integer"))
    text = _text(field, raw, Text("config.integer")).strip(_SPACE)
    if _INT_TEXT.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits())
            raise ConfigError(field, raw, Text("config.integer")) from None
    value = float(text) if _FLOAT_TEXT.fullmatch(text) else math.nan  # "2e3", "200.0"
    if math.isfinite(value) and value == int(value):
        return int(value)
    raise ConfigError(field, raw, Text("config.integer"))


def _parse_float(field: str, raw: Any) -> float:
    if isinstance(raw, bool):
        raise ConfigError(field, raw, Text("config.number"))
    if isinstance(raw, str):
        text = raw.strip(_SPACE)
        if not _FLOAT_TEXT.fullmatch(text):
            raise ConfigError(field, raw, Text("config.number"))
        return float(text)  # "1e999" is inf, refused by validate() as not finite
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float's range
        raise ConfigError(field, raw, Text("config.number")) from None


def parse_number(field: str, raw: str, kind: type) -> int | float:
    """Text read as an int in ASCII digits alone (no "1e3") or as a float the way the fields read one."""
    if kind is float:
        return _parse_float(field, raw)
    if not _INT_TEXT.fullmatch(raw.strip(_SPACE)):
        raise ConfigError(field, raw, Text("config.integer"))
    return _parse_int(field, raw)


def _parse_weights(field: str, raw: Any) -> tuple[float, ...]:
    if isinstance(raw, str):
        parts = _WEIGHTS_SEPARATOR.split(raw.strip()) if raw.strip() else []
        if "" in parts:  # refused, not read as "1,2": a link's value is used as given or not at all
            raise ConfigError(field, raw, Text("config.weights", most=MAX_FEATURES))
    elif isinstance(raw, (list, tuple)):
        parts = list(raw)
    else:
        raise ConfigError(field, raw, Text("config.weights", most=MAX_FEATURES))
    if not parts:
        raise ConfigError(field, raw, Text("config.weights", most=MAX_FEATURES))
    try:
        return tuple(_parse_float(field, p) for p in parts)
    except ConfigError:
        raise ConfigError(field, raw, Text("config.weights", most=MAX_FEATURES)) from None


def _parse_bool(field: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = _text(field, raw, "true or false").strip(_SPACE).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(field, raw, Text("config.bool"))


def _parse_str(field: str, raw: Any) -> str:
    return _text(field, raw, "text").strip().lower()


def _parse_text(field: str, raw: Any) -> str:
    """A path or a column name: kept as given, but for surrounding spaces."""
    return str(raw).strip()


def _parse_names(field: str, raw: Any) -> tuple[str, ...]:
    parts = raw.split(",") if isinstance(raw, str) else list(raw) if isinstance(raw, (list, tuple)) else None
    names = None if parts is None else tuple(str(p).strip() for p in parts)
    if names is None or (parts and not all(names)):  # "" and "a,,b" name no column where a name stands
        raise ConfigError(field, raw, Text("config.names"))
    return names


_PARSERS = {
    "weights": _parse_weights,
    "bias": _parse_float,
    "noise": _parse_float,
    "data_size": _parse_int,
    "batch_size": _parse_int,
    "epochs": _parse_int,
    "lr": _parse_float,
    "optimizer": _parse_str,
    "shuffle": _parse_bool,
    "seed": _parse_int,
    "devices": _parse_str,
    "strategy": _parse_str,
    "workers": _parse_int,
    "mesh": _parse_str,
    "reshard_after_forward": _parse_bool,
    "layers": _parse_int,
    "width": _parse_int,
    "microbatches": _parse_int,
    "schedule": _parse_str,
    "block_ms": _parse_float,
    "slow_stage": _parse_int,
    "data": _parse_text,
    "target": _parse_text,
    "features": _parse_names,
    "standardize": _parse_bool,
    "data_sha256": _parse_str,
}


# ---------------------------------------------------------------------------------------------------------
# Validation.


def estimate_bytes(data_size: int, n_features: int, batch_size: int) -> int:
    """Memory a run plans to use, in bytes, before anything is allocated.

    Counts the float32 data X (N, d) and y (N, 1), the int64 permutation (N,), the float64 copies of X and
    y for the least-squares reference, one gather of whole batches (GATHER_ROWS rows, or one batch if it is
    bigger) and a few batch-sized buffers (inputs, outputs, gradients).
    """
    n, d, b = data_size, n_features, min(batch_size, data_size)
    data = 4 * n * (d + 1)
    permutation = 8 * n
    reference = 8 * n * (d + 1)
    gathered = 4 * min(n, max(b, GATHER_ROWS)) * (d + 1)
    batch = 4 * 4 * b * (d + 1)
    return data + permutation + reference + gathered + batch


def available_memory_bytes() -> int:
    """Memory this process can still take, from /proc/meminfo where it exists."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def max_data_size(n_features: int, available: int, memory_fraction: float = 0.5, batch_size: int = 1) -> int:
    """The largest data size the memory check admits for n_features and batch_size, given `available` bytes.

    Found by bisection on estimate_bytes, so it is exactly where validate() starts to refuse.
    """
    budget = int(available * memory_fraction)
    lo, hi = 0, 1
    while estimate_bytes(hi, n_features, batch_size) <= budget:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if estimate_bytes(mid, n_features, batch_size) <= budget else (lo, mid)
    return lo


def integer_range(lo: Any, hi: Any | None, why: str = "") -> Text:
    """ "an integer from 1 to 200", "an integer 0 or more"; `why` is the key of a reason after it."""
    reason = Text(why) if why else ""
    if hi is None:
        return Text("config.int_min", lo=lo, why=reason)
    return Text("config.int_range", lo=lo, hi=hi, why=reason)


def _check_int(field: str, value: int, lo: int, hi: int | None, why: str = "") -> None:
    # a bool is an int to Python, and a float such as 2.5 would only fail later, inside torch
    bad_type = isinstance(value, bool) or not isinstance(value, numbers.Integral)
    if bad_type or value < lo or (hi is not None and value > hi):
        raise ConfigError(field, value, integer_range(lo, hi, why))


def _check_finite(field: str, value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(field, value, Text("config.finite"))


def check_options(strategy: str, values: Mapping[str, Any]) -> None:
    """Refuse a strategy's own field (FSDP's reshard_after_forward) set away from its default under another
    strategy, which would ignore it; `values`: some of registry.OPTIONS, typed."""
    own = registry.strategy(strategy).options
    for field, value in values.items():
        if field not in own and value != getattr(FitConfig, field):
            raise ConfigError(field, value, Text("config.option_of", strategies=registry.owners(field)))


@dataclass(frozen=True)
class Checked:
    """A config that passed check(), with the device plan check() made of it: what a run starts from.

    The page checks its controls once per Start and hands this to the pool, which hands the plan to the
    run's trainer: the settings are read once, not again at each layer. Only check() makes one.
    """

    config: FitConfig
    plan: DevicePlan
    limits: Limits


def check_mesh(cfg: FitConfig) -> None:
    """A given mesh: written as name=size pairs, of a strategy with ranks, with the strategy's own dimension
    and only those it composes with, and the world size (`workers`) its sizes' product."""
    try:
        dims = parse_mesh(cfg.mesh)
    except MeshError:
        raise ConfigError("mesh", cfg.mesh, Text("config.mesh", dims=", ".join(DIMS), most=MAX_DIM)) from None
    entry = registry.strategy(cfg.strategy)
    if not entry.processes:
        ranked = Listed(tuple(s.name for s in registry.STRATEGIES.values() if s.processes))
        raise ConfigError("mesh", cfg.mesh, Text("config.mesh_ranks", strategy=entry.label, names=ranked))
    names = [name for name, _ in dims]
    if entry.dim not in names or not set(names) <= {entry.dim, *entry.composes}:
        allowed = Listed((f"{entry.dim}=K", *(f"{entry.dim}=K,{other}=K" for other in entry.composes)))
        raise ConfigError("mesh", cfg.mesh, Text("config.mesh_dims", strategy=entry.label, dim=entry.dim,
                                                  allowed=allowed))  # fmt: skip
    product = world_size(dims)
    if cfg.workers != product:
        raise ConfigError("workers", cfg.workers, Text("config.mesh_workers", n=product, mesh=cfg.mesh))
    sizes = dict(dims)
    if sizes.get(DP, 1) > cfg.data_size:  # each `dp` coordinate its own rows: one per row at most
        raise ConfigError("mesh", cfg.mesh, Text("config.mesh_dp", rows=cfg.data_size))
    allowed = ranks_allowed(cfg.n_features, MAX_DIM)  # torch.chunk gives every `tp` rank some columns
    if sizes.get(TP, 1) not in allowed:
        allowed_text = Text("config.mesh_tp", features=cfg.n_features, allowed=Listed(allowed))
        raise ConfigError("mesh", cfg.mesh, allowed_text)


def validate(
    cfg: FitConfig,
    limits: Limits = Limits(),
    available: int | None = None,
    gpus: Any = None,
    recorded: bool = False,
) -> FitConfig:
    """Check every field of `cfg` against `limits`; return it, or raise ConfigError (check()'s config)."""
    return check(cfg, limits, available, gpus, recorded).config


def check(
    cfg: FitConfig,
    limits: Limits = Limits(),
    available: int | None = None,
    gpus: Any = None,
    recorded: bool = False,
) -> Checked:
    """Check every field of `cfg` against `limits`; return it with its device plan, or raise ConfigError.

    A config with a CSV file (`data`) is returned resolved (fitcore.core.csvdata.resolve): its columns, rows,
    checksum and least-squares parameters filled in from the file; any other config is returned unchanged.

    Args:
        cfg: the configuration to check.
        limits: bounds (a server sets tighter ones than the command line).
        available: bytes of memory available; read from the machine when None.
        gpus: the CUDA GPUs to check `devices` against; discovered when None.
        recorded: a recording's config, checked as a run on the machine that recorded it: its file is not
            read (the recording holds what it decided), its GPUs are taken as there, its memory not asked.
    """
    if recorded:
        gpus, available = run_gpus(cfg.devices, []), 2**62
    # 0. your own data: read the file (bounded by fitcore.core.csvdata's limits) and fill in what it decides
    if cfg.data and not recorded:
        from fitcore.core import csvdata  # reads pandas: only runs on a file pay for it

        cfg = csvdata.resolve(cfg)
        if limits.max_data_size is not None and cfg.data_size > limits.max_data_size:
            # as given; an upload by its own name: the server's directory is the server's
            most = Text("config.data_rows", most=limits.max_data_size)
            raise ConfigError("data", shown_path(cfg.data), most)
    elif not cfg.data and (cfg.target or cfg.features):
        raise ConfigError("target" if cfg.target else "features", cfg.target or ",".join(cfg.features),
                          Text("config.needs_data"))  # fmt: skip

    # 1. the true parameters
    d = len(cfg.weights)
    if not 1 <= d <= limits.max_features:
        raise ConfigError("weights", list(cfg.weights), Text("config.weights", most=limits.max_features))
    for w in cfg.weights:
        if not (math.isfinite(w) and (abs(w) <= MAX_VALUE or cfg.data)):  # a file's answer may be large
            raise ConfigError("weights", list(cfg.weights), Text("config.weights_range", most=MAX_VALUE))
    _check_finite("bias", cfg.bias)
    if abs(cfg.bias) > MAX_VALUE and not cfg.data:
        raise ConfigError("bias", cfg.bias, Text("config.bias_range", most=MAX_VALUE))
    _check_finite("noise", cfg.noise)
    if not 0 <= cfg.noise <= MAX_VALUE:
        raise ConfigError("noise", cfg.noise, Text("config.noise_range", most=MAX_VALUE))

    # 2. sizes and schedule
    _check_int("data_size", cfg.data_size, 1, limits.max_data_size)
    if cfg.data_size > MAX_ROWS:
        raise ConfigError("data_size", cfg.data_size, Text("config.max_rows", n=MAX_ROWS))
    _check_int("batch_size", cfg.batch_size, 1, cfg.data_size, "config.why.data_size")
    _check_int("epochs", cfg.epochs, 1, limits.max_epochs)
    if limits.max_steps is not None and cfg.total_steps > limits.max_steps:
        raise ConfigError(
            "epochs",
            cfg.epochs,
            Text(
                "config.max_steps",
                steps=Text.count("count.step", limits.max_steps),
                epochs=Text.count("count.epoch", cfg.epochs),
                batches=Text.count("config.count.batch", cfg.batches_per_epoch),
                total=cfg.total_steps,
            ),
        )
    if not (math.isfinite(cfg.lr) and 0 < cfg.lr <= MAX_LR):
        raise ConfigError("lr", cfg.lr, Text("config.lr", most=f"{MAX_LR:g}"))
    if cfg.optimizer not in OPTIMIZERS:
        raise ConfigError("optimizer", cfg.optimizer, Listed(OPTIMIZERS))
    _check_int("seed", cfg.seed, 0, 2**63 - 1)

    # 3. where it runs
    if cfg.strategy not in registry.STRATEGIES:  # as registered now: an installed package's too
        raise ConfigError("strategy", cfg.strategy, Listed(registry.NAMES))
    check_options(cfg.strategy, {f: getattr(cfg, f) for f in registry.OPTIONS})
    plan = parse_devices(cfg.devices, gpus)
    if len(plan.labels) > cfg.data_size:
        raise ConfigError("devices", cfg.devices, Text("config.devices_rows", rows=cfg.data_size))
    if cfg.mesh:  # a mesh given: its own rules, and its `dp` size bounds the row shards (not the world size)
        check_mesh(cfg)
    if not registry.strategy(cfg.strategy).processes:  # unused here, but never a count that is not one
        _check_int("workers", cfg.workers, 1, MAX_WORKERS)
    else:
        if registry.strategy(cfg.strategy).split.rows and not cfg.mesh:  # each rank its rows: one a row
            _check_int("workers", cfg.workers, 1, min(MAX_WORKERS, cfg.data_size), "config.why.workers")
        else:  # every rank takes every row (TP's columns): the strategy's own rules bound its ranks
            _check_int("workers", cfg.workers, 1, MAX_WORKERS)
        if plan.kind == "cuda" and cfg.workers != len(plan.device_ids):
            raise ConfigError(
                "workers", cfg.workers, Text("config.workers_gpus", n=len(plan.device_ids), spec=plan.spec)
            )
    registry.strategy(cfg.strategy).rules(cfg, plan)  # its own rules (TP: ranks torch.chunk gives columns)

    # 4. memory, estimated before any tensor exists
    need = estimate_bytes(cfg.data_size, d, cfg.batch_size)
    have = available_memory_bytes() if available is None else available
    budget = int(have * limits.memory_fraction)
    if need > budget:
        most = max_data_size(d, have, limits.memory_fraction, cfg.batch_size)
        raise ConfigError(
            "data_size",
            cfg.data_size,
            Text(
                "config.memory",
                rows=Text.count("count.row", most),
                features=Text.count("config.count.feature", d),
                need=f"{need / 2**20:.0f}",
                budget=f"{budget / 2**20:.0f}",
            ),
        )

    # 5. the work in all: a run that would take days is refused, not started (a server bounds it tighter)
    if cfg.total_steps > MAX_TOTAL_STEPS or cfg.epochs * cfg.data_size > MAX_TOTAL_ROWS:
        raise ConfigError(
            "epochs",
            cfg.epochs,
            Text("config.work", steps=MAX_TOTAL_STEPS, rows=MAX_TOTAL_ROWS, has_steps=cfg.total_steps,
                 has_rows=cfg.epochs * cfg.data_size),
        )  # fmt: skip
    return Checked(cfg, plan, limits)
