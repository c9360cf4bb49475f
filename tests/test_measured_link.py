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
from fitcore import whatif


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
    links = whatif.measured_links()
    assert "measured-tbf100" in links and links["measured-tbf100"].name == "measured: 2 hosts, tbf 100 Mbit/s"
    assert list(whatif.LINKS)[:5] == ["nvlink", "pcie", "ethernet100", "ethernet400", "infiniband400"]
    assert whatif.LINKS["measured-tbf100"] == links["measured-tbf100"]
    assert 5e6 < links["measured-tbf100"].bandwidth < 12.5e6  # under tbf's 100 Mbit/s = 12.5 MB/s
    bad = tmp_path / "links.json"
    for text in (
        "not json",
        json.dumps({"x": {"name": "x"}}),
        json.dumps({"x": {"name": "x", "bandwidth": -1, "latency": 0, "source": ""}}),
    ):
        bad.write_text(text)
        assert whatif.measured_links(bad) == {}


def test_whatif_takes_the_measured_link(capsys):
    code = whatif.main(["--link", "measured-tbf100", "--epochs", "2", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assumptions"]["link"]["name"] == "measured: 2 hosts, tbf 100 Mbit/s"
    assert out["assumptions"]["link"]["bandwidth"] == whatif.LINKS["measured-tbf100"].bandwidth


def test_a_measured_link_is_named_in_the_language_asked():
    from fitcore import i18n

    assert whatif.link_name("measured-tbf100") == "measured: 2 hosts, tbf 100 Mbit/s"
    with i18n.using("zh"):
        assert whatif.link_name("measured-tbf100") == "实测：2 台主机，tbf 100 Mbit/s"
        assert whatif.link_name("measured-veth") == "实测：2 台主机，veth，不限速"
    assert whatif.link_name("nvlink") == "NVLink 4 (H100 SXM)"
