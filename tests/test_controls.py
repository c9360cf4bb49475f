"""fitcore.view.controls: presets, the pace, the link, and config values <-> widget values."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fitcore.core import i18n
from fitcore.core.config import ConfigError, FitConfig, validate
from fitcore.core.data import make_data
from fitcore.core.devices import GPU
from fitcore.core.parallel import chunk_sizes
from fitcore.protocols.registry import STRATEGIES
from fitcore.view import controls, link, status
from tests.view_helpers import run_to_end, trained_steps

# each strategy's presets by key, in the registry's order (a strategy with no entry here fails)
STRATEGY_PRESETS = {
    "dataparallel": [], "ddp": ["ddp", "uneven_shards", "ddp_tp"], "fsdp": ["fsdp", "fsdp_zero2"],
    "tp": ["tp"], "pp": ["pp"],
}  # fmt: skip
PAGE_PRESETS = ["tutorial", "uneven", "few_rows", "high_lr", "noisy"]  # DataParallel's, the page's own


def strategy_presets() -> list[str]:
    from fitcore.protocols import registry

    assert set(STRATEGY_PRESETS) == set(registry.NAMES)
    return [key for name in registry.NAMES for key in STRATEGY_PRESETS[name]]


def test_every_preset_is_valid_and_named_once():
    names = [p.name for p in controls.PRESETS]
    assert [p.key for p in controls.PRESETS] == PAGE_PRESETS + strategy_presets()
    assert len(set(names)) == len(names) == len(PAGE_PRESETS + strategy_presets())
    for p in controls.PRESETS:
        validate(p.config)
        assert controls.preset(p.name) is p


def test_tutorial_preset_is_the_tutorial_and_the_default():
    cfg = controls.preset("The tutorial").config
    assert (cfg.weights, cfg.bias, cfg.data_size, cfg.batch_size) == ((5.2, 9.6), 3.4, 200, 200)
    assert (cfg.optimizer, cfg.lr, cfg.epochs, cfg.devices) == ("adam", 0.5, 200, "virtual:2")
    assert controls.matching_preset(controls.defaults()).name == "The tutorial"


def test_split_presets_cut_the_batch_as_their_lessons_say():
    uneven = controls.preset("Uneven split").config
    assert (uneven.batch_size, uneven.devices) == (200, "virtual:3")
    assert chunk_sizes(200, 3) == (67, 67, 66)
    few = controls.preset("Fewer rows than devices").config
    assert (few.batch_size, few.devices) == (5, "virtual:8") and few.data_size >= 8
    assert chunk_sizes(5, 8) == (1, 1, 1, 1, 1)
    # and what the trainer really records agrees
    assert [r.rows for r in trained_steps(dataclasses.replace(uneven, epochs=1))[0].replicas] == [67, 67, 66]
    assert [r.rows for r in trained_steps(dataclasses.replace(few, epochs=1))[0].replicas] == [1] * 5


def test_too_high_a_learning_rate_really_diverges():
    snap = run_to_end(controls.preset("Too high a learning rate").config)
    assert snap.status == "diverged"
    assert 0 < snap.step < snap.total_steps
    assert "too high" in str(snap.message)
    # the same setup with a sensible rate converges, so it is the rate that diverges
    fine = run_to_end(dataclasses.replace(controls.preset("Too high a learning rate").config, lr=0.5))
    assert fine.status == "finished"


def test_noisy_preset_learns_least_squares_not_the_truth():
    cfg = controls.preset("Noisy data").config
    snap = run_to_end(cfg)
    assert snap.status == "finished"
    X, y = make_data(cfg)
    A = torch.cat([X.double(), torch.ones(len(X), 1, dtype=torch.float64)], 1)
    ref = torch.linalg.lstsq(A, y.double()).solution.view(-1).tolist()
    learned = list(snap.weights) + [snap.bias]
    true = list(cfg.weights) + [cfg.bias]
    assert learned == pytest.approx(ref, abs=2e-3)
    assert max(abs(a - b) for a, b in zip(learned, true)) > 0.1  # visibly not the true values


def test_matching_preset_needs_every_control_equal():
    values = controls.config_values(controls.preset("Uneven split").config)
    assert controls.matching_preset(values).name == "Uneven split"
    assert controls.matching_preset({**values, "seed": 1}) is None


@pytest.mark.parametrize(
    "cfg, pace",
    [
        (FitConfig(), "20"),
        (FitConfig(weights=(1.5, -2.0, 0.125), bias=-0.5, noise=0.3, devices="virtual:4"), "max"),
        (FitConfig(data_size=1000, batch_size=64, epochs=3, lr=0.01, optimizer="sgd", shuffle=False), "1"),
        (FitConfig(seed=2**40, weights=(1e-7,)), "200"),
        (FitConfig(strategy="ddp", workers=3, devices="cpu", data_size=10, batch_size=10), "max"),
        (FitConfig(strategy="ddp", workers=8, devices="virtual:2"), "5"),
    ],
)
def test_query_round_trip(cfg, pace):
    query = link.to_query(controls.config_values(cfg), pace)
    assert all(isinstance(v, str) for v in query.values())
    values, got_pace, errors = link.from_query(query)
    assert errors == []
    assert got_pace == pace
    assert values == controls.config_values(cfg)


def test_query_text():
    query = link.to_query(controls.config_values(FitConfig(devices="virtual:3", shuffle=False)), "max")
    assert query == {
        "weights": "5.2,9.6",
        "bias": "3.4",
        "noise": "0",
        "data_size": "200",
        "batch_size": "200",
        "epochs": "200",
        "lr": "0.5",
        "optimizer": "adam",
        "shuffle": "false",
        "seed": "0",
        "devices": "virtual:3",
        "strategy": "dataparallel",
        "workers": "2",
        "mesh": "",  # no mesh: the strategy's own dimension of `workers` ranks
        "reshard_after_forward": "true",
        "layers": "4",  # the pipeline's options, at their defaults
        "width": "0",
        "microbatches": "4",
        "schedule": "1f1b",
        "block_ms": "0",
        "slow_stage": "-1",
        "pace": "max",
    }


@pytest.mark.parametrize(
    "params, message",
    [
        ({"data_size": "abc"}, "data_size: got 'abc'; allowed: an integer"),
        ({"batch_size": "2.5"}, "batch_size: got '2.5'; allowed: an integer"),
        ({"lr": "inf"}, "lr: got 'inf'; allowed: a finite number"),
        ({"bias": "nan"}, "bias: got 'nan'; allowed: a finite number"),
        ({"weights": ""}, "weights: got ''; allowed: 1 to 16 numbers"),
        ({"weights": "1,x"}, "weights: got '1,x'; allowed: 1 to 16 numbers"),
        (
            {"weights": ",".join(["1"] * 33)},
            f"weights: got {','.join(['1'] * 33)!r}; allowed: 1 to 16 numbers",
        ),
        ({"optimizer": "rmsprop"}, "optimizer: got 'rmsprop'; allowed: adam or sgd"),
        ({"shuffle": "maybe"}, "shuffle: got 'maybe'; allowed: true or false"),
        ({"seed": str(2**60)}, f"seed: got '{2**60}'; allowed: an integer from -{2**53 - 1} to {2**53 - 1}"),
        (
            {"devices": "cpu"},
            "devices: got 'cpu'; allowed: virtual:K (K from 1 to 8) or cuda:i,j,..., "
            "or cpu with strategy " + " or ".join(s.name for s in STRATEGIES.values() if s.processes),
        ),
        ({"strategy": "ddp2"}, "strategy: got 'ddp2'; allowed: " + " or ".join(STRATEGIES)),
        ({"workers": "two"}, "workers: got 'two'; allowed: an integer"),
        (
            {"pace": "7"},
            "pace: got '7'; allowed: one of lesson1, lesson2, lesson3, lesson5, 1, 2, 5, 10, 20, 50, "
            "100, 200, max (steps per second; lessonN: N seconds a phase)",
        ),
    ],
)
def test_bad_query_values_are_reported_and_left_out(params, message):
    values, pace, errors = link.from_query({**params, "epochs": "7", "embed": "true"})
    assert [str(e) for e in errors] == [message]
    assert values == {"epochs": 7}  # the good one is kept, Streamlit's own `embed` is ignored
    assert pace is None


def test_cpu_devices_in_the_query_belong_to_ddp():
    """`cpu` is ddp's ranks on the CPU; DataParallel on the page runs on virtual devices or GPUs."""
    query = {"devices": "cpu", "strategy": "ddp", "workers": "3"}
    assert link.from_query(query) == ({"devices": "cpu", "strategy": "ddp", "workers": 3}, None, [])
    values, _, errors = link.from_query({**query, "strategy": "dataparallel"})
    assert values == {"strategy": "dataparallel", "workers": 3}  # the default devices stay
    assert [e.field for e in errors] == ["devices"]
    # a worker count out of range is a setup the controls can hold: validation reports it, naming the field
    values, _, errors = link.from_query({**query, "workers": "9"})
    assert errors == [] and values["workers"] == 9
    with pytest.raises(ConfigError) as exc:
        controls.config_from_controls({**controls.defaults(), **values})
    assert controls.error_text(exc.value) == (
        "Workers: got 9; allowed: an integer from 1 to 8 (and at most the data size)"
    )


