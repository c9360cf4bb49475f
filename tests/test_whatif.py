"""What-if scaling: the formulas against hand-worked cases, the table's labels, the command line."""

from __future__ import annotations

import json

import pytest

from fitcore.cli import main
from fitcore.core import projection
from fitcore.core.config import FitConfig, check
from fitcore.core.links import LINKS, Link
from fitcore.lab import whatif
from fitcore.lab.whatif import (
    PROJECTED,
    Measured,
    comm_bytes_per_device,
    comm_seconds,
    compute_seconds,
    latency_steps,
    memory_per_device,
    table,
)

SEVEN_B = 7e9
# a measured step made up for the formulas: 1 ms of compute, 100 rows a device, 16-byte rows, 3 parameters
STEP = Measured(1e-3, 100, 16, 2, 3, "test")


@pytest.mark.parametrize(
    ("strategy", "k", "expected"),
    [
        # ZeRO paper, 7.5B example style: 16 bytes/param, partitioned by stage (hand-worked for 7e9 params)
        ("ddp", 8, 16 * SEVEN_B),  # 112 GB: every rank the whole state
        ("dataparallel", 8, 16 * SEVEN_B),  # device 0 holds it all
        ("zero1", 8, 2 * SEVEN_B + 2 * SEVEN_B + 12 * SEVEN_B / 8),  # 38.5 GB
        ("zero2", 8, 2 * SEVEN_B + 14 * SEVEN_B / 8),  # 26.25 GB
        ("zero3", 8, 16 * SEVEN_B / 8),  # 14 GB
        ("zero3", 64, 1.75e9),
        ("zero3", 1, 112e9),
    ],
)
def test_memory_per_device(strategy, k, expected):
    assert memory_per_device(strategy, SEVEN_B, k) == pytest.approx(expected, rel=1e-12)


def test_zero3_for_seven_billion_is_16_bytes_a_parameter_over_k():
    for k in (2, 8, 64, 256, 1024):
        assert memory_per_device("zero3", SEVEN_B, k) == pytest.approx(16 * SEVEN_B / k, rel=1e-12)
    assert memory_per_device("zero3", SEVEN_B, 8) == pytest.approx(14e9, rel=1e-12)


@pytest.mark.parametrize(
    ("strategy", "k", "expected"),
    [
        ("ddp", 8, 2 * 7 / 8 * SEVEN_B * 2),  # ring: 2(K-1)/K of the fp16 gradients: 24.5 GB
        ("ddp", 2, SEVEN_B * 2),  # 2(1)/2 = 1: each device sends the gradients once
        ("zero1", 8, 24.5e9),
        ("zero2", 8, 24.5e9),
        ("zero3", 8, 3 * 7 / 8 * SEVEN_B * 2),  # 36.75 GB: 1.5 x DDP's
        ("dataparallel", 8, 2 * 7 * SEVEN_B * 2),  # 7 replicas' parameters out and gradients in
        ("ddp", 1, 0.0),
    ],
)
def test_bytes_per_device(strategy, k, expected):
    assert comm_bytes_per_device(strategy, SEVEN_B, k) == pytest.approx(expected, rel=1e-12)


SEVEN_HALF_B = 7.5e9  # the ZeRO paper's example model


@pytest.mark.parametrize(
    ("optimizer", "precision", "per_param", "wire"),
    [
        ("adam", "mixed", (2, 2, 12), 2),  # the ZeRO paper: fp16 p and g, fp32 master + momentum + variance
        ("sgd", "mixed", (2, 2, 4), 2),  # plain SGD keeps no state; mixed precision its fp32 master copy
        ("adam", "fp32", (4, 4, 8), 4),  # momentum and variance; the parameters are their own master
        ("sgd", "fp32", (4, 4, 0), 4),
    ],
)
def test_optimizer_and_precision_change_the_bytes_per_parameter(optimizer, precision, per_param, wire):
    state = projection.state_bytes(optimizer, precision)
    assert (state.params, state.grads, state.optimizer, state.wire) == (*per_param, wire)
    p, g, o = (b * SEVEN_HALF_B for b in per_param)
    k = 64
    # each row's formula, the ZeRO paper's (section 3.1), with this optimizer's and precision's bytes
    expected = {"ddp": p + g + o, "dataparallel": p + g + o, "zero1": p + g + o / k, "zero2": p + (g + o) / k,
                "zero3": (p + g + o) / k, "tp": (p + g + o) / k}  # fmt: skip
    for strategy, bytes_ in expected.items():
        assert memory_per_device(strategy, SEVEN_HALF_B, k, state) == pytest.approx(bytes_, rel=1e-12)
    ring = 2 * (k - 1) / k * SEVEN_HALF_B * wire
    assert comm_bytes_per_device("ddp", SEVEN_HALF_B, k, state=state) == pytest.approx(ring, rel=1e-12)


