"""The equivalence lab: DataParallel matches one device always, DDP with even shards and a mean loss."""

from __future__ import annotations

import json
import math

import pytest

from fitcore.cli import main
from fitcore.core.config import FitConfig, validate
from fitcore.core.devices import parse_devices
from fitcore.kit.equivalence import TOL, Toggles, first_divergent, schedule
from fitcore.kit.labmath import train_all
from fitcore.lab.compare import run, same_as_one_device, verdict
from fitcore.protocols import registry

# small and quick: 20 epochs of 4 batches, SGD so that a constant scale of the gradient shows
SMALL = FitConfig(data_size=24, batch_size=6, epochs=20, optimizer="sgd", lr=0.05, devices="virtual:2")


def lab(toggles: Toggles = Toggles(), **changes) -> dict:
    result = run(validate(FitConfig(**{**SMALL.__dict__, **changes})), toggles)
    return {r["strategy"]: r for r in result["results"]} | {"config": result["config"]}


TOGGLE_CASES = [
    Toggles(),
    Toggles(loss_reduction="sum"),
    Toggles(drop_last=True),
    Toggles(set_epoch=False),
    Toggles(per_rank_batch=True),
    Toggles(scale_lr=True),
]


@pytest.mark.parametrize("k", [1, 2, 3, 8])
@pytest.mark.parametrize("toggles", TOGGLE_CASES, ids=lambda t: str(t.__dict__))
def test_dataparallel_matches_one_device_on_every_step(k, toggles):
    # 25 rows: uneven on 2, 3 and 8 devices, so the padding is in play too
    res = lab(toggles, devices=f"virtual:{k}", data_size=25, lr=0.01, epochs=6)
    dp = res["dataparallel"]
    assert dp["devices"] == k
    assert len(dp["per_step"]) == res["config"]["steps"] > 0
    assert max(dp["per_step"]) <= TOL and dp["first_divergent_step"] is None
    assert dp["max_abs_diff"] == max(dp["per_step"])


@pytest.mark.parametrize(
    ("devices", "rows", "optimizer", "lr"),
    [("virtual:2", 24, "sgd", 0.05), ("virtual:3", 24, "sgd", 0.05), ("virtual:8", 24, "adam", 0.5)],
)
def test_ddp_matches_with_even_shards_and_a_mean_loss(devices, rows, optimizer, lr):
    res = lab(devices=devices, data_size=rows, optimizer=optimizer, lr=lr)
    assert res["ddp"]["first_divergent_step"] is None and res["ddp"]["max_abs_diff"] <= TOL
    assert res["ddp"]["causes"] == []
    # and the fit has moved: equal because both learned the same, not because neither moved
    finals = res["config"]["final_parameters"]
    assert max(abs(a - b) for a, b in zip(finals["reference"], [5.2, 9.6, 3.4])) < 1.0


def test_uneven_shards_pad_and_ddp_differs_from_the_first_padded_step():
    # 25 rows on 2 ranks: 13 each, row 26 is the order's first row again
    res = lab(data_size=25)
    ddp = res["ddp"]
    assert ddp["first_divergent_step"] is not None and ddp["max_abs_diff"] > 1e-3
    assert any("padding" in c for c in ddp["causes"])
    steps = list(schedule(validate(FitConfig(**{**SMALL.__dict__, "data_size": 25})), 2, Toggles()))
    padded = [i for i, s in enumerate(steps, 1) if s.padded]
    assert padded and all(steps[i - 1].padded == 1 for i in padded)
    assert ddp["first_divergent_step"] >= padded[0]
    assert max(ddp["per_step"][: padded[0] - 1], default=0.0) <= TOL  # equal until the padding


