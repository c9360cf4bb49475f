"""FitConfig, its conversion from raw values, and every error validate() can raise."""

from __future__ import annotations

import dataclasses

import pytest

from fitcore.core import errors
from fitcore.core.config import (
    GATHER_ROWS,
    ConfigError,
    FitConfig,
    Limits,
    estimate_bytes,
    max_data_size,
    validate,
)
from fitcore.core.devices import GPU

GPUS = [GPU(0, "A", 16 << 30), GPU(1, "B", 16 << 30)]
PLENTY = 64 << 30  # bytes of memory, so that only the memory tests depend on it
NAN, INF = float("nan"), float("inf")


def check(cfg: FitConfig, limits: Limits = Limits(), available: int = PLENTY, gpus=()) -> FitConfig:
    return validate(cfg, limits, available=available, gpus=list(gpus))


def assert_names(err: ConfigError, field: str, value_text: str, allowed: str) -> None:
    """The error names the field, the value given and what is allowed, in that order."""
    message = str(err)
    assert err.field == field
    assert value_text in repr(err.value)
    assert allowed in err.allowed
    assert message == f"{field}: got {errors._shown(err.value)}; allowed: {err.allowed}"  # cut past 80


def test_defaults_are_valid_and_describe_the_tutorial():
    cfg = check(FitConfig())
    assert cfg == FitConfig()
    assert (cfg.weights, cfg.bias, cfg.data_size, cfg.batch_size) == ((5.2, 9.6), 3.4, 200, 200)
    assert (cfg.n_features, cfg.batches_per_epoch, cfg.total_steps) == (2, 1, 200)


@pytest.mark.parametrize(
    "data_size, batch_size, epochs, batches, steps",
    [(250, 100, 4, 3, 12), (200, 200, 200, 1, 200), (200, 3, 2, 67, 134), (1, 1, 5, 1, 5), (10, 4, 3, 3, 9)],
)
def test_schedule(data_size, batch_size, epochs, batches, steps):
    cfg = FitConfig(data_size=data_size, batch_size=batch_size, epochs=epochs)
    assert (cfg.batches_per_epoch, cfg.total_steps) == (batches, steps)


