"""Your own data: every refusal of a CSV file as one line, the limits, standardisation, and the fit itself."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fitcore.core import csvdata
from fitcore.core.config import ConfigError, FitConfig, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.events import Status
from fitcore.strategies.dataparallel.train import train
from tests.test_cli import run_cli

W_TRUE, B_TRUE = (2.0, -0.03, 0.5), 7.0


def exact_csv(path, rows: int = 60, seed: int = 0) -> np.ndarray:
    """A CSV whose y is exactly X·W + b, its columns on very different scales; returns X (rows, 3)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 3)) * [1.0, 100.0, 0.01] + [3.0, -500.0, 0.0]
    y = X @ np.asarray(W_TRUE) + B_TRUE
    lines = ["x1,x2,x3,y"] + [",".join(repr(float(v)) for v in (*x, t)) for x, t in zip(X, y)]
    path.write_text("\n".join(lines) + "\n")
    return X


def lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    A = np.hstack([X, np.ones((len(X), 1))])
    return np.linalg.lstsq(A, y, rcond=None)[0]


# ---------------------------------------------------------------------------------------------------------
# Refusals: each one line on stderr, exit status 2, nothing on stdout.

MANY = ",".join(f"c{i}" for i in range(17))

REFUSALS = [
    # (id, file bytes, extra flags, the flag named, text in the message)
    ("no-header", b"1,2,3\n4,5,6\n", ["--target", "1"], "--data", "a header line naming the columns first"),
    ("non-numeric", b"a,b,y\n1,2,3\n4,x,6\n", [], "--data",
     "line 3, column 'b' holds 'x' (not a number written with 0-9)"),
    ("nan", b"a,y\n1,2\nnan,3\n", [], "--data", "line 3, column 'a' holds 'nan' (not finite)"),
    ("inf", b"a,y\n1,2\n2,3\n3,-inf\n", [], "--data", "line 4, column 'y' holds '-inf' (not finite)"),
    ("empty-cell", b"a,y\n1,2\n2,\n", [], "--data", "line 3, column 'y' holds an empty cell"),
    ("blank-lines-counted", b"a,y\n\n1,2\n\nq,3\n", [], "--data", "line 5, column 'a' holds 'q'"),
    ("ragged", b"a,y\n1,2\n1,2,3\n", [], "--data", "the same number of cells on every line"),
    ("one-column", b"y\n1\n2\n", [], "--data", "at least two columns (a target and a feature)"),
    ("semicolons", b"a;b;y\n1;2;3\n", [], "--data", "this file looks ;-separated (save it as CSV with"),
    ("tabs", b"a\tb\ty\n1\t2\t3\n", [], "--data", "this file looks tab-separated"),
    ("one-row", b"a,y\n1,2\n", [], "--data", "at least two data rows under the header; the file has one"),
    (
        "10000-columns",
        (",".join(f"c{i}" for i in range(9_999)) + ",y\n" + ",".join(["1"] * 10_000) + "\n").encode(),
        [], "--data", "at most 256 columns (a target and up to 16 features are used); the header has 10000",
    ),  # fmt: skip
    ("empty", b"", [], "--data", "the file is empty"),
    ("only-blank", b"\n \n\n", [], "--data", "the file is empty"),
    ("header-only", b"a,y\n", [], "--data", "at least one data row under the header"),
    ("duplicate-names", b"a,a,y\n1,2,3\n", [], "--data", "'a' appears twice"),
    ("unnamed-column", b"a,,y\n1,2,3\n", [], "--data", "column 2 has none"),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", [], "--data", "binary data (a NUL byte at byte 8)"),
    ("not-utf8", b"a,y\n\xff\xfe,1\n", [], "--data", "binary data (byte 4 is not UTF-8)"),
    (
        "fewer-rows-than-devices",
        b"a,y\n1,2\n2,3\n",
        ["--devices", "virtual:3"],
        "--devices",
        "at most as many devices as data rows (2)",
    ),
    (
        "fewer-rows-than-ranks",
        b"a,y\n1,2\n2,3\n3,4\n",
        ["--strategy", "ddp", "--devices", "cpu", "--workers", "4"],
        "--workers",
        "an integer from 1 to 3",
    ),
    (
        "batch-over-rows",
        b"a,y\n1,2\n2,3\n",
        ["--batch-size", "5"],
        "--batch-size",
        "from 1 to 2 (the data size)",
    ),
    ("unknown-target", b"a,y\n1,2\n", ["--target", "z"], "--target", "a column of the file: a, y"),
    ("no-target", b"a,y\n1,2\n", ["--target", ""], "--target", "the name of a column of the file: a, y"),
    (
        "unknown-feature",
        b"a,b,y\n1,2,3\n",
        ["--features", "a,q"],
        "--features",
        "columns of the file: a, b, y",
    ),
    (
        "target-as-feature",
        b"a,b,y\n1,2,3\n",
        ["--features", "a,y"],
        "--features",
        "other than the target 'y'",
    ),
    ("feature-twice", b"a,b,y\n1,2,3\n", ["--features", "a,a"], "--features", "each column once"),
    (
        "17-features",
        (MANY + ",y\n" + ",".join(["1"] * 18) + "\n").encode(),
        [],
        "--features",
        "1 to 16 columns",
    ),
]