def test_the_opening_sentence_answers_same_or_not_and_why():
    same = run(validate(SMALL))
    worst = max(r["max_abs_diff"] for r in same["results"])
    assert worst <= TOL and same_as_one_device(same)
    assert verdict(same) == f"Same model as one device: largest difference {worst:.2g} (under 1e-05)"
    padded = run(validate(FitConfig(**{**SMALL.__dict__, "data_size": 25})))
    ddp = next(r for r in padded["results"] if r["strategy"] == "ddp")
    assert not same_as_one_device(padded)
    assert verdict(padded) == (
        f"Not the same: ddp differs by {ddp['max_abs_diff']:.2g} from step {ddp['first_divergent_step']} "
        f"(over 1e-05), because {ddp['causes'][-1].rstrip('.')}"
    )
    assert "padding" in ddp["causes"][-1]


def test_drop_last_removes_the_padding_and_is_measured_against_itself():
    res = lab(Toggles(drop_last=True), data_size=25)
    assert res["ddp"]["first_divergent_step"] is None  # no padding: DDP matches again
    for name in ("dataparallel", "ddp"):
        (cause,) = res[name]["causes"]
        assert "drop_last" in cause and "the same strategy without drop_last" in cause
        assert "keeps 24 of 25 rows" in cause
    steps = list(
        schedule(validate(FitConfig(**{**SMALL.__dict__, "data_size": 25})), 2, Toggles(drop_last=True))
    )
    for epoch in range(1, SMALL.epochs + 1):
        rows = [r for s in steps if s.epoch == epoch for b in s.batches for r in b]
        assert len(rows) == len(set(rows)) == 24  # one row unseen each epoch, none twice
    assert all(s.padded == 0 for s in steps)


def test_a_summed_loss_takes_k_times_smaller_ddp_steps_with_sgd():
    sgd = lab(Toggles(loss_reduction="sum"), lr=0.005)
    assert sgd["ddp"]["first_divergent_step"] == 1 and sgd["ddp"]["max_abs_diff"] > 0.1
    # smaller steps still head to the same answer: the difference ends ten times below its largest
    assert sgd["ddp"]["final_abs_diff"] == sgd["ddp"]["per_step"][-1] < sgd["ddp"]["max_abs_diff"] / 5
    (cause,) = sgd["ddp"]["causes"]
    assert "sum" in cause and "2 times smaller" in cause
    # exactly K times: DDP with lr x K under sum is one device under sum
    both = lab(Toggles(loss_reduction="sum", scale_lr=True), lr=0.005)
    assert both["ddp"]["max_abs_diff"] <= TOL and both["ddp"]["causes"] == []


def test_adam_hides_the_constant_scale_of_a_summed_loss():
    sgd = lab(Toggles(loss_reduction="sum"), lr=0.005)["ddp"]["max_abs_diff"]
    adam = lab(Toggles(loss_reduction="sum"), optimizer="adam", lr=0.1)
    # Adam divides the gradient by its running RMS: a constant 1/K cancels but for eps
    assert adam["ddp"]["max_abs_diff"] < 1e-4 and sgd > 1000 * adam["ddp"]["max_abs_diff"]


def test_per_rank_batch_and_scale_lr_change_ddp_and_not_dataparallel():
    for toggles, word in ((Toggles(per_rank_batch=True), "batch"), (Toggles(scale_lr=True), "lr")):
        res = lab(toggles)
        assert res["dataparallel"]["first_divergent_step"] is None and res["dataparallel"]["causes"] == []
        assert res["ddp"]["first_divergent_step"] == 1
        (cause,) = res["ddp"]["causes"]
        assert word in cause and "without" in cause
    res = lab(Toggles(per_rank_batch=True))
    assert res["config"]["rows_per_rank_step"] == 6 and res["config"]["steps"] == 20 * 2  # 12 rows a rank


def _epoch_orders(steps) -> set:
    """Each epoch's rows, rank by rank and step by step, as something a set can hold."""
    orders: dict[int, list] = {}
    for s in steps:
        orders.setdefault(s.epoch, []).append(tuple(tuple(rows) for rows in s.ranks))
    return {tuple(v) for v in orders.values()}