def test_ddp_on_the_zero_papers_model_needs_60_gb_with_sgd_in_fp32_and_120_with_mixed_adam():
    sgd = memory_per_device("ddp", SEVEN_HALF_B, 8, projection.state_bytes("sgd", "fp32"))
    adam = memory_per_device("ddp", SEVEN_HALF_B, 8, projection.state_bytes("adam", "mixed"))
    assert (sgd, adam) == (60e9, 120e9) and projection.MIXED_ADAM.total == projection.STATE_BYTES == 16


def test_the_command_line_honours_optimizer_and_precision(capsys):
    argv = ["whatif", "--json", "--epochs", "2", "--params", "7.5e9", "--counts", "8"]
    assert main([*argv, "--optimizer", "sgd", "--precision", "fp32"]) == 0
    out = json.loads(capsys.readouterr().out)
    a = out["assumptions"]
    assert (a["optimizer"], a["precision"], a["wire_bytes_per_element"]) == ("sgd", "fp32", 4)
    assert a["bytes_per_param"] == {"params": 4, "grads": 4, "optimizer": 0}
    ddp = [r for r in out["rows"] if r["strategy"] == "ddp"][0]
    assert ddp["memory_per_device_bytes"] == 60e9
    assert ddp["comm_bytes_per_device"] == pytest.approx(2 * 7 / 8 * 7.5e9 * 4)
    assert main(argv) == 0  # the defaults: mixed-precision Adam, as the paper
    out = json.loads(capsys.readouterr().out)
    ddp = [r for r in out["rows"] if r["strategy"] == "ddp"][0]
    assert ddp["memory_per_device_bytes"] == 120e9 and out["assumptions"]["optimizer"] == "adam"
    assert main([a for a in argv if a != "--json"] + ["--optimizer", "sgd"]) == 0
    assert "SGD, mixed precision: 2 + 2 + 4 = 8 bytes per parameter" in capsys.readouterr().out


def test_dataparallel_moves_the_batch_through_device_0_too():
    # 4 devices, a batch of 4 x 100 rows of 16 bytes: 3/4 of it moves
    assert comm_bytes_per_device("dataparallel", 3, 4, 6400) == pytest.approx(2 * 3 * 3 * 2 + 4800)
    assert comm_bytes_per_device("ddp", 3, 4, 6400) == pytest.approx(2 * 3 / 4 * 3 * 2)  # its own rows


def test_alpha_beta_by_hand():
    link = Link("test", bandwidth=1e9, latency=1e-5, source="")
    # DDP on 2: 2 latency steps, 1e9 params x 2 bytes x 2(1)/2 = 2e9 bytes at 1e9 B/s
    assert comm_seconds("ddp", 1e9, 2, link) == pytest.approx(2e-5 + 2.0, rel=1e-12)
    # ZeRO-3 on 4: 9 latency steps, 3 x 3/4 x 1e9 x 2 = 4.5e9 bytes
    assert comm_seconds("zero3", 1e9, 4, link) == pytest.approx(9e-5 + 4.5, rel=1e-12)
    # each projection's messages in a row on 8 devices, by name: a strategy with no entry here fails
    # (a 2-D row on 8 devices is tp = 8, dp = 1: TP's 14)
    steps = {"dataparallel": 28, "ddp": 14, "zero1": 14, "zero2": 14, "zero3": 21, "tp": 14, "ddp_tp": 14,
             "fsdp_tp": 14, "pp": 14}  # fmt: skip
    assert {s: latency_steps(s, 8) for s in whatif.STRATEGIES} == steps


