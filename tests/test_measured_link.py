"""The alpha-beta fit of benchmarks.collectives on synthetic points, and the fitted link in the what-if."""

from __future__ import annotations

import json

import pytest

from benchmarks.collectives import (
    OPS,
    SIZES,
    bus_factor,
    fit_alpha_beta,
    predicted,
    ring_steps,
    with_bandwidths,
)
from fitcore import whatif_cli
from fitcore.core import links
from fitcore.lab import whatif


def synthetic(alpha: float, beta: float, n: int = 2) -> list[dict]:
    return [
        {"op": op, "bytes": s, "seconds": ring_steps(op, n) * alpha + s * bus_factor(op, n) / beta}
        for op in OPS
        for s in SIZES
    ]


def test_the_fit_recovers_alpha_and_beta_of_exact_points():
    alpha, beta = fit_alpha_beta(synthetic(300e-6, 12.5e6))
    assert alpha == pytest.approx(300e-6, rel=1e-9) and beta == pytest.approx(12.5e6, rel=1e-9)


def test_bandwidths_are_nccl_tests():
    p = with_bandwidths([{"op": "all_reduce", "bytes": 1000, "seconds": 0.001},
                         {"op": "all_gather", "bytes": 1000, "seconds": 0.001}], n=4)  # fmt: skip
    assert [x["algbw"] for x in p] == [1e6, 1e6]
    assert [x["busbw"] for x in p] == [pytest.approx(1.5e6), pytest.approx(0.75e6)]  # 2(n-1)/n, (n-1)/n


def test_a_negative_latency_is_clamped_and_each_error_is_the_model_against_the_point():
    points = synthetic(0.0, 1e8)
    points[0]["seconds"] *= 0.5  # a 4 B all-reduce faster than the line through the others
    alpha, beta = fit_alpha_beta(points)
    assert alpha >= 0
    assert predicted(points[-1], alpha, beta) == pytest.approx(points[-1]["seconds"], rel=0.1)


def test_the_measured_links_are_offered_beside_the_presets(tmp_path):
    found = links.measured_links()
    assert "measured-tbf100" in found and found["measured-tbf100"].name == "measured: 2 hosts, tbf 100 Mbit/s"
    assert list(links.LINKS)[:5] == ["nvlink", "pcie", "ethernet100", "ethernet400", "infiniband400"]
    assert links.LINKS["measured-tbf100"] == found["measured-tbf100"]
    assert 5e6 < found["measured-tbf100"].bandwidth < 12.5e6  # under tbf's 100 Mbit/s = 12.5 MB/s
    bad = tmp_path / "links.json"
    for text in (
        "not json",
        json.dumps({"x": {"name": "x"}}),
        json.dumps({"x": {"name": "x", "bandwidth": -1, "latency": 0, "source": ""}}),
    ):
        bad.write_text(text)
        assert links.measured_links(bad) == {}