def test_forgotten_set_epoch_repeats_the_order_and_changes_every_strategy_alike():
    cfg = validate(SMALL)
    assert len(_epoch_orders(schedule(cfg, 2, Toggles(set_epoch=False)))) == 1  # every epoch the same
    assert len(_epoch_orders(schedule(cfg, 2, Toggles()))) == cfg.epochs
    res = lab(Toggles(set_epoch=False))
    for name in ("dataparallel", "ddp"):
        assert res[name]["first_divergent_step"] is None  # every strategy sees the same rows
        (cause,) = res[name]["causes"]
        assert "set_epoch" in cause and "same strategy with set_epoch called" in cause
        assert float(cause.rsplit("differ by ", 1)[1]) > 1e-4  # measured, and not nothing


def test_the_reference_takes_the_ranks_rows_in_rank_order_without_padding():
    cfg = validate(FitConfig(data_size=10, batch_size=6, epochs=2, devices="virtual:3"))
    steps = list(schedule(cfg, 3, Toggles()))
    for s in steps:
        (batch,) = s.batches
        held = [r for rows in s.ranks for r in rows]  # rank 0's rows, then rank 1's, ...
        assert len(batch) == len(held) - s.padded
        it = iter(held)
        assert all(r in it for r in batch)  # in the ranks' order: a subsequence of what they hold
    epoch1 = [s for s in steps if s.epoch == 1]
    seen = [r for s in epoch1 for r in s.batches[0]]
    assert sorted(seen) == list(range(10))  # each row once: the ranks' 12 rows less 2 of padding
    assert sum(s.padded for s in epoch1) == 2


def test_first_divergent_step():
    assert first_divergent([0.0, 1e-6, 2e-5, 0.0]) == 3
    assert first_divergent([0.0, TOL]) is None
    assert first_divergent([]) is None


def test_json_shape_from_the_command_line(capsys):
    code = main(["compare", "--json", "--devices", "virtual:3", "--epochs", "3", "--optimizer", "sgd"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"config", "results"}
    assert [r["strategy"] for r in out["results"]] == list(
        registry.NAMES
    )  # a column each, registry's order
    for r in out["results"]:
        shape = {
            "strategy",
            "devices",
            "max_abs_diff",
            "first_divergent_step",
            "final_abs_diff",
            "causes",
            "per_step",
            "status",
        }
        assert r["final_abs_diff"] == r["per_step"][-1] and r["status"] == "finished"
        if r["strategy"] == "ddp":  # DDP's one all-reduce a step: (W, b) as float32, 3 * 4 bytes
            shape |= {"allreduce_calls", "allreduce_bytes", "allreduce_measured"}
            assert (r["allreduce_calls"], r["allreduce_bytes"], r["allreduce_measured"]) == (1, 12, False)
        assert set(r) == shape
        assert r["devices"] == 3 and len(r["per_step"]) == 3
        assert all(isinstance(v, float) and math.isfinite(v) for v in r["per_step"])
        assert r["first_divergent_step"] is None or isinstance(r["first_divergent_step"], int)
        assert all(isinstance(c, str) for c in r["causes"])
    # 200 rows on 3 ranks: 2 padded rows an epoch
    assert any("padding" in c for c in out["results"][1]["causes"])
    assert (
        "simulated" in out["config"]["engines"]["ddp"]
        and "emulated" in out["config"]["engines"]["dataparallel"]
    )


def test_the_table_names_each_engine(capsys):
    assert main(["compare", "--epochs", "2"]) == 0
    text = capsys.readouterr().out
    assert "dataparallel" in text and "emulated" in text and "simulated" in text
    assert text.splitlines()[1].startswith("Same model as one device: largest difference ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--loss-reduction", "avg"], "--loss-reduction: got 'avg'; allowed: mean or sum"),
        (["--batch-size", "0"], "--batch-size: got 0; allowed: an integer from 1 to 200"),
        (["--devices", "virtual:9"], "--devices: got 'virtual:9'"),
        (
            ["--optimizer", "sgd", "--lr", "0.1", "--loss-reduction", "sum"],
            "--lr: got 0.1; allowed: a smaller",
        ),
    ],
)
def test_bad_values_exit_2_with_one_line(argv, message, capsys):
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fitcore compare: error: ") and message in err and err.count("\n") == 1