def test_every_row_at_a_device_count_describes_one_global_batch_and_tp_computes_what_ddp_does():
    """TP takes every row of the global batch and 1/K of each row's work; DDP 1/K of the rows and all of each
    row's work: the same compute a device, for the same global batch, which every row names."""
    link = Link("test", bandwidth=1e9, latency=0.0, source="")
    rows = table(STEP, params=7e9, devices=(2, 4, 8), link=link)
    for k in (2, 4, 8):
        at_k = [r for r in rows if r["devices"] == k and r["compute_seconds"] is not None]
        assert {r["global_batch_rows"] for r in at_k} == {k * STEP.rows_per_device}
        compute = {r["strategy"]: r["compute_seconds"] for r in at_k}
        assert compute["tp"] == pytest.approx(compute["ddp"], rel=1e-12)
        assert compute["ddp"] == pytest.approx(compute["zero3"], rel=1e-12) == compute["dataparallel"]
        # the run's measured 1 ms for its 100 rows, plus 6 FLOPs a row for the parameters it did not have
        assert compute["ddp"] == pytest.approx(1e-3 + 6 * (7e9 - 3) * 100 / whatif.DEVICE_FLOPS, rel=1e-12)
    rows = table(STEP, devices=(2, 4), link=link)
    tp = {r["devices"]: r for r in rows if r["strategy"] == "tp"}
    ddp = {r["devices"]: r for r in rows if r["strategy"] == "ddp"}
    for k in (2, 4):
        # one activation a row of the global batch (k x the run's rows), 2 bytes on the wire, 2(k-1)/k of it
        batch = k * STEP.rows_per_device
        wire = 2 * (k - 1) / k * batch * projection.WIRE_BYTES
        assert tp[k]["comm_bytes_per_device"] == pytest.approx(wire)
    doubled = table(STEP, devices=(2,), link=link, rows_per_device=2 * STEP.rows_per_device)
    wire = {r["strategy"]: r["comm_bytes_per_device"] for r in doubled}
    assert wire["tp"] == 2 * tp[2]["comm_bytes_per_device"] and wire["ddp"] == ddp[2]["comm_bytes_per_device"]


def test_compute_adds_six_flops_a_parameter_and_row():
    # 1e9 more parameters, 100 rows, 1e12 FLOP/s: 6e11 FLOPs = 0.6 s on top of the measured 1 ms
    assert compute_seconds(STEP, 1e9 + 3, 100, 1e12) == pytest.approx(1e-3 + 0.6, rel=1e-12)
    assert compute_seconds(STEP, 3, 100, 1e12) == 1e-3  # the run's own model: what was measured


def test_table_rows_are_labelled_and_show_where_memory_runs_out():
    rows = table(STEP, params=70e9, link="infiniband400")
    assert len(rows) == 5 * len(whatif.STRATEGIES)
    assert {r["label"] for r in rows} == {PROJECTED}
    by = {(r["strategy"], r["devices"]): r for r in rows}
    assert not by["ddp", 1024]["fits"] and "out of memory" in by["ddp", 1024]["note"]  # 1.12 TB each
    assert not by["zero3", 8]["fits"]  # 140 GB each
    assert by["zero3", 64]["fits"] and by["zero3", 64]["memory_per_device_bytes"] == pytest.approx(17.5e9)
    assert by["dataparallel", 64]["step_seconds"] is None and "one machine" in by["dataparallel", 64]["note"]
    r = by["zero3", 64]
    assert r["step_seconds"] == pytest.approx(r["comm_seconds"] + r["compute_seconds"])
    assert r["comm_share"] == pytest.approx(r["comm_seconds"] / r["step_seconds"])


def test_the_tiny_model_is_communication_bound_at_scale():
    rows = table(STEP, link="ethernet100")  # 3 parameters, 1 ms of compute
    by = {(r["strategy"], r["devices"]): r for r in rows}
    assert by["ddp", 2]["note"] == "" and by["ddp", 1024]["note"] == "communication dominates"
    assert by["ddp", 1024]["comm_seconds"] == pytest.approx(
        2 * 1023 * 10e-6 + 2 * 1023 / 1024 * 3 * 2 / 12.5e9
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"params": 0}, "params"),
        ({"params": 2e12}, "params"),
        ({"link": "carrier pigeon"}, "link"),
        ({"devices": (0,)}, "devices"),
        ({"device_memory": -1}, "device_memory"),
        ({"link": Link("x", 0, 1e-6, "")}, "bandwidth"),
    ],
)
def test_bad_inputs_are_config_errors(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}: got"):
        table(STEP, **kwargs)