def test_bad_device_in_query_names_what_this_machine_allows():
    _, _, errors = link.from_query({"devices": "virtual:9"}, gpus=[])
    assert [e.field for e in errors] == ["devices"]
    assert "virtual:K (K from 1 to 8)" in str(errors[0]) and "0 CUDA GPUs" in str(errors[0])


def test_query_keeps_what_only_validation_refuses():
    """A link with batch > data is a setup the controls can hold: validation, not the URL, reports it."""
    values, _, errors = link.from_query({"batch_size": "300", "data_size": "200"})
    assert errors == [] and values == {"batch_size": 300, "data_size": 200}
    with pytest.raises(ConfigError) as exc:
        controls.config_from_controls({**controls.defaults(), **values})
    assert str(exc.value) == "batch_size: got 300; allowed: an integer from 1 to 200 (the data size)"
    # the page names the field once, by the label beside the control
    assert controls.error_text(exc.value) == (
        "Batch size: got 300; allowed: an integer from 1 to 200 (the data size)"
    )


def test_workers_count_only_for_ddp():
    """DataParallel ignores `workers`: a different count is no difference and does not break a preset."""
    tutorial = controls.preset("The tutorial").config
    values = {**controls.config_values(tutorial), "workers": 5}
    assert controls.matching_preset(values).name == "The tutorial"
    assert status.config_differences(values, tutorial) == []
    ddp_values = {**values, "strategy": "ddp", "devices": "cpu"}
    assert controls.matching_preset(ddp_values) is None  # the DDP preset has 2 workers
    assert controls.matching_preset({**ddp_values, "workers": 2}).name == "DistributedDataParallel"
    assert status.config_differences(ddp_values, tutorial) == [
        "Devices: virtual:2 in the run, cpu in the controls",
        "Strategy: dataparallel in the run, ddp in the controls",
        "Workers: 2 in the run, 5 in the controls",
    ]


