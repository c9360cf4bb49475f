"""The run's mesh (fitcore.protocols.mesh) and the split over it (fitcore.protocols.split): 1-D runs as meshes
of one dimension, and DP x TP on a 2 x 2 mesh, with DDP and with FSDP over `dp`, against least squares and
their formulas."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fitcore.core.config import FitConfig, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.errors import ConfigError
from fitcore.core.shards import epoch_shards
from fitcore.protocols.mesh import DIMS, MAX_DIM, Mesh, MeshError, mesh_of, parse_mesh
from fitcore.protocols.split import COLUMNS, ROWS, RankSpan
from fitcore.strategies.fsdp.layout import planned_sent_2d
from tests.test_cli import run_cli
from tests.view_helpers import plan_of

WEIGHTS = ("5.2", "9.6", "-1", "2.5")


def test_a_mesh_numbers_its_ranks_as_torchs_device_mesh_does():
    mesh = mesh_of({"tp": 2, "dp": 3}, "gloo", ["cpu"] * 6)
    assert mesh.dims == (("dp", 3), ("tp", 2)) and mesh.world_size == 6 and mesh.text() == "dp=3,tp=2"
    # row-major, as init_device_mesh((3, 2)): a `tp` group is two neighbouring ranks
    assert [mesh.coords(r) for r in range(6)] == [
        {"dp": 0, "tp": 0}, {"dp": 0, "tp": 1}, {"dp": 1, "tp": 0},
        {"dp": 1, "tp": 1}, {"dp": 2, "tp": 0}, {"dp": 2, "tp": 1},
    ]  # fmt: skip
    assert (mesh.size("dp"), mesh.size("tp")) == (3, 2)
    assert Mesh((("tp", 4),), "gloo", ("cpu",) * 4).size("dp") == 1  # no such dimension: one rank along it


@pytest.mark.parametrize(
    ("raw", "dims"),
    [
        ("dp=2,tp=2", (("dp", 2), ("tp", 2))),
        (" tp=2 , dp=3 ", (("dp", 3), ("tp", 2))),  # spaces around; the mesh's order is DIMS', not the text's
        ("tp=1", (("tp", 1),)),
    ],
)
def test_parse_mesh(raw, dims):
    assert parse_mesh(raw) == dims


@pytest.mark.parametrize(
    "raw", ["", "dp", "dp=", "cp=2", "dp=2,dp=2", "dp=0", "dp=65", "dp=٢", "dp=2;tp=2", "dp=+2"]
)
def test_a_mesh_written_wrong_is_refused(raw):
    with pytest.raises(MeshError):
        parse_mesh(raw)


@given(st.text(max_size=40))
def test_any_text_is_a_mesh_or_refused_never_a_crash(raw):
    try:
        dims = parse_mesh(raw)
    except MeshError:
        return
    names = [name for name, _ in dims]
    assert names == [d for d in DIMS if d in names] and all(1 <= size <= MAX_DIM for _, size in dims)


def test_the_split_numbers_each_ranks_block_along_its_coordinates():
    coords = [{"dp": 0, "tp": 0}, {"dp": 0, "tp": 1}, {"dp": 1, "tp": 0}, {"dp": 1, "tp": 1}]
    # 3 features over tp=2 (torch.chunk: 2 and 1), 7 rows over dp=2 (DistributedSampler: 4 and 3)
    shapes = [(4, 2), (4, 1), (3, 2), (3, 1)]
    spans, whole = ROWS.spans(shapes, coords)
    assert whole == (7, 3)
    assert spans == [
        RankSpan((0, 4), (0, 2)), RankSpan((0, 4), (2, 3)),
        RankSpan((4, 7), (0, 2)), RankSpan((4, 7), (2, 3)),
    ]  # fmt: skip
    # a 1-D mesh cuts only the dimension it has: DDP's rows, TP's columns
    spans, whole = ROWS.spans([(4, 3), (3, 3)], [{"dp": 0}, {"dp": 1}])
    assert whole == (7, 3) and spans == [RankSpan((0, 4), None), RankSpan((4, 7), None)]
    spans, whole = COLUMNS.spans([(7, 2), (7, 1)], [{"tp": 0}, {"tp": 1}])
    assert whole == (7, 3) and spans == [RankSpan((0, 7), (0, 2)), RankSpan((0, 7), (2, 3))]


def test_a_1d_run_is_a_mesh_of_the_strategys_own_dimension():
    assert validate(FitConfig(strategy="tp", workers=2, devices="cpu")).mesh_dims == (("tp", 2),)
    assert validate(FitConfig(strategy="ddp", workers=3, devices="cpu")).mesh_dims == (("dp", 3),)
    # the mesh's product is the world size: a link or command line that gives only the mesh gets it
    cfg = FitConfig.from_mapping({"strategy": "ddp", "mesh": "dp=2,tp=2", "devices": "cpu"})
    assert cfg.workers == 4 and validate(cfg).mesh_dims == (("dp", 2), ("tp", 2))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategy", "ddp", "--mesh", "dp=2,cp=2"],
         "--mesh: got 'dp=2,cp=2'; allowed: name=size pairs of pp, dp, tp"),
        (["--strategy", "ddp", "--mesh", "dp=2,tp=2", "--workers", "3"],
         "--workers: got 3; allowed: 4, the product of the mesh's sizes (dp=2,tp=2)"),
        (["--strategy", "ddp", "--mesh", "dp=2,tp=3"],
         "--mesh: got 'dp=2,tp=3'; allowed: a tp size at which torch.chunk gives every rank some of the 2 "
         "features: 1 or 2"),
        (["--mesh", "dp=2"], "--mesh: got 'dp=2'; allowed: a strategy with ranks (ddp or fsdp or tp or pp): "
         "DataParallel runs in one process, with no mesh"),
        (["--strategy", "tp", "--mesh", "dp=2,tp=2"], "--mesh: got 'dp=2,tp=2'; allowed: tp=K: TP"),
        (["--strategy", "ddp", "--mesh", "tp=2"], "--mesh: got 'tp=2'; allowed: dp=K or dp=K,tp=K"),
        (["--strategy", "fsdp", "--mesh", "dp=2", "--data-size", "1", "--batch-size", "1"],
         "--mesh: got 'dp=2'; allowed: a dp size of at most the data size, 1"),
    ],
)  # fmt: skip
def test_a_bad_mesh_is_one_line_naming_the_flag(argv, message, capsys):
    code, _, err = run_cli(capsys, *argv, "--devices", "cpu", "--epochs", "1")
    (line,) = err  # one line
    assert code == 2 and message in line and len(line) < 300


def test_a_mesh_is_refused_in_its_config_too():
    with pytest.raises(ConfigError) as caught:
        validate(FitConfig(strategy="fsdp", mesh="dp=2,tp=2", workers=2, devices="cpu"))
    assert caught.value.field == "workers"


def _ring(k: int, nbytes: int) -> int:
    """One rank's bytes in a ring all-reduce of `nbytes` over k ranks: 2(k-1)/k of them."""
    return round(2 * (k - 1) * nbytes / k)