def test_whatif_takes_the_measured_link(capsys):
    code = whatif_cli.main(["--link", "measured-tbf100", "--epochs", "2", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assumptions"]["link"]["name"] == "measured: 2 hosts, tbf 100 Mbit/s"
    assert out["assumptions"]["link"]["bandwidth"] == links.LINKS["measured-tbf100"].bandwidth


def test_a_measured_link_is_named_in_the_language_asked():
    from fitcore.core import i18n

    assert links.link_name("measured-tbf100") == "measured: 2 hosts, tbf 100 Mbit/s"
    with i18n.using("zh"):
        assert links.link_name("measured-tbf100") == "实测：2 台主机，tbf 100 Mbit/s"
        assert links.link_name("measured-veth") == "实测：2 台主机，veth，不限速"
    assert links.link_name("nvlink") == "NVLink 4 (H100 SXM)"


def test_a_run_of_some_rates_merges_its_links_into_the_file_and_keeps_the_others(tmp_path):
    from benchmarks.collectives import link_entries, write_links

    path = tmp_path / "links.json"
    fit = {"alpha": 2e-4, "beta": 1e7, "mean_abs_error": 0.4, "max_abs_error": 0.9}
    write_links(link_entries({"": {**fit, "beta": 1.6e8}, "100mbit": fit}, SIZES), path)
    # a second run of tbf 100 Mbit/s alone, 3 repeats: its link replaced, veth's kept as it was
    again = {
        **fit,
        "alpha": 3e-4,
        "alpha_range": [1.6e-4, 5.7e-4],
        "beta_range": [0.9e7, 1.1e7],
        "repeats": 3,
    }
    merged = write_links(link_entries({"100mbit": again}, SIZES), path)
    on_disk = json.loads(path.read_text())
    assert on_disk == merged and list(on_disk) == ["measured-veth", "measured-tbf100"]
    assert on_disk["measured-veth"]["bandwidth"] == 1.6e8 and on_disk["measured-veth"]["repeats"] == 1
    tbf = on_disk["measured-tbf100"]
    assert (tbf["latency"], tbf["latency_range"], tbf["bandwidth_range"], tbf["repeats"]) == (
        3e-4, [1.6e-4, 5.7e-4], [0.9e7, 1.1e7], 3,
    )  # fmt: skip
    assert "4 B..16 MiB" in tbf["source"] and "the median of 3 repeats" in tbf["source"]
    # what the what-if reads of it: the spread, low to high, around the median fit
    link = links.measured_links(path)["measured-tbf100"]
    assert (link.latency_range, link.bandwidth_range, link.repeats) == ((1.6e-4, 5.7e-4), (0.9e7, 1.1e7), 3)
    tbf["latency_range"] = [4e-4, 5.7e-4]  # a median outside its own spread: not a file the benchmark writes
    path.write_text(json.dumps(on_disk))
    assert links.measured_links(path) == {}


def test_repeats_keep_the_median_fit_and_the_spread():
    from benchmarks import collectives

    sweeps = iter([synthetic(a, b) for a, b in ((500e-6, 9e6), (200e-6, 11e6), (300e-6, 10e6))])
    fit = collectives.repeated("test", lambda: next(sweeps), 3)
    assert fit["alpha"] == pytest.approx(300e-6) and fit["beta"] == pytest.approx(10e6)  # one real fit
    assert fit["alpha_range"] == pytest.approx([200e-6, 500e-6]) and fit["beta_range"] == pytest.approx(
        [9e6, 11e6]
    )


def test_the_whatif_shows_the_measured_spread(tmp_path, capsys):
    link = links.Link("m", 1e7, 3e-4, "", bandwidth_range=(0.9e7, 1.1e7), latency_range=(1.6e-4, 5.7e-4),
                       repeats=3)  # fmt: skip
    measured = whatif.Measured(1e-3, 100, 16, 2, 3, "virtual:2")
    (row,) = whatif.table(measured, 1e6, devices=(8,), link=link)[1:2]  # DDP at K = 8
    fast, slow = row["comm_seconds_spread"]
    # a ring all-reduce: 2(K-1) steps of alpha and 2(K-1)/K of 1e6 parameters of 2 bytes at beta
    wire = 2 * 7 / 8 * 1e6 * 2
    assert fast == pytest.approx(14 * 1.6e-4 + wire / 1.1e7) and slow == pytest.approx(
        14 * 5.7e-4 + wire / 0.9e7
    )
    assert fast < row["comm_seconds"] < slow
    lines = whatif_cli.table_lines(whatif.to_dict(measured, [row], link, 80e9, 4e14))
    assert lines[2] == (
        "the link's 3 measured repeats spanned 160 µs – 570 µs of latency and 9 MB/s – 11 MB/s: the median "
        "repeat's fit is used below; each row's comm_seconds_spread (--json) is its time at the two ends"
    )
    # a figure given on the command line is that figure: no spread
    plain = links.Link("m", 1e7, 3e-4, "")
    assert "comm_seconds_spread" not in whatif.table(measured, 1e6, devices=(8,), link=plain)[1]