def test_lesson_pace_holds_each_phase_its_seconds():
    # DataParallel's 8 phases at 2 s each: one step every 16 s; DDP's 6 at 3 s: one every 18 s
    assert controls.parse_pace("lesson2") == 1 / 16
    assert controls.parse_pace("lesson3", "ddp") == 1 / 18
    assert controls.pace_choice(1 / 16) == "lesson2" and controls.pace_choice(1 / 30) == "lesson5"
    assert controls.pace_label("lesson2") == "lesson: each phase 2 s"
    values, pace, errors = link.from_query({"pace": "lesson5"})
    assert (pace, errors) == ("lesson5", [])


def test_a_lesson_script_from_the_link():
    keys = [p.key for p in controls.script_from_query({"script": "lesson"})[0]]
    assert keys == ["tutorial", "uneven", "few_rows", *strategy_presets()]
    mine = controls.script_from_query({"script": "ddp, tutorial"})[0]
    assert [p.key for p in mine] == ["ddp", "tutorial"]
    presets, errors = controls.script_from_query({"script": ["x", "ddp"]})  # a repeated one is refused
    assert presets == () and [e.field for e in errors] == ["script"]
    assert controls.script_from_query({}) == ((), [])
    for raw in ("", "nope", "tutorial,,x", ",".join(["ddp"] * (2 * len(controls.PRESETS) + 1))):
        presets, errors = controls.script_from_query({"script": raw})
        assert presets == () and [e.field for e in errors] == ["script"], raw