@pytest.mark.slow  # spawns 4 ranks, twice
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_dp_by_tp_reaches_least_squares_each_rank_a_block_of_rows_and_columns(strategy, capsys, tmp_path):
    args = ["--strategy", strategy, "--mesh", "dp=2,tp=2", "--devices", "cpu", "--weights", *WEIGHTS]
    record = str(tmp_path / "mesh.fitrec")
    code, out, _ = run_cli(capsys, *args, "--json", "--record", record)
    assert code == 0
    result = json.loads(out[-1])
    cfg = validate(FitConfig(weights=(5.2, 9.6, -1.0, 2.5), strategy=strategy, mesh="dp=2,tp=2", workers=4,
                             devices="cpu"))  # fmt: skip
    w, b = least_squares(*make_data(cfg))
    assert result["status"] == "finished" and result["config"]["mesh"] == "dp=2,tp=2"
    assert result["weights"] == pytest.approx(list(w), abs=1e-3)
    assert result["bias"] == pytest.approx(b, abs=1e-3)
    # the grid: rank r at (dp, tp) = divmod(r, 2) takes rows [100 dp, 100 dp + 100), columns [2 tp, 2 tp + 2)
    step = result["first_step"]
    assert step["input_shape"] == [200, 4]
    assert [(r["batch_rows"]["first_position"], r["batch_rows"]["rows"], r["columns"], r["input_shape"])
            for r in step["replicas"]] == [
        (0, 100, [0, 2], [100, 2]), (0, 100, [2, 4], [100, 2]),
        (100, 100, [0, 2], [100, 2]), (100, 100, [2, 4], [100, 2]),
    ]  # fmt: skip
    # the two kinds of collective, named apart: each `tp` group all-reduces its rows' (100, 1) partial
    # outputs (400 B), each `dp` group the gradients of its columns of W and b, 3 float32 numbers (12 B)
    moved = step["step_bytes"]
    assert moved["tp_allreduce"] == 4 * _ring(2, 100 * 4) == 1600
    if strategy == "ddp":
        assert moved["allreduce"] == 4 * _ring(2, 12) == 48
    else:  # fully_shard over dp: W's one row cut over 2 ranks, padded to 1 row of its 2 columns, and b's one
        # number padded to 1: a 3-number shard, all-gathered twice (ZeRO-3) and reduce-scattered, (k-1) x 12 B
        assert (moved["all_gather"], moved["reduce_scatter"]) == (4 * 2 * 12, 4 * 12)
        # the formula torchrun's lead rank plans them by (it hears no other rank's measured bytes)
        assert planned_sent_2d(2, 2, 4, True) == (12, 12, 12)
    assert step["step_bytes_total"] == sum(moved.values())
    # the shards are DistributedSampler's over dp, two of 100 rows: ranks 0, 1 (dp coordinate 0) the first
    shards = result["details"]["shards"]
    dealt = epoch_shards(200, 2, True, 0, 1)
    assert (shards["world_size"], shards["rows_per_rank"]) == (2, 100)
    ranks = shards["first"]["ranks"]
    assert [(r["count"], r["first"], r["last"]) for r in ranks] == [
        (100, dealt[dp][0], dealt[dp][-1]) for dp in (0, 0, 1, 1)
    ]
    # no rank holds the whole model (5 float32 numbers, 20 B): DDP's ranks their 2 columns of W and b
    memory = result["per_rank_memory"]
    assert [m["rank"] for m in memory] == [0, 1, 2, 3] and all(m["parameters"] < 20 for m in memory)
    if strategy == "ddp":
        assert [(m["parameters"], m["optimizer_state"]) for m in memory] == [(12, 32)] * 4
    else:  # fully_shard shards dim 0 (one row): the dp=1 ranks keep a padded, empty shard and no moments
        assert [m["optimizer_state"] for m in memory] == [32, 32, 8, 8]
    # the recording gives the run back: the same grid, the same parameters
    code, replayed, _ = run_cli(capsys, "replay", record, "--json")
    again = json.loads(replayed[-1])
    assert code == 0 and again["config"]["mesh"] == "dp=2,tp=2" and again["weights"] == result["weights"]
    assert again["first_step"]["replicas"] == step["replicas"]