def test_bad_flags_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--drop-last=yes"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "fitcore compare: error: argument --drop-last" in err and err.count("\n") == 1


def test_toggles_from_a_form():
    assert Toggles.from_mapping({"loss_reduction": "SUM", "drop_last": "true"}) == Toggles("sum", True)
    with pytest.raises(ValueError, match="loss_reduction: got 'max'"):
        Toggles.from_mapping({"loss_reduction": "max"})
    with pytest.raises(ValueError, match="scale_lr: got 'maybe'"):
        Toggles.from_mapping({"scale_lr": "maybe"})


@pytest.mark.slow  # spawns ranks
def test_simulated_ddp_is_torchs_ddp_on_gloo():
    """The lab's DDP arithmetic in one process against the engine's launcher running DDP on 2 gloo ranks."""
    from fitcore.engine.launcher import launch

    # 11 rows on 2 ranks: the padding is in play, so the simulation's duplicates are checked too
    cfg = validate(FitConfig(data_size=11, batch_size=4, epochs=4, strategy="ddp", workers=2, devices="cpu"))
    ended = launch(cfg)
    assert ended.status == "finished", ended.message
    trained = train_all(cfg, parse_devices("virtual:2"), Toggles(), ("ddp",))
    real = [*ended.weights, ended.bias]
    assert len(trained.steps) == ended.steps == 12
    assert max(abs(a - b) for a, b in zip(trained.finals["ddp"], real)) <= 1e-6
    # and it did differ from one device: the padding
    assert max(trained.per_step["ddp"]) > TOL


def test_a_page_bounds_the_steps_it_compares():
    cfg = validate(SMALL)  # 20 epochs of 4 steps: 12 rows a rank, 3 a step
    message = "epochs: got 20; allowed: at most 79 steps to compare; these are 80"
    with pytest.raises(ValueError, match=message):
        run(cfg, Toggles(), max_steps=79)
    assert run(cfg, Toggles(), max_steps=80)["config"]["steps"] == 80


@pytest.mark.slow  # spawns ranks
def test_simulated_fsdp_is_torchs_fully_shard_on_gloo():
    """The lab's FSDP column against the real fully_shard run on 2 gloo ranks, step by step: even shards and
    a mean loss meet one device to 1e-5, uneven ones (padding) carry DDP's difference, measured."""
    from fitcore.core.events import Step
    from fitcore.engine.launcher import launch

    for rows, differs in ((12, False), (11, True)):
        cfg = validate(FitConfig(weights=(5.2, 9.6, -1.0), data_size=rows, batch_size=4, epochs=4,
                                 strategy="fsdp", workers=2, devices="cpu"))  # fmt: skip
        events = []
        ended = launch(cfg, events.append)
        steps = [e for e in events if isinstance(e, Step)]
        assert ended.status == "finished", ended.message
        plan = parse_devices("virtual:2")
        trained = train_all(cfg, plan, Toggles(), ("fsdp", "ddp"))
        assert len(trained.steps) == ended.steps == len(steps) == 4 * math.ceil(rows / 2 / 2)
        real = [*ended.weights, ended.bias]
        assert max(abs(a - b) for a, b in zip(trained.finals["fsdp"], real)) <= 1e-5
        assert trained.finals["fsdp"] == trained.finals["ddp"]  # one arithmetic, two columns
        assert (max(trained.per_step["fsdp"]) > TOL) is differs
    # the lab's table has the column, within 1e-5 on even shards
    result = run(validate(FitConfig(weights=(5.2, 9.6, -1.0), data_size=12, batch_size=4, epochs=4,
                                    devices="virtual:2")))  # fmt: skip
    fsdp = next(r for r in result["results"] if r["strategy"] == "fsdp")
    assert fsdp["max_abs_diff"] <= TOL and fsdp["first_divergent_step"] is None and fsdp["causes"] == []