def test_pace_choices():
    assert controls.DEFAULT_PACE == "20" and controls.parse_pace("20") == 20.0
    assert controls.parse_pace("max") is None
    assert [controls.pace_label(c) for c in ("1", "5", "max")] == [
        "1 step/s",
        "5 steps/s",
        "as fast as possible",
    ]
    # a run at a lesson pace (FSDP's 7 phases at 2 s: a step every 14 s) says how long a step takes
    rate = controls.parse_pace("lesson2", "fsdp")
    assert rate == pytest.approx(1 / 14) and controls.rate_text(rate) == "1 step every 14 s"
    assert controls.rate_text(0.96) == "1 step/s" and controls.rate_text(0.5) == "1 step every 2 s"


# ---------------------------------------------------------------------------------------------------------
# Config values <-> widget values: what app.py copies to and from the session.

GPUS = [GPU(0, "Test GPU", 16 * 2**30), GPU(1, "Test GPU", 16 * 2**30)]


def fresh_widgets() -> dict:
    """The widgets of a fresh page: the defaults' values, and no GPU selected yet."""
    return {"gpus": [], **controls.widget_values(controls.defaults(), GPUS)}


@pytest.mark.parametrize(
    "spec, widgets",
    [
        ("virtual:3", {"device_mode": "virtual", "virtual_devices": 3, "emulate_on": "cpu"}),
        ("virtual:3@cuda:0", {"device_mode": "virtual", "virtual_devices": 3, "emulate_on": "cuda:0"}),
        ("virtual:8@cuda:1", {"device_mode": "virtual", "virtual_devices": 8, "emulate_on": "cuda:1"}),
        ("cpu", {"device_mode": "virtual"}),  # the processes' count is the workers widget's
        ("cuda", {"device_mode": "cuda", "gpus": [0, 1]}),  # every GPU
        ("cuda:0,1", {"device_mode": "cuda", "gpus": [0, 1]}),
        ("cuda:1", {"device_mode": "cuda", "gpus": [1]}),
    ],
)
def test_device_widgets_of_each_spec(spec, widgets):
    assert controls.device_widgets(spec, GPUS) == widgets


@pytest.mark.parametrize(
    "cfg",
    [
        FitConfig(),
        FitConfig(devices="virtual:3", weights=(1.5, -2.0, 0.125), bias=-0.5, noise=0.25, shuffle=False),
        FitConfig(devices="virtual:1", data_size=9, batch_size=2, epochs=3, lr=0.01, optimizer="sgd"),
        FitConfig(devices="virtual:3@cuda:0"),
        FitConfig(devices="cuda:0,1"),
        FitConfig(devices="cuda:1", seed=2**40),
        FitConfig(strategy="ddp", devices="cpu", workers=3),
        FitConfig(strategy="ddp", devices="cpu", workers=1, data_size=10, batch_size=10),
        FitConfig(strategy="ddp", devices="cuda:0,1", workers=2),
    ],
)
def test_config_to_widgets_and_back_is_the_same_config(cfg):
    values = controls.config_values(validate(cfg, gpus=GPUS))
    widgets = {**fresh_widgets(), **controls.widget_values(values, GPUS)}
    assert controls.control_values(widgets) == values
    # and through the link: values -> link -> values -> widgets -> values -> the same link
    query = link.to_query(values, "5")
    linked, pace, errors = link.from_query(query, GPUS)
    assert (linked, pace, errors) == (values, "5", [])
    widgets = {**fresh_widgets(), **controls.widget_values(linked, GPUS)}
    assert link.to_query(controls.control_values(widgets), "5") == query