def test_on_a_2d_mesh_the_planned_shards_are_the_dp_coordinates_and_say_so():
    """Before a run, the shards panel of a dp=2 x tp=2 mesh deals the rows to the 2 dp coordinates (100
    each), the ranks of a tp group sharing theirs, as the run's DistributedSampler over dp does; not 4 shards
    of 50."""
    from fitcore.core.i18n import t
    from fitcore.view.ranks import planned_shards, shards_title
    from tests.view_helpers import plan_of

    cfg = validate(FitConfig(weights=(5.2, 9.6, -1.0, 2.5), strategy="ddp", mesh="dp=2,tp=2", workers=4,
                             devices="cpu"))  # fmt: skip
    value = planned_shards(cfg, plan_of(cfg))
    dealt = epoch_shards(200, 2, True, 0, 1)
    assert (value["world_size"], value["rows_per_rank"], value["padding"]) == (2, 100, 0)
    ranks = value["first"]["ranks"]
    assert [(r["rank"], r["count"], r["first"], r["last"]) for r in ranks] == [
        (r, 100, dealt[dp][0], dealt[dp][-1]) for r, dp in enumerate((0, 0, 1, 1))
    ]
    assert shards_title(value, "first") == (
        "Epoch 1: DistributedSampler (set_epoch(0), shuffle=True) deals 200 dataset rows to the 2 dp "
        "coordinates, ceil(200 / 2) = 100 each; the 2 ranks of a tp group (one dp coordinate) take the same "
        "rows"
    )
    assert t("view.ranks.planned_mesh").startswith("Step 1, planned: each rank takes ceil(batch size / dp)")