@pytest.mark.parametrize(
    "content, flags, flag, text", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_every_bad_file_is_refused_with_one_line(tmp_path, monkeypatch, capsys, content, flags, flag, text):
    monkeypatch.chdir(tmp_path)  # the file named as given, however long the test's folder is
    path = "bad.csv"
    Path(path).write_bytes(content)
    args = ["--data", path, "--target", "y", *flags]
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert out == []
    assert len(err) == 1, err
    assert err[0].startswith(f"fitcore: error: {flag}: got "), err[0]
    assert text in err[0], err[0]
    if flag == "--data":  # the file named as it was given
        assert err[0].startswith(f"fitcore: error: --data: got '{path}'; allowed: "), err[0]


def test_a_long_paths_error_keeps_the_files_name(tmp_path, capsys):
    # a path longer than an error quotes is cut at its start, from a folder's: the file is still named
    folder = tmp_path.joinpath("courses", "2026", "machine-learning", "data", "week3", "x" * 40)
    folder.mkdir(parents=True)
    path = folder / "houses.csv"
    path.write_bytes(b"a;b;y\n1;2;3\n")
    code, out, err = run_cli(capsys, "--data", str(path), "--target", "y")
    assert (code, out, len(err)) == (2, [], 1)
    got = re.match(r"fitcore: error: --data: got '…(/[^']*)' \((\d+) characters in all\); allowed: ", err[0])
    assert got, err[0]
    end, length = got.group(1), int(got.group(2))
    assert length == len(str(path)) and str(path).endswith(end) and end.endswith(f"/{'x' * 40}/houses.csv")
    assert len(end) <= 68  # within what an error quotes of a value (80 characters, with its quotes and count)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = Path("huge.csv")
    with open(path, "wb") as f:  # sparse: MAX_BYTES + 1 bytes of size, none of them written
        f.truncate(csvdata.MAX_BYTES + 1)
    code, out, err = run_cli(capsys, "--data", str(path), "--target", "y")
    assert (code, out) == (2, [])
    assert err == [
        f"fitcore: error: --data: got '{path}'; allowed: a CSV file of at most {csvdata.MAX_BYTES} bytes "
        f"(64 MiB); this one has {csvdata.MAX_BYTES + 1}"
    ]


@pytest.mark.parametrize("given", ["nope.csv", "./data/nope.csv", "../nope.csv", "~/nope.csv"])
def test_a_missing_file_is_one_line_naming_it_as_given(tmp_path, monkeypatch, capsys, given):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_cli(capsys, "--data", given, "--target", "y")
    assert code == 2 and err == [
        f"fitcore: error: --data: got '{given}'; allowed: a readable CSV file (No such file or directory)"
    ]


def test_an_uploaded_file_is_named_by_its_own_name_not_the_servers_directory(tmp_path):
    # a page's upload lies under the store's directory; its refusal says `houses.csv`, as the user knows it
    from fitcore.core.uploads import UploadStore, shown_path

    store = UploadStore(str(tmp_path / "store"))
    saved = store.save("owner", "csv", "houses.csv", b"price\n1\n")
    with pytest.raises(ConfigError) as info:
        validate(FitConfig(data=str(saved), target="price"))
    assert info.value.value == "houses.csv" and str(store.root) not in str(info.value)
    elsewhere = str(tmp_path / "elsewhere" / "houses.csv")
    assert shown_path(elsewhere) == elsewhere


def test_target_or_features_without_a_file_are_refused(capsys):
    code, _, err = run_cli(capsys, "--target", "y")
    assert code == 2 and err == [
        "fitcore: error: --target: got 'y'; allowed: nothing without a CSV file (data)"
    ]


def _rows_file(path, rows: int) -> None:
    """rows data rows of two varied columns: a block of 1000 distinct lines repeated, written at once."""
    block = "".join(f"{i % 97},{(i * 7) % 13 + 2 * (i % 97)}\n" for i in range(1000))
    whole, rest = divmod(rows, 1000)
    path.write_text("a,y\n" + block * whole + block[: sum(len(x) + 1 for x in block.splitlines()[:rest])])


def test_a_million_rows_are_accepted_and_one_more_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "million.csv"
    _rows_file(path, csvdata.MAX_ROWS)
    assert path.stat().st_size < csvdata.MAX_BYTES
    cfg = validate(FitConfig(data=str(path), target="y", batch_size=1000, epochs=1), available=8 * 2**30)
    assert cfg.data_size == 1_000_000 and cfg.features == ("a",)
    X, y = make_data(cfg)
    assert X.shape == (1_000_000, 1) and y.shape == (1_000_000, 1)

    monkeypatch.chdir(tmp_path)  # named as given, however long the test's folder is
    over = Path("over.csv")
    _rows_file(over, csvdata.MAX_ROWS + 1)
    code, _, err = run_cli(capsys, "--data", str(over), "--target", "y")
    assert code == 2
    assert err == [
        f"fitcore: error: --data: got '{over}'; allowed: at most 1000000 data rows; this file has more"
    ]


# ---------------------------------------------------------------------------------------------------------
# Reading, standardising, and the config.


def test_reading_keeps_the_numbers_and_the_columns(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"\xef\xbb\xbf x , y ,z\r\n1, 2.5 ,3\r\n\r\n-4,5e-1,6\r\n")  # BOM, spaces, CRLF, a blank
    table = csvdata.read_table(str(path), "y", ("z", "x"))
    assert table.features == ("z", "x") and table.target == "y"
    np.testing.assert_array_equal(table.X, [[3.0, 1.0], [6.0, -4.0]])
    np.testing.assert_array_equal(table.y, [2.5, 0.5])
    import hashlib

    assert table.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_validation_fills_in_the_source_and_the_least_squares_answer(tmp_path):
    path = tmp_path / "d.csv"
    X = exact_csv(path)
    cfg = validate(FitConfig(data=str(path), target="y", batch_size=60))
    assert cfg.features == ("x1", "x2", "x3") and cfg.data_size == 60 and len(cfg.data_sha256) == 64
    Xs = (X - X.mean(0)) / X.std(0)
    y = X @ np.asarray(W_TRUE) + B_TRUE
    ys = (y - y.mean()) / y.std()  # the target is standardised too
    np.testing.assert_allclose((*cfg.weights, cfg.bias), lstsq(Xs, ys), rtol=1e-9, atol=1e-9)
    assert abs(cfg.bias) < 1e-9  # centred columns: the standardised fit has no intercept
    raw = validate(replace(FitConfig(data=str(path), target="y", batch_size=60), standardize=False))
    np.testing.assert_allclose((*raw.weights, raw.bias), (*W_TRUE, B_TRUE), rtol=1e-7, atol=1e-7)


def test_make_data_is_the_file_standardised(tmp_path):
    path = tmp_path / "d.csv"
    X = exact_csv(path)
    cfg = validate(FitConfig(data=str(path), target="y", batch_size=60))
    Xt, yt = make_data(cfg)
    np.testing.assert_allclose(Xt.numpy(), (X - X.mean(0)) / X.std(0), rtol=1e-5, atol=1e-6)
    y = X @ np.asarray(W_TRUE) + B_TRUE
    np.testing.assert_allclose(yt.numpy()[:, 0], (y - y.mean()) / y.std(), rtol=1e-5, atol=1e-6)
    assert Xt.dtype == torch.float32 and yt.shape == (60, 1)


def test_a_file_changed_after_validation_fails_the_run_with_its_reason(tmp_path):
    path = tmp_path / "d.csv"
    exact_csv(path)
    cfg = validate(FitConfig(data=str(path), target="y", batch_size=60, epochs=2))
    exact_csv(path, seed=1)  # the same columns, other rows
    ended = train(cfg)
    assert ended.status == Status.FAILED
    assert f"ConfigError: data: got '{path}'; allowed: the file as validated" in str(ended.message)
    assert "it has changed" in str(ended.message)


def test_scaling_back_to_the_file_units():
    s = csvdata.Scaling(mean=(3.0, -500.0), scale=(2.0, 100.0))
    # y = 4 (x1 - 3) / 2 + 50 (x2 + 500) / 100 + 1 = 2 x1 + 0.5 x2 + 1 - 6 + 250
    w, b = s.original((4.0, 50.0), 1.0)
    assert w == (2.0, 0.5) and b == pytest.approx(245.0)
    sc = csvdata.scaling(np.array([[1.0, 5.0], [3.0, 5.0]]))
    assert sc.mean == (2.0, 5.0) and sc.scale == (1.0, 1.0)  # a constant column keeps scale 1


def test_scaling_the_target_back_to_the_file_units():
    s = csvdata.Scaling(mean=(3.0,), scale=(2.0,), target_mean=100.0, target_scale=10.0)
    # y' = 4 (x - 3) / 2 + 0.5, y = 100 + 10 y' = 20 x - 60 + 105 = 20 x + 45
    w, b = s.original((4.0,), 0.5)
    assert w == (20.0,) and b == pytest.approx(45.0)
    X, y = np.array([[1.0], [3.0]]), np.array([7.0, 7.0])
    assert csvdata.scaling(X, y)[2:] == (7.0, 1.0)  # a constant target keeps scale 1


HOUSES = str(Path(__file__).resolve().parents[1] / "examples" / "houses.csv")


def test_houses_with_the_default_rate_reach_least_squares_on_the_raw_file(capsys):
    """Adam at lr 0.5 on examples/houses.csv: the target (prices near 425) is scaled too, so the default
    rate converges; the learned parameters in the file's units match lstsq on the raw columns."""
    table = csvdata.read_table(HOUSES, "price")
    expected = np.asarray(lstsq(table.X, table.y))  # (area, rooms, age, b) on the raw file
    code, out, _ = run_cli(capsys, "--data", HOUSES, "--target", "price", "--epochs", "300", "--json")
    assert code == 0
    data = json.loads(out[0])["data"]
    got = np.asarray((*data["weights_original"], data["bias_original"]))
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    assert (data["target_mean"], data["target_scale"]) == pytest.approx((table.y.mean(), table.y.std()))
    code, out, _ = run_cli(capsys, "--data", HOUSES, "--target", "price", "--epochs", "300", "--quiet")
    (line,) = [line for line in out if line.startswith("In file units:")]
    shown = [float(v) for v in re.findall(r"-?\d+\.\d+", line)]
    np.testing.assert_allclose(shown, expected, rtol=1e-4, atol=5e-5)  # printed to 4 decimals


# ---------------------------------------------------------------------------------------------------------
# Training on a file recovers its W and b.


def test_training_on_an_exact_file_recovers_w_and_b(tmp_path):
    path = tmp_path / "exact.csv"
    X = exact_csv(path)
    y = X @ np.asarray(W_TRUE) + B_TRUE
    cfg = validate(
        FitConfig(
            data=str(path),
            target="y",
            batch_size=60,
            epochs=400,
            optimizer="sgd",
            lr=0.5,
            devices="virtual:3",
        )
    )
    ended = train(cfg)
    assert ended.status == Status.FINISHED
    w, b = csvdata.scaling(X, y).original(ended.weights, ended.bias)
    expected = lstsq(X, y)
    np.testing.assert_allclose((*w, b), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(expected, (*W_TRUE, B_TRUE), rtol=1e-9, atol=1e-9)


def test_without_standardisation_the_reference_is_least_squares_on_the_raw_columns(tmp_path):
    path = tmp_path / "exact.csv"
    X = exact_csv(path)
    cfg = validate(FitConfig(data=str(path), target="y", batch_size=60, standardize=False))
    Xt, yt = make_data(cfg)
    np.testing.assert_array_equal(Xt.numpy(), X.astype(np.float32))
    w, b = least_squares(Xt, yt)  # on float32 copies of columns 1e4 apart in scale: float32's precision
    np.testing.assert_allclose((*w, b), lstsq(X, X @ np.asarray(W_TRUE) + B_TRUE), rtol=1e-3, atol=1e-3)


def test_cli_on_a_file_reports_the_source_and_the_file_units(tmp_path, capsys):
    path = tmp_path / "exact.csv"
    exact_csv(path)
    code, out, err = run_cli(capsys, "--data", str(path), "--target", "y", "--epochs", "300", "--json")
    assert (code, err) == (0, [])
    result = json.loads(out[0])
    data = result["data"]
    assert data["file"] == "exact.csv" and data["features"] == ["x1", "x2", "x3"] and data["rows"] == 60
    assert data["standardized"] is True
    assert result["true_weights"] is None and result["config"]["batch_size"] == 60  # one batch by default
    np.testing.assert_allclose(
        (*data["weights_original"], data["bias_original"]), (*W_TRUE, B_TRUE), atol=2e-3
    )

    code, out, _ = run_cli(
        capsys,
        "--data",
        str(path),
        "--target",
        "y",
        "--features",
        "x2,x1",
        "--quiet",
        "--no-standardize",
        "--epochs",
        "2",
    )
    assert code == 0
    assert "Data:           exact.csv: y from x2, x1, 60 rows; features as in the file" in out
    assert not any(line.startswith("True:") for line in out)


def test_config_fields_round_trip():
    cfg = FitConfig.from_mapping(
        {"data": " My File.csv ", "target": "Price", "features": "A, b ,C", "standardize": "false"}
    )
    assert (cfg.data, cfg.target, cfg.features, cfg.standardize) == (
        "My File.csv",
        "Price",
        ("A", "b", "C"),
        False,
    )
    assert FitConfig.from_mapping(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="^standardize: got 'maybe'"):
        FitConfig.from_mapping({"standardize": "maybe"})


@pytest.mark.slow
def test_ddp_ranks_read_the_same_rows_of_the_file(tmp_path):
    from fitcore.core.events import Detail
    from fitcore.engine.launcher import launch

    path = tmp_path / "exact.csv"
    X = exact_csv(path, rows=61)  # odd: DistributedSampler pads rank 1's shard with a repeated row
    cfg = validate(
        FitConfig(
            data=str(path),
            target="y",
            batch_size=61,
            epochs=200,
            optimizer="sgd",
            lr=0.5,
            strategy="ddp",
            devices="cpu",
            workers=2,
        )
    )
    events: list = []
    ended = launch(cfg, events.append)
    assert ended.status == Status.FINISHED
    (final,) = [e.value for e in events if isinstance(e, Detail) and e.key == "final"]
    assert final["identical"] is True and len(final["ranks"]) == 2
    single = train(replace(cfg, strategy="dataparallel", devices="cpu"))
    # the ranks' rows (a padded 31 + 31) differ from one process's 61 only by the repeated row; both fit
    # the exact file, so both reach its least squares
    y = X @ np.asarray(W_TRUE) + B_TRUE
    for w, b in ((ended.weights, ended.bias), (single.weights, single.bias)):
        w_file, b_file = csvdata.scaling(X, y).original(w, b)
        np.testing.assert_allclose((*w_file, b_file), lstsq(X, y), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# Memory: only the used columns are parsed, and a replaced upload's table is let go.


def wide_csv(path, columns: int = 40, rows: int = 6) -> np.ndarray:
    """A CSV of columns c0..c{columns-2} and y, cell (r, c) = 100 r + c; returns the cells (rows, columns)."""
    cells = np.arange(rows)[:, None] * 100.0 + np.arange(columns)[None, :]
    names = [f"c{i}" for i in range(columns - 1)] + ["y"]
    lines = [",".join(names)] + [",".join(f"{v:g}" for v in row) for row in cells]
    path.write_text("\n".join(lines) + "\n")
    return cells


def test_only_the_target_and_the_features_are_parsed(tmp_path, monkeypatch):
    import pandas as pd

    cells = wide_csv(tmp_path / "wide.csv")
    parsed = []
    read_csv = pd.read_csv

    def spy(*args, **kwargs):
        frame = read_csv(*args, **kwargs)
        parsed.append((kwargs.get("usecols"), list(frame.columns)))
        return frame

    monkeypatch.setattr(pd, "read_csv", spy)
    table = csvdata.read_table(tmp_path / "wide.csv", "y", ("c7", "c2"))
    # one parse, of three columns of the 40 (in the file's order), and the features in the order asked
    assert parsed == [(["c7", "c2", "y"], ["c2", "c7", "y"])]
    np.testing.assert_array_equal(table.X, cells[:, [7, 2]])
    np.testing.assert_array_equal(table.y, cells[:, 39])
    assert table.X.flags.c_contiguous and table.features == ("c7", "c2")


@pytest.mark.parametrize(
    "line, message",
    [
        ("1," * 40 + "1", "line 4 has 41 cells, the header 40"),  # an extra cell, past every used column
        ("1," * 38 + "1", "line 4 has 39 cells, the header 40"),  # one short, in no used column either
    ],
)
def test_a_line_of_another_length_is_refused_though_its_columns_are_not_used(tmp_path, line, message):
    wide_csv(tmp_path / "wide.csv", rows=6)
    lines = (tmp_path / "wide.csv").read_text().splitlines()
    lines[3] = line.replace("1", "5", 1)  # line 4 of the file, a data row
    (tmp_path / "wide.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as info:
        csvdata.read_table(tmp_path / "wide.csv", "c1", ("c0",))
    assert info.value.allowed == f"a CSV file with the same number of cells on every line ({message})"


def test_the_line_check_counts_blocks_and_quoted_cells_as_the_csv_module(tmp_path, monkeypatch):
    """Lines across the check's blocks, blank ones, a last line without its line end, and quoted commas."""
    monkeypatch.setattr(csvdata, "BLOCK_BYTES", 16)
    body = "a,b,y\n" + "1,2,3\n\n  \n" * 20 + "4,5,6"
    (tmp_path / "ok.csv").write_text(body)
    assert len(csvdata.read_table(tmp_path / "ok.csv", "y").y) == 21
    (tmp_path / "bad.csv").write_text(body + ",7\n")
    with pytest.raises(ConfigError) as info:
        csvdata.read_table(tmp_path / "bad.csv", "y")
    assert "line 62 has 4 cells, the header 3" in info.value.allowed  # 1 + 20 x 3 lines before it
    (tmp_path / "quoted.csv").write_text('a,b,y\n1,"2",3\n"4,5",6\n')
    with pytest.raises(ConfigError) as info:
        csvdata.read_table(tmp_path / "quoted.csv", "y")
    assert "line 3 has 2 cells, the header 3" in info.value.allowed


def test_reading_a_small_file_allocates_about_its_size(tmp_path):
    """read(MAX_BYTES + 1) allocated 64 MiB for every file, whatever its size."""
    import tracemalloc

    exact_csv(tmp_path / "small.csv", rows=200)
    csvdata.read_table(tmp_path / "small.csv", "y")  # pandas' first-use allocations out of the way
    tracemalloc.start()
    try:
        csvdata.read_table(tmp_path / "small.csv", "y")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20, peak


def test_a_forgotten_file_lets_its_table_go(tmp_path):
    import gc
    import weakref

    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    exact_csv(first)
    exact_csv(second, seed=1)
    table = csvdata.load(str(first), "y")
    assert csvdata.load(str(first), "y") is table  # kept: validation and training share one read
    held = weakref.ref(table.X)
    del table
    csvdata.load(str(second), "y")
    gc.collect()
    assert held() is not None and str(first) in csvdata.cached_paths()
    csvdata.forget(str(first))
    gc.collect()
    assert held() is None and csvdata.cached_paths()[-1:] == [str(second)]
    assert str(first) not in csvdata.cached_paths()