def test_every_gpu_reads_back_as_each_gpu_listed():
    widgets = {**fresh_widgets(), **controls.widget_values({"devices": "cuda"}, GPUS)}
    assert controls.control_values(widgets)["devices"] == "cuda:0,1"


def test_switching_strategy_keeps_the_other_strategys_devices():
    """`cpu` means processes on the CPU: switching to DataParallel and back finds each one's devices."""
    widgets = {**fresh_widgets(), **controls.widget_values({"devices": "virtual:3@cuda:1"}, GPUS)}
    widgets["strategy"], widgets["workers"] = "ddp", 4
    assert (controls.devices_spec(widgets), controls.workers_value(widgets)) == ("cpu", 4)
    widgets["strategy"] = "dataparallel"
    assert controls.devices_spec(widgets) == "virtual:3@cuda:1"


def test_processes_on_gpus_are_one_per_selected_gpu_whatever_the_workers_widget():
    widgets = {**fresh_widgets(), "strategy": "ddp", "workers": 5, "device_mode": "cuda", "gpus": [1, 0]}
    assert (controls.devices_spec(widgets), controls.workers_value(widgets)) == ("cuda:0,1", 2)
    widgets["strategy"] = "dataparallel"  # DataParallel ignores the count: the widget's is kept
    assert (controls.devices_spec(widgets), controls.workers_value(widgets)) == ("cuda:0,1", 5)


def test_weights_widgets_hold_floats_one_per_feature():
    widgets = controls.widget_values({"weights": (1, 2.5, -3), "bias": 2, "lr": 1, "noise": 0})
    assert widgets == {
        "n_features": 3, "weight_0": 1.0, "weight_1": 2.5, "weight_2": -3.0, "bias": 2.0, "lr": 1.0,
        "noise": 0.0,
    }  # fmt: skip
    assert all(isinstance(v, float) for k, v in widgets.items() if k != "n_features")
    # a widget left over from more features is not read
    more = {**fresh_widgets(), **widgets, "weight_3": 7.0}
    assert controls.control_values(more)["weights"] == (1.0, 2.5, -3.0)


# ---------------------------------------------------------------------------------------------------------
# The teacher's link: ?hide=, ?lock=, ?presenter=, ?ask=.


def test_classroom_parameters_parse_in_the_controls_order():
    room, errors = link.classroom_from_query(
        {"hide": "devices, weights", "lock": "batch_size,pace", "presenter": "1", "ask": "true"}
    )
    assert errors == []
    assert room == link.Classroom(("weights", "devices"), ("batch_size", "pace"), True, True)
    assert room.hidden("devices") and not room.hidden("bias")
    assert room.locked("devices") and room.locked("pace") and not room.locked("seed")
    assert room.pinned == ("weights", "batch_size", "devices", "pace")
    assert link.classroom_from_query({}) == (link.Classroom(), [])
    assert link.classroom_from_query({"hide": "", "ask": "0"}) == (link.Classroom(), [])