@pytest.mark.slow  # spawns 4 ranks
def test_compare_on_a_2d_mesh_is_the_real_run_and_equals_one_device(capsys):
    argv = ["compare", "--strategy", "fsdp", "--mesh", "dp=2,tp=2", "--devices", "cpu", "--epochs", "4"]
    argv.append("--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    rows = {r["strategy"]: r for r in json.loads(out[-1])["results"]}
    mesh = rows["fsdp"]
    assert (mesh["mesh"], mesh["devices"], mesh["status"]) == ("dp=2,tp=2", 4, "finished")
    assert len(mesh["per_step"]) == 4 and mesh["max_abs_diff"] <= 1e-5
    assert mesh["first_divergent_step"] is None
    assert "on the mesh dp=2,tp=2, 4 ranks on gloo" in mesh["engine"]
    code, _, err = run_cli(capsys, *argv, "--loss-reduction", "sum")  # the toggles are the simulations'
    assert code == 2 and err[0].startswith("fitcore compare: error: --mesh: got 'dp=2,tp=2'; allowed: the")


def test_across_hosts_a_mesh_is_passed_on_and_each_ranks_block_is_checked():
    """benchmarks.multinode --mesh dp=2,tp=2 (2 hosts of 2 ranks, torchrun): each host's fitcore gets the
    mesh, and the rows check reads each rank's block (its dp shard's rows, its tp columns) from the steps."""
    from fitcore.core.shards import epoch_shards
    from fitcore.engine import across
    from fitcore.engine.rank import rank_step
    from fitcore.protocols.split import ROWS as split

    cfg = validate(FitConfig(strategy="ddp", mesh="dp=2,tp=2", workers=4, devices="cpu", epochs=1))
    args = across.fitcore_args(cfg, "run.fitrec")
    assert args[args.index("--mesh") + 1] == "dp=2,tp=2"
    mesh = mesh_of(cfg.mesh_dims, "gloo", ["cpu"] * 4)
    shards = epoch_shards(cfg.data_size, 2, cfg.shuffle, cfg.seed, 1)
    shapes = [((100, 1), (100, 1))] * 4
    ids = [tuple(shards[mesh.coords(r)["dp"]][:8]) for r in range(4)]
    coords = [mesh.coords(r) for r in range(4)]
    step = rank_step(1, 1, 1, ["a", "b", "c", "d"], shapes, [1.0] * 4, (0.0, 0.0), 0.0, 0.0, ids, None, split,
                     coords)  # fmt: skip
    name, ok, text = across._rows_check(cfg, [step], 4)
    assert (name, ok) == ("rows", True) and "columns of its tp coordinate (0:1/1:2)" in text
    swapped = step._replace(replicas=(step.replicas[1], step.replicas[0], *step.replicas[2:]))
    assert across._rows_check(cfg, [swapped], 4)[1] is False  # rank 0 with rank 1's columns


def test_the_rooms_rows_question_on_a_2d_mesh_counts_the_dp_shards_not_the_ranks():
    """Four ranks on dp=2 x tp=2 take 200 rows as 2 shards of 100: a rank's rows are 100, not 200 / 4."""
    from fitcore.view.quiz import rows_question
    from fitcore.view.ranks import planned_step

    cfg = validate(FitConfig(strategy="ddp", mesh="dp=2,tp=2", workers=4, devices="cpu",
                             weights=(5.2, 9.6, -1.0, 2.5)))  # fmt: skip
    step, labels = planned_step(cfg, plan_of(cfg))
    question = rows_question(step, cfg, labels)
    assert question.value == 100 and 50 in [c.n for c in question.choices]  # the trap: dividing by 4
    assert question.text.say("en") == (
        "Step 1: the 2 dp groups take 200 rows in all; the ranks of a tp group share theirs. "
        "How many rows does rank 1 · cpu · gloo take?"
    )
    assert "ceil(200 / 2) = 100 rows a step" in question.explanation.say("en")