def test_presets_are_one_direction_bytes_per_second():
    assert LINKS["nvlink"].bandwidth == 450e9  # 900 GB/s both ways
    assert LINKS["pcie"].bandwidth == 64e9  # 128 GB/s both ways
    assert LINKS["ethernet100"].bandwidth == 100e9 / 8
    assert LINKS["infiniband400"].bandwidth == LINKS["ethernet400"].bandwidth == 400e9 / 8


def test_measure_takes_a_real_run():
    m = whatif.measure(check(FitConfig(epochs=5, devices="virtual:2")))
    assert m.compute_seconds > 0 and m.params == 3 and m.devices == 2 and m.rows_per_device == 100
    assert m.row_bytes == 16 and "5 steps" in m.where


def test_json_from_the_command_line(capsys):
    code = main(
        ["whatif", "--json", "--epochs", "3", "--params", "7e9", "--counts", "8,64", "--link", "pcie"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"measured", "assumptions", "label", "rows"}
    assert out["label"] == PROJECTED and out["measured"]["label"] == "measured on this machine"
    assert out["assumptions"]["link"]["bandwidth"] == 64e9
    assert [(r["strategy"], r["devices"]) for r in out["rows"][:2]] == [("dataparallel", 8), ("ddp", 8)]
    zero3 = [r for r in out["rows"] if r["strategy"] == "zero3" and r["devices"] == 8][0]
    assert zero3["memory_per_device_bytes"] == pytest.approx(14e9)


def test_the_table_says_projected(capsys):
    assert main(["whatif", "--epochs", "2", "--bandwidth", "100", "--latency", "1"]) == 0
    text = capsys.readouterr().out
    assert "projected, not measured" in text and "measured on this machine" in text and "100 GB/s" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--link", "wifi"], "--link: got 'wifi'; allowed: nvlink or pcie"),
        (["--params", "abc"], "--params: got 'abc'; allowed: 1 to 1e12"),
        (["--counts", "2,x"], "--counts: got '2,x'"),
        (["--counts", "٢,８"], "--counts: got '٢,８'"),  # Arabic-Indic and full-width digits: ASCII only
        (["--counts", "１２"], "--counts: got '１２'"),
        (["--params", "١٢"], "--params: got '١٢'"),
        (["--memory-gb", "8_0"], "--memory-gb: got '8_0'"),
        (["--latency", "-1"], "--latency: got '-1'; allowed: microseconds, 0 to 1e9"),
        (["--latency", "1e308"], "--latency: got '1e308'; allowed: microseconds, 0 to 1e9"),
        (["--rows-per-device", "1e308"], "--rows-per-device: got '1e308'; allowed: 1 to 1e12 rows"),
        (["--counts", "9" * 310],
         f"--counts: got '{'9' * 71}… (310 characters in all); allowed: comma-separated integers from 1 "
         "to 65536"),
        (["--memory-gb", "0"], "--memory-gb: got '0'"),
        (["--epochs", "0"], "--epochs: got 0"),
        (["--strategy", "ddp"], "--strategy: got 'ddp'; allowed: dataparallel"),
        (["--precision", "fp16"], "--precision: got 'fp16'; allowed: mixed or fp32"),
    ],
)
def test_bad_flags_exit_2_with_one_line(argv, message, capsys):
    assert main(["whatif", "--epochs", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fitcore whatif: error: ") and message in err and err.count("\n") == 1


@pytest.mark.slow  # spawns FSDP's ranks
def test_calibrate_puts_the_real_fsdp_bytes_beside_the_zero3_formula(capsys):
    argv = ["whatif", "--json", "--epochs", "2", "--weights", "5.2", "9.6", "-1", "--workers", "3"]
    argv.append("--calibrate")
    assert main(argv) == 0
    (c,) = json.loads(capsys.readouterr().out)["calibration"]
    # 3 weights and b on 3 ranks: shards of ceil(3/3) + ceil(1/3) = 2 float32 numbers; each rank sends 2 of
    # them in each of its two all-gathers and its reduce-scatter: 3 * 2 * 2 * 4 = 48 B. The formula, 3(K-1)/K
    # of the 4 parameters in float32: 32 B.
    assert (c["strategy"], c["devices"], c["params"]) == ("zero3", 3, 4)
    assert c["measured_bytes_per_device"] == 48 and c["formula_bytes_per_device"] == pytest.approx(32)
    assert c["ratio"] == pytest.approx(1.5) and c["label"] == "measured on this machine"
    text_argv = [a for a in argv if a != "--json"]
    assert main(text_argv) == 0
    text = capsys.readouterr().out
    assert "Calibration of ZeRO-3 / FSDP (measured, not projected):" in text and "sent 48 B per rank" in text


def test_every_figure_reads_in_human_units_and_a_device_never_holds_part_of_a_byte():
    from fitcore.lab import whatif

    # the page showed "2368150.2485 ms"
    assert whatif.seconds_text(2368.1502485) == "39.5 min" and whatif.seconds_text(3e5) == "3.47 d"
    assert whatif.seconds_text(0.0023681) == "2.37 ms" and whatif.seconds_text(4.2e-7) == "0.42 µs"
    assert whatif.human(1.12e17, "B") == "112 PB" and whatif.human(None, "B") == "-"
    assert whatif.share_text(0.7234) == "72.3 %" and whatif.share_text(None) == "-"
    # ZeRO-3 with the run's own 3 parameters on 1,024 ranks: 0.0469 B a device is no figure to print
    rows = {(r["strategy"], r["devices"]): r for r in table(STEP, params=3, link="infiniband400")}
    zero3 = rows["zero3", 1024]["memory_per_device_bytes"]
    assert 0 < zero3 < 1 and whatif.memory_text(zero3) == "< 1 B: fewer numbers than ranks"
    assert whatif.memory_text(14e9) == "14 GB"


@pytest.mark.parametrize(
    "n, en, zh",
    [(3, "3", "3"), (1e6, "1M", "100 万"), (1e8, "100M", "1 亿"), (7e9, "7B", "70 亿"),
     (13e9, "13B", "130 亿"), (70e9, "70B", "700 亿"), (1e12, "1T", "1 万亿")],
)  # fmt: skip
def test_a_model_size_is_said_as_people_say_it(n, en, zh):
    from fitcore.core import i18n

    with i18n.using("en"):
        assert whatif.params_text(n) == en
    with i18n.using("zh"):
        assert whatif.params_text(n) == zh


def test_dataparallel_device_0_holds_the_optimizer_state_and_the_gathered_outputs_beyond_the_others():
    # 7e9 parameters on K devices of 100 rows each: 12 B a parameter of Adam's state, and K x 100 outputs of
    # 2 bytes gathered on device 0; every other strategy's devices hold the same as each other
    measured = whatif.Measured(1e-3, 100, 16, 2, 3, "virtual:2")
    rows = whatif.table(measured, 7e9, devices=(2, 8, 64))
    by = {(r["strategy"], r["devices"]): r for r in rows}
    for k in (2, 8):
        dp = by["dataparallel", k]
        assert dp["device0_excess_bytes"] == 12 * 7e9 + k * 100 * 2
        assert dp["tags"] == ["memory", "device0"]
        assert (
            dp["note"]
            == "out of memory: needs 112 GB of 80 GB; device 0 holds 84 GB more than each other device"
        )
    assert by["dataparallel", 64]["device0_excess_bytes"] is None  # no figures beyond one machine
    assert by["dataparallel", 64]["tags"] == ["one_machine"]
    assert all(r["device0_excess_bytes"] is None for r in rows if r["strategy"] != "dataparallel")


def test_the_2d_rows_are_the_tp_and_dp_rows_composed_at_the_same_device_count():
    """DDP x TP and ZeRO-3 x TP at K = dp x tp devices (tp up to 8, a machine's NVLink): on one machine they
    are the TP row; beyond it, each dp group's rows take TP's all-reduce of their activations, and the
    gradients of each tp shard take DDP's ring (ZeRO-3's three passes) over the dp group."""
    rows = {(r["strategy"], r["devices"]): r for r in table(STEP, SEVEN_B, devices=(8, 64, 1024))}
    for name in ("ddp_tp", "fsdp_tp"):
        for key in ("memory_per_device_bytes", "comm_bytes_per_device", "compute_seconds"):
            assert rows[name, 8][key] == pytest.approx(rows["tp", 8][key], rel=1e-12)  # tp = 8, dp = 1
    assert projection.mesh_tp(64) == 8 and projection.mesh_tp(12) == 6 and projection.mesh_tp(3) == 3
    k, tp, dp = 64, 8, 8
    batch = k * STEP.rows_per_device  # every row the same global batch
    activations = 2 * (tp - 1) / tp * (batch / dp) * projection.WIRE_BYTES
    model = SEVEN_B * projection.WIRE_BYTES
    ddp_tp, fsdp_tp = rows["ddp_tp", k], rows["fsdp_tp", k]
    assert ddp_tp["memory_per_device_bytes"] == pytest.approx(rows["ddp", k]["memory_per_device_bytes"] / tp)
    assert fsdp_tp["memory_per_device_bytes"] == pytest.approx(rows["zero3", k]["memory_per_device_bytes"])
    assert ddp_tp["comm_bytes_per_device"] == pytest.approx(activations + 2 * (dp - 1) / dp * model / tp)
    assert fsdp_tp["comm_bytes_per_device"] == pytest.approx(activations + 3 * (dp - 1) / dp * model / tp)
    # each device computes its dp group's rows (1/dp of the batch) and its tp columns (1/tp of each row):
    # 1/K of the batch's compute, as DDP's and TP's devices do
    assert ddp_tp["compute_seconds"] == pytest.approx(rows["ddp", k]["compute_seconds"], rel=1e-12)
    assert ddp_tp["compute_seconds"] == pytest.approx(rows["tp", k]["compute_seconds"], rel=1e-12)
    assert whatif.latency_steps("ddp_tp", k) == 2 * (tp - 1) + 2 * (dp - 1)


def test_the_pipeline_row_idles_its_bubble_and_no_other_row_does():
    """PP (1F1B, m = 4K): the stage waits (K−1)/(m+K−1) of its schedule (compute and wait), which the step's
    time includes; every other row waits for nothing."""
    link = Link("test", bandwidth=1e9, latency=0.0, source="")
    for r in table(STEP, devices=(1, 2, 8, 64, 1024), link=link):
        if r["compute_seconds"] is None:
            continue
        k, b = r["devices"], r["bubble_share"]
        if r["strategy"] != "pp":
            assert b == 0 and r["idle_seconds"] == 0 and "bubble" not in r["tags"]
            continue
        assert b == pytest.approx((k - 1) / (4 * k + k - 1), rel=1e-12)
        compute, idle = r["compute_seconds"], r["idle_seconds"]
        assert idle / (compute + idle) == pytest.approx(b, abs=1e-15)
        assert r["step_seconds"] == pytest.approx(r["comm_seconds"] + compute + idle)
        assert r["comm_share"] == pytest.approx(r["comm_seconds"] / r["step_seconds"])
        assert ("bubble" in r["tags"]) == (k > 1)
    at = {r["devices"]: r for r in table(STEP, devices=(2, 1024), link=link) if r["strategy"] == "pp"}
    assert at[2]["bubble_share"] == pytest.approx(1 / 9) and "11.1 %" in at[2]["note"]
    assert at[1024]["bubble_share"] == pytest.approx(1023 / 5119)


def test_the_pipeline_holds_a_quarter_of_the_batchs_activations_where_tp_holds_all_and_ddp_its_own():
    """The activations a device keeps from its forward for its backward, one number a row at the wire's
    precision (2 bytes, mixed): DDP and the ZeRO stages their own b rows, TP every one of the K b rows, a
    2-D mesh its dp group's K b / dp, and the pipeline's stage 0 K of its m = 4K microbatches (1F1B), a
    quarter of the K b: less than TP's at every K > 1, more than DDP's from K = 8 on."""
    link = Link("test", bandwidth=1e9, latency=0.0, source="")
    for r in table(STEP, devices=(1, 2, 8, 64, 1024), link=link):
        if r["compute_seconds"] is None:  # DataParallel past one machine
            assert r["activations_held_bytes"] is None
            continue
        k, b, held = r["devices"], r["global_batch_rows"] / r["devices"], r["activations_held_bytes"]
        dp = k // projection.mesh_tp(k)
        expected = {"tp": k * b, "pp": k * b / 4 if k > 1 else b, "ddp_tp": k * b / dp, "fsdp_tp": k * b / dp}
        assert held == expected.get(r["strategy"], b) * 2, (r["strategy"], k)
    at8 = {r["strategy"]: r["activations_held_bytes"] for r in table(STEP, devices=(8,), link=link)}
    assert (at8["ddp"], at8["pp"], at8["tp"]) == (200, 400, 1600)  # 100 rows a device, 800 in the batch