LINK_ROWS = [
    # (the link's parameters, the values used, the error lines): used as given, or refused with its line
    ({"lang": ["zh", "en"]}, {}, ["lang: got 'lang=zh&lang=en'; allowed: one value (the link gives this "
                                  "setting 2 values)"]),
    ({"lang": ["zh", "zh"]}, {"lang": "zh"}, []),
    ({"weights": "1,,2"}, {}, ["weights: got '1,,2'; allowed: 1 to 16 numbers"]),
    ({"weights": "1, 2 3"}, {"weights": (1.0, 2.0, 3.0)}, []),
    ({"batch_size": "9" * 17}, {}, [f"batch_size: got '{'9' * 17}'; allowed: an integer from 1 to 200 (the "
                                    "data size)"]),
    ({"workers": "-" + "9" * 17}, {}, [f"workers: got '-{'9' * 17}'; allowed: an integer from 1 to 8 (and "
                                       "at most the data size)"]),
    ({"epochs": "x" * 10_000}, {}, [f"epochs: got '{'x' * 71}… (10000 characters in all); allowed: an "
                                    "integer"]),
    # workers: no control shows DataParallel's count, so one that no run takes is refused, not kept unseen
    ({"workers": "-1"}, {},
     ["workers: got '-1'; allowed: an integer from 1 to 8 (and at most the data size)"]),
    ({"workers": "0", "strategy": "dataparallel"}, {"strategy": "dataparallel"},
     ["workers: got '0'; allowed: an integer from 1 to 8 (and at most the data size)"]),
    ({"workers": "3", "strategy": "dataparallel"}, {"workers": 3, "strategy": "dataparallel"}, []),
    # ... DDP's control shows it, as given: validation refuses it there (test_app)
    ({"workers": "-1", "strategy": "ddp"}, {"workers": -1, "strategy": "ddp"}, []),
    ({"shuffle": "yes"}, {"shuffle": True}, []),
    ({"shuffle": "maybe"}, {}, ["shuffle: got 'maybe'; allowed: true or false"]),
    ({"shuffle": ""}, {}, ["shuffle: got ''; allowed: true or false"]),
]  # fmt: skip


@pytest.mark.parametrize("params, values, lines", LINK_ROWS)
def test_a_link_value_is_used_as_given_or_refused_with_one_short_line(params, values, lines):
    got, _, errors = link.from_query(params)
    assert (got, [str(e) for e in errors]) == (values, lines)


def test_processes_on_gpus_in_the_link_are_one_per_gpu_or_refused():
    """The page runs one process per selected GPU: a link's other count is refused, not replaced."""
    query = {"strategy": "ddp", "devices": "cuda:0,1"}
    assert link.from_query({**query, "workers": "2"}, GPUS)[0]["workers"] == 2
    values, _, errors = link.from_query({**query, "workers": "3"}, GPUS)
    assert "workers" not in values and values["devices"] == "cuda:0,1"
    assert [str(e) for e in errors] == [
        "workers: got '3'; allowed: 2: one process per GPU in devices cuda:0,1"
    ]
    # the GPU control lists the GPUs in order: cuda:1,0 (DataParallel's outputs on GPU 1) is refused
    values, _, errors = link.from_query({"devices": "cuda:1,0"}, GPUS)
    assert "devices" not in values and [str(e) for e in errors] == [
        "devices: got 'cuda:1,0'; allowed: the GPUs in increasing order, as the page lists them (cuda:0,1)"
    ]
    # DataParallel does not use the count: the page keeps it for a switch to DDP
    values, _, errors = link.from_query({**query, "strategy": "dataparallel", "workers": "3"}, GPUS)
    assert (values["workers"], errors) == (3, [])


@pytest.mark.parametrize(
    "raw, ask", [("yes", True), ("on", True), ("1", True), ("No", False), ("false", False), ("0", False)]
)
def test_a_classroom_switch_is_used_as_given(raw, ask):
    room, errors = link.classroom_from_query({"ask": raw, "presenter": raw})
    assert (room.ask, room.presenter, errors) == (ask, ask, [])