def test_config_is_frozen_and_round_trips():
    cfg = FitConfig(weights=(1.0, -2.0, 3.5), seed=9, shuffle=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    d = cfg.to_dict()
    assert d["weights"] == [1.0, -2.0, 3.5] and d["shuffle"] is False
    assert FitConfig.from_mapping(d) == cfg
    assert dataclasses.replace(cfg, lr=0.1).lr == 0.1 and cfg.lr == 0.5


# (override, field, text in repr(value), text in allowed)
VALIDATE_ERRORS = [
    ({"batch_size": 0}, "batch_size", "0", "an integer from 1 to 200 (the data size)"),
    ({"batch_size": -5}, "batch_size", "-5", "an integer from 1 to 200 (the data size)"),
    ({"batch_size": 201}, "batch_size", "201", "an integer from 1 to 200 (the data size)"),
    ({"data_size": 0, "batch_size": 1}, "data_size", "0", "an integer 1 or more"),
    ({"data_size": -3, "batch_size": 1}, "data_size", "-3", "an integer 1 or more"),
    ({"epochs": 0}, "epochs", "0", "an integer 1 or more"),
    ({"seed": -1}, "seed", "-1", f"an integer from 0 to {2**63 - 1}"),
    ({"weights": (NAN, 1.0)}, "weights", "[nan, 1.0]", "finite numbers"),
    ({"weights": (1.0, INF)}, "weights", "[1.0, inf]", "finite numbers"),
    ({"weights": (-INF,)}, "weights", "[-inf]", "finite numbers"),
    ({"weights": ()}, "weights", "[]", "1 to 16 numbers"),
    ({"weights": (1.0,) * 17}, "weights", "[1.0, 1.0", "1 to 16 numbers"),
    ({"bias": NAN}, "bias", "nan", "a finite number"),
    ({"bias": INF}, "bias", "inf", "a finite number"),
    ({"bias": -INF}, "bias", "-inf", "a finite number"),
    ({"noise": NAN}, "noise", "nan", "a finite number"),
    ({"noise": INF}, "noise", "inf", "a finite number"),
    ({"noise": -0.1}, "noise", "-0.1", "a finite number"),
    ({"lr": 0.0}, "lr", "0.0", "a finite number greater than 0"),
    ({"lr": -1.0}, "lr", "-1.0", "a finite number greater than 0"),
    ({"lr": NAN}, "lr", "nan", "a finite number greater than 0"),
    ({"lr": INF}, "lr", "inf", "a finite number greater than 0"),
    ({"lr": 1e31}, "lr", "1e+31", "a finite number greater than 0 and at most 1e+30"),
    ({"lr": 1e300}, "lr", "1e+300", "at most 1e+30"),  # would overflow float32 inside the optimizer
    ({"optimizer": "rmsprop"}, "optimizer", "rmsprop", "adam or sgd"),
    ({"optimizer": ""}, "optimizer", "''", "adam or sgd"),
    ({"strategy": "horovod"}, "strategy", "horovod", "dataparallel or ddp"),
    ({"devices": "gpu"}, "devices", "gpu", "virtual:K (K from 1 to 8)"),
    ({"devices": ""}, "devices", "''", "virtual:K (K from 1 to 8)"),
    ({"devices": "virtual:0"}, "devices", "virtual:0", "virtual:K (K from 1 to 8)"),
    ({"devices": "virtual:9"}, "devices", "virtual:9", "virtual:K (K from 1 to 8)"),
    ({"devices": "cuda"}, "devices", "cuda", "this machine has 0 CUDA GPUs"),
    ({"devices": "cuda:0,1"}, "devices", "cuda:0,1", "this machine has 0 CUDA GPUs"),
    (
        {"data_size": 3, "batch_size": 3, "devices": "virtual:4"},
        "devices",
        "virtual:4",
        "at most as many devices as data rows (3)",
    ),
    ({"strategy": "ddp", "workers": 0}, "workers", "0", "an integer from 1 to 8"),
    ({"strategy": "ddp", "workers": 9}, "workers", "9", "an integer from 1 to 8"),
    ({"strategy": "ddp", "workers": 5, "data_size": 4, "batch_size": 4}, "workers", "5", "from 1 to 4"),
    # bools and floats in int fields are refused, not taken as 1 or passed on to torch
    ({"batch_size": True}, "batch_size", "True", "an integer"),
    ({"data_size": True, "batch_size": 1}, "data_size", "True", "an integer"),
    ({"epochs": False}, "epochs", "False", "an integer"),
    ({"epochs": 2.5}, "epochs", "2.5", "an integer"),
    ({"seed": True}, "seed", "True", "an integer"),
]


@pytest.mark.parametrize("override, field, value_text, allowed", VALIDATE_ERRORS)
def test_validate_rejects(override, field, value_text, allowed):
    with pytest.raises(ConfigError) as info:
        check(FitConfig(**override))
    assert_names(info.value, field, value_text, allowed)


def test_cuda_index_beyond_the_gpus():
    with pytest.raises(ConfigError) as info:
        check(FitConfig(devices="cuda:5"), gpus=GPUS)
    assert_names(info.value, "devices", "cuda:5", "cuda:i,j,... with i, j from 0 to 1")
    assert check(FitConfig(devices="cuda:1,0"), gpus=GPUS).devices == "cuda:1,0"


@pytest.mark.parametrize(
    "override",
    [
        {"batch_size": 1},
        {"batch_size": 200},
        {"data_size": 1, "batch_size": 1, "devices": "virtual:1"},
        {"data_size": 8, "batch_size": 3, "devices": "virtual:8"},
        {"lr": 1e6, "optimizer": "sgd"},
        {"lr": 1e30},
        {"noise": 0.0},
        {"weights": (0.5,) * 16},
        {"strategy": "ddp", "workers": 8},
        {"seed": 2**63 - 1},
    ],
)
def test_validate_accepts_the_edges(override):
    cfg = FitConfig(**override)
    assert check(cfg) is cfg


# (limits, override, field, text in repr(value), text in allowed)
LIMIT_ERRORS = [
    (Limits(max_data_size=100), {"data_size": 101, "batch_size": 100}, "data_size", "101", "from 1 to 100"),
    (Limits(max_epochs=10), {"epochs": 11}, "epochs", "11", "an integer from 1 to 10"),
    (
        Limits(max_steps=50),
        {"data_size": 250, "batch_size": 100, "epochs": 17},
        "epochs",
        "17",
        "at most 50 steps in all; 17 epochs x 3 batches is 51",
    ),
    (Limits(max_features=1), {}, "weights", "[5.2, 9.6]", "1 to 1 numbers"),
]


@pytest.mark.parametrize("limits, override, field, value_text, allowed", LIMIT_ERRORS)
def test_limits(limits, override, field, value_text, allowed):
    with pytest.raises(ConfigError) as info:
        check(FitConfig(**override), limits)
    assert_names(info.value, field, value_text, allowed)


@pytest.mark.parametrize(
    "limits, override",
    [
        (Limits(max_data_size=100), {"data_size": 100, "batch_size": 100}),
        (Limits(max_epochs=10), {"epochs": 10}),
        (Limits(max_steps=51), {"data_size": 250, "batch_size": 100, "epochs": 17}),
        (Limits(max_features=1), {"weights": (2.0,)}),
    ],
)
def test_limits_admit_their_bound(limits, override):
    check(FitConfig(**override), limits)


def test_estimate_bytes_counts_data_permutation_reference_gather_and_batches():
    # X and y in float32, the int64 permutation, float64 copies of X and y, one gather, 4 batch buffers
    n, d, b = 200, 2, 50
    expected = 4 * n * (d + 1) + 8 * n + 8 * n * (d + 1) + 4 * n * (d + 1) + 4 * 4 * b * (d + 1)
    assert estimate_bytes(n, d, b) == expected == 2400 + 1600 + 4800 + 2400 + 2400
    assert estimate_bytes(n, d, 10 * n) == estimate_bytes(n, d, n)  # a batch is never bigger than the data
    # a gather holds GATHER_ROWS rows at most, or one batch when a batch is bigger
    big = 10 * GATHER_ROWS
    assert estimate_bytes(big, d, 100) - estimate_bytes(big - 1, d, 100) == 44  # 44 bytes a row, 2 features
    assert estimate_bytes(big, d, 2 * GATHER_ROWS) - estimate_bytes(big, d, GATHER_ROWS) == 4 * (
        GATHER_ROWS * (d + 1) + 4 * GATHER_ROWS * (d + 1)
    )


@pytest.mark.parametrize(
    "d, available, fraction, batch",
    [(2, 64 << 20, 0.5, None), (16, 64 << 20, 0.5, None), (2, 10 << 20, 0.25, None), (2, 64 << 20, 0.5, 100)],
)
def test_memory_check_admits_exactly_max_data_size(d, available, fraction, batch):
    """max_data_size is where validate() starts to refuse, for the run's batch size (None: the whole data)."""
    limits = Limits(memory_fraction=fraction)
    most = max_data_size(d, available, fraction, batch or 10**9)
    budget = int(available * fraction)
    assert estimate_bytes(most, d, batch or most) <= budget < estimate_bytes(most + 1, d, batch or most + 1)
    weights = (1.0,) * d
    ok = FitConfig(weights=weights, data_size=most, batch_size=batch or most, epochs=1)  # memory, not work
    assert check(ok, limits, available=available) is ok
    with pytest.raises(ConfigError) as info:
        too_big = dataclasses.replace(ok, data_size=most + 1, batch_size=batch or most + 1)
        check(too_big, limits, available=available)
    assert_names(info.value, "data_size", str(most + 1), f"at most {most} rows with {d} features here")
    assert "MiB may be used" in str(info.value)


def test_memory_check_reports_the_size_in_mib():
    with pytest.raises(ConfigError) as info:
        check(FitConfig(data_size=20_000_000, batch_size=100), available=1 << 30)
    # 20 M rows x 2 features: 44 bytes a row, a gather of 65,536 rows and the batch buffers: 840 MiB
    assert estimate_bytes(20_000_000, 2, 100) == 44 * 20_000_000 + 4 * 3 * GATHER_ROWS + 4800
    assert "needs about 840 MiB, 512 MiB may be used" in str(info.value)


# (raw mapping, field, text in repr(value), text in allowed)
FROM_MAPPING_ERRORS = [
    ({"data_size": "abc"}, "data_size", "'abc'", "an integer"),
    ({"data_size": ""}, "data_size", "''", "an integer"),
    ({"data_size": "  "}, "data_size", "'  '", "an integer"),
    ({"data_size": "1.5"}, "data_size", "'1.5'", "an integer"),
    ({"data_size": "inf"}, "data_size", "'inf'", "an integer"),
    ({"data_size": "1e400"}, "data_size", "'1e400'", "an integer"),
    ({"data_size": 2.5}, "data_size", "2.5", "an integer"),
    ({"data_size": True}, "data_size", "True", "an integer"),
    ({"batch_size": False}, "batch_size", "False", "an integer"),
    ({"epochs": True}, "epochs", "True", "an integer"),
    ({"seed": True}, "seed", "True", "an integer"),
    ({"workers": True}, "workers", "True", "an integer"),
    ({"epochs": None}, "epochs", "None", "an integer"),
    ({"lr": "fast"}, "lr", "'fast'", "a number"),
    ({"lr": ""}, "lr", "''", "a number"),
    ({"lr": True}, "lr", "True", "a number"),
    ({"lr": None}, "lr", "None", "a number"),
    ({"bias": "x"}, "bias", "'x'", "a number"),
    ({"noise": ""}, "noise", "''", "a number"),
    ({"weights": ""}, "weights", "''", "1 to 16 numbers"),
    ({"weights": " , "}, "weights", "' , '", "1 to 16 numbers"),
    ({"weights": "1, two"}, "weights", "'1, two'", "1 to 16 numbers"),
    ({"weights": []}, "weights", "[]", "1 to 16 numbers"),
    ({"weights": 5}, "weights", "5", "1 to 16 numbers"),
    ({"weights": [1, True]}, "weights", "[1, True]", "1 to 16 numbers"),
    ({"shuffle": "maybe"}, "shuffle", "'maybe'", "true or false"),
    ({"shuffle": ""}, "shuffle", "''", "true or false"),
    ({"colour": "red"}, "colour", "'red'", "data_size, devices, epochs, features, layers, lr"),
]


@pytest.mark.parametrize("raw, field, value_text, allowed", FROM_MAPPING_ERRORS)
def test_from_mapping_rejects(raw, field, value_text, allowed):
    with pytest.raises(ConfigError) as info:
        FitConfig.from_mapping(raw)
    assert_names(info.value, field, value_text, allowed)


def test_from_mapping_converts_text():
    cfg = FitConfig.from_mapping(
        {
            "weights": "1, 2  -3.5",
            "bias": " -0.5 ",
            "noise": "0.25",
            "data_size": " 300 ",
            "batch_size": "1e2",
            "epochs": 3.0,
            "lr": "0.1",
            "optimizer": " SGD ",
            "shuffle": "off",
            "seed": "7",
            "devices": " Virtual:3 ",
        }
    )
    assert cfg == FitConfig(
        weights=(1.0, 2.0, -3.5),
        bias=-0.5,
        noise=0.25,
        data_size=300,
        batch_size=100,
        epochs=3,
        lr=0.1,
        optimizer="sgd",
        shuffle=False,
        seed=7,
        devices="virtual:3",
    )
    assert check(cfg) is cfg


@pytest.mark.parametrize(
    "text, value", [("1", True), ("yes", True), ("ON", True), ("0", False), ("No", False)]
)
def test_from_mapping_booleans(text, value):
    assert FitConfig.from_mapping({"shuffle": text}).shuffle is value


@pytest.mark.parametrize(
    "raw, field, value_text, allowed",
    [
        ({"lr": "nan"}, "lr", "nan", "greater than 0"),
        ({"bias": "-inf"}, "bias", "-inf", "a finite number"),
        ({"noise": "-1"}, "noise", "-1.0", "a finite number"),
        ({"batch_size": "300"}, "batch_size", "300", "an integer from 1 to 200 (the data size)"),
        ({"devices": ""}, "devices", "''", "virtual:K"),
        ({"weights": " ".join(["1"] * 17)}, "weights", "[1.0, 1.0", "1 to 16 numbers"),
    ],
)
def test_text_that_parses_but_does_not_validate(raw, field, value_text, allowed):
    cfg = FitConfig.from_mapping(raw)
    with pytest.raises(ConfigError) as info:
        check(cfg)
    assert_names(info.value, field, value_text, allowed)


def test_config_error_is_a_value_error_with_its_parts():
    err = ConfigError("lr", -1.0, "a finite number greater than 0")
    assert isinstance(err, ValueError)
    assert (err.field, err.value, err.allowed) == ("lr", -1.0, "a finite number greater than 0")
    assert str(err) == "lr: got -1.0; allowed: a finite number greater than 0"


@pytest.mark.parametrize(
    "override, allowed",
    [
        (
            {"data_size": 200, "batch_size": 100, "epochs": 1},
            "at most 1 step in all; 1 epoch x 2 batches is 2",
        ),
        (
            {"data_size": 200, "batch_size": 200, "epochs": 2},
            "at most 1 step in all; 2 epochs x 1 batch is 2",
        ),
    ],
)
def test_the_step_limit_counts_in_the_singular_where_there_is_one(override, allowed):
    with pytest.raises(ConfigError) as info:
        check(FitConfig(**override), Limits(max_steps=1))
    assert info.value.allowed == allowed


def test_the_memory_limit_says_1_row_with_1_feature():
    available = 2 * estimate_bytes(1, 1, 1)  # half of it: room for exactly one row of one feature
    assert max_data_size(1, available, 0.5, 2) == 1
    with pytest.raises(ConfigError) as info:
        check(FitConfig(weights=(1.0,), data_size=2, batch_size=2), Limits(memory_fraction=0.5), available)
    assert info.value.allowed == "at most 1 row with 1 feature here (needs about 0 MiB, 0 MiB may be used)"