def test_a_control_both_hidden_and_locked_is_refused():
    room, errors = link.classroom_from_query({"hide": "seed", "lock": "seed,bias"})
    assert room == link.Classroom(("seed",), ("bias",))
    assert [str(e) for e in errors] == [
        "lock: got 'seed,bias'; allowed: names that hide= does not name too (seed: hidden or locked, not "
        "both)"
    ]
    _, errors = link.classroom_from_query({"lock": ["bias", "seed"]})
    assert [str(e) for e in errors] == [
        "lock: got 'lock=bias&lock=seed'; allowed: one value (the link gives this setting 2 values)"
    ]


@pytest.mark.parametrize(
    "params, field, value, allowed",
    [
        ({"hide": "bias,colour"}, "hide", "bias,colour", "comma-separated control names from: weights, bias"),
        ({"lock": "Batch size"}, "lock", "Batch size", "comma-separated control names from: weights, bias"),
        ({"presenter": "big"}, "presenter", "big", "1 or 0 (or true/false, on/off, yes/no)"),
        ({"ask": "2"}, "ask", "2", "1 or 0"),
        ({"ask": ""}, "ask", "", "1 or 0"),  # empty is refused, not read as off
        ({"presenter": "maybe"}, "presenter", "maybe", "1 or 0"),
    ],
)
def test_bad_classroom_parameters_name_the_parameter_the_value_and_what_is_allowed(
    params, field, value, allowed
):
    room, errors = link.classroom_from_query({**params, "lock": params.get("lock", "seed")})
    (error,) = errors
    assert (error.field, error.value) == (field, value)
    assert error.allowed.startswith(allowed)
    assert controls.error_text(error).startswith(f"{field}: got {value!r}; allowed: ")
    tail = ("devices, strategy, workers, mesh, reshard_after_forward, layers, width, microbatches, schedule, "
            "block_ms, slow_stage, pace, preset")
    assert error.allowed.endswith(tail) or field in ("presenter", "ask")
    if field != "lock":
        assert room.lock == ("seed",)  # the good parameters still apply


def test_classroom_error_in_chinese():
    with i18n.using("zh"):
        (error,) = link.classroom_from_query({"hide": "x"})[1]
    assert error.allowed.startswith("以逗号分隔的控件名，可选：weights, bias")


def test_the_link_keeps_the_classroom_and_reads_back_the_same():
    values = controls.config_values(FitConfig(devices="virtual:3"))
    room = link.Classroom(hide=("strategy", "preset"), lock=("batch_size", "devices"), ask=True)
    query = link.to_query(values, "5", classroom=room)
    assert query["hide"] == "strategy,preset" and query["lock"] == "batch_size,devices"
    assert query["ask"] == "1" and "presenter" not in query
    assert link.classroom_from_query(query) == (room, [])
    read, pace, errors = link.from_query(query)
    assert (read, pace, errors) == (values, "5", [])
    # a plain page's link has none of them
    plain = link.to_query(values, "5", classroom=link.Classroom())
    assert not set(plain) & set(link.CLASSROOM_PARAMS)
    assert link.to_query(values, "5") == link.to_query(values, "5", classroom=link.Classroom())


def test_a_locked_name_that_is_also_hidden_is_written_once():
    room = link.Classroom(hide=("bias",), lock=("bias", "seed"))
    assert link.classroom_query(room) == {"hide": "bias", "lock": "seed"}
    assert link.Classroom(hide=("bias",), lock=("bias",)).pinned == ("bias",)
    assert link.classroom_query(link.Classroom(hide=("bias",), lock=("bias",))) == {"hide": "bias"}


@pytest.mark.parametrize(
    "key, name",
    [("n_features", "weights"), ("weight_3", "weights"), ("virtual_devices", "devices"), ("gpus", "devices"),
     ("emulate_on", "devices"), ("device_mode", "devices"), ("batch_size", "batch_size"), ("pace", "pace"),
     ("preset", "preset"), ("workers", "workers"), ("start", None), ("smoothing", None), (None, None)],
)  # fmt: skip
def test_every_widget_belongs_to_its_control(key, name):
    assert link.control_of(key) == name
