"""The command line in Chinese (`--lang zh` or LANG): errors, lines, `check`, help, and no English left.

The English outputs are asserted by tests/test_cli.py, test_check.py, ...; here the same commands in Chinese.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

from fitcore.cli import main
from fitcore.core import i18n
from fitcore.core.config import FitConfig, validate
from fitcore.core.errors import ConfigError
from fitcore.core.events import Step
from fitcore.core.shards import Layout, first_epoch_value
from fitcore.engine.rank import final_value, group_value
from fitcore.kit import check
from fitcore.kit.check import Row, Verified
from fitcore.protocols import registry
from fitcore.runs.console import final_lines, group_line, rank_step_lines, shard_lines
from fitcore.runs.recording import read as read_recording

ROOT = Path(__file__).resolve().parents[1]
HAN = re.compile(r"[\u4e00-\u9fff]")
SIZE = re.compile(r"torch\.Size\(\[[\d, ]*\]\)")

# What may stay English in a Chinese output: code names, API names, units and flags, as in Chinese course
# material. Anything else English is a text that bypassed the catalog.
CODE_NAMES = {
    "torch.Size", "torch", "Python", "CUDA", "cuda", "cpu", "CPU", "GPU", "W", "b", "K", "B", "kB", "MB",
    "GB", "TB", "B/s", "GB/s", "MiB", "ms", "s", "µs", "nn.DataParallel", "torch.nn.DataParallel",
    "DataParallel", "DDP", "DistributedDataParallel", "DistributedSampler", "set_epoch", "shuffle", "True",
    "False", "scatter", "gather", "all_reduce", "replicate", "parallel_apply", "tensor.chunk", "ceil",
    "rank", "gloo", "nccl", "dataparallel", "ddp", "virtual", "adam", "sgd", "mean", "sum", "zh", "en",
    "LANG", "W_lstsq", "W_1dev", "W_1proc", "W_cpu", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP", "ring",
    "all-reduce", "NVLink", "H100", "SXM", "nvlink", "pcie", "ethernet100", "ethernet400", "infiniband400",
    "measured-veth", "measured-tbf100",
    "TFLOP/s", "FLOP/s", "fitcore", "python", "-m", "check", "compare", "whatif", "replay", "examples",
    "reference",
    "x86_64", "Linux", "JSON", "lines", "Chrome", "trace", "ui.perfetto.dev", "docs/scaling.md", "sampler",
    "drop_last", "padding", "lr", "epoch", "sha256", "torch.multiprocessing", "torchrun", "WORLD_SIZE",
    "nan", "inf", "d", "N", "A", "e", "localhost", "y", "X", "sampler.set_epoch", "recording", "Adam",
    "BatchNorm", "BatchNorm1d", "SyncBatchNorm", "syncbatchnorm", "running_mean", "no_sync", "Join",
    "torch.distributed.algorithms.Join", "comm", "hook", "r", "fsdp", "fully_shard", "reduce-scatter",
    "all-gather", "reshard_after_forward", "TP", "RowwiseParallel", "serve", "streamlit", "run", "app.py",
    "Streamlit", "fp32", "fp16", "mixed", "dp", "tp", "tp=2", "dp=2", "name=size", "dp=2,tp=2",
    # pipeline parallelism: torch.distributed.pipelining's names, its schedules and the formula's letters
    "stage", "Stage", "GPipe", "gpipe", "1F1B", "1f1b", "interleaved", "interleaved-1f1b", "zbv", "ZBV",
    "ZB-V",
    "unit-time", "h", "m", "p", "v", "t", "S", "F", "I", "I/W", "W_L", "L", "mb", "scale_grads",
    "loss_reduction", "torch.distributed.pipelining", "tests/test_pp.py", "float64", "PP", "DP", "pp",
    "m+p", "F1B", "pipelining",
}  # fmt: skip
CODE_NAMES |= set(registry.NAMES)  # every registered strategy's name, as the flags take it
WORD = re.compile(r"(?<![\w.:/-])-{0,2}[A-Za-z][\w.:/@+-]*")


def english_words(text: str) -> set[str]:
    """The English words of `text` that are not code names, flags, device names or numbers."""
    text = SIZE.sub("", text)
    words = set()
    for word in WORD.findall(text):
        word = word.rstrip(".:")
        if (
            word in CODE_NAMES
            or word.startswith("-")  # flags: -h, --batch-size
            or re.fullmatch(r"(virtual|cuda|rank|ZeRO)[\w:@,./-]*", word)
            or re.fullmatch(r"[\w.]*\d[\w.]*", word)  # numbers, versions, 1e-05, 3.4e38
            or word.upper() == word  # metavars: BATCH_SIZE, LANG
        ):
            continue
        words.add(word)
    return words


def run(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


# ---------------------------------------------------------------------------------------------------------
# Errors: exit 2, one line, the flag named, in Chinese.


@pytest.mark.parametrize(
    "argv, flag, value",
    [
        (["--batch-size", "300"], "--batch-size", "300"),
        (["--lr", "-1"], "--lr", "-1.0"),
        (["--devices", "gpu"], "--devices", "'gpu'"),
        (["--optimizer", "rmsprop"], "--optimizer", "'rmsprop'"),
        (["--epochs", "two"], "--epochs", "'two'"),
        (["--print-every", "0"], "--print-every", "0"),
        (["--data", "no-such-file.csv", "--target", "y"], "--data", "'no-such-file.csv'"),
    ],
)
def test_a_bad_value_is_one_chinese_line_naming_the_flag(capsys, argv, flag, value):
    code, out, err = run(capsys, "--lang", "zh", *argv)
    assert code == 2 and out == [] and len(err) == 1
    assert err[0].startswith(f"fitcore：错误：{flag}：给定的值为 {value}；允许：")
    assert HAN.search(err[0].split("允许：")[1]), err[0]  # what is allowed, in Chinese too


def test_the_batch_size_refusal_reads_exactly(capsys):
    code, _, err = run(capsys, "--lang", "zh", "--batch-size", "300")
    assert err == ["fitcore：错误：--batch-size：给定的值为 300；允许：1 到 200 之间的整数（上限为数据量）"]


def test_lang_from_the_environment_and_the_flag_wins(capsys, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    code, _, err = run(capsys, "--batch-size", "300")
    assert code == 2 and err[0].startswith("fitcore：错误：--batch-size：")
    code, _, err = run(capsys, "--lang", "en", "--batch-size", "300")
    assert err == ["fitcore: error: --batch-size: got 300; allowed: an integer from 1 to 200 (the data size)"]
    assert i18n.current() == "en"  # main() leaves the caller's language as it was


@pytest.mark.parametrize(
    "command", [[], ["check"], ["compare"], ["whatif"], ["replay", "x.fitrec"], ["examples"]]
)
def test_a_bad_lang_exits_2_with_one_line_naming_it(capsys, command):
    code, out, err = run(capsys, *command, "--lang", "fr")
    assert code == 2 and out == [] and len(err) == 1
    assert "--lang" in err[0] and "'fr'" in err[0] and "en, zh" in err[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--bogus"], "无法识别的参数：--bogus"),
        (["--batch-size"], "参数 --batch-size：需要一个值"),
        (["--print-every", "x"], "参数 --print-every：给定的值为 'x'；允许：不小于 1 的整数"),
        (["--quiet", "--json"], "参数 --json：不能与参数 --quiet 同时使用"),
    ],
)
def test_argparse_errors_in_chinese(capsys, argv, words):
    code, out, err = run(capsys, "--lang", "zh", *argv)
    assert code == 2 and out == [] and len(err) == 1
    assert err[0] == f"fitcore：错误：{words}（参见 python -m fitcore --help）"


def test_subcommand_errors_in_chinese(capsys):
    code, _, err = run(capsys, "compare", "--lang", "zh", "--loss-reduction", "max")
    assert code == 2
    assert err == ["fitcore compare：错误：--loss-reduction：给定的值为 'max'；允许：mean 或 sum"]
    code, _, err = run(capsys, "whatif", "--lang", "zh", "--counts", "0")
    assert code == 2 and err == [
        "fitcore whatif：错误：--counts：给定的值为 '0'；允许：以逗号分隔的 1 到 65536 之间的整数"
    ]
    code, _, err = run(capsys, "replay", "--lang", "zh", str(ROOT / "no-such.fitrec"))
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"fitcore：错误：recording：给定的值为 '{ROOT / 'no-such.fitrec'}'")  # as given
    assert "版本 1 或 2 或 3 的 fitcore-recording 文件；可读取的文件（" in err[0]


def test_a_config_error_renders_in_the_language_it_is_read_in():
    with pytest.raises(ConfigError) as info:
        validate(FitConfig(batch_size=300))
    exc = info.value
    assert str(exc) == "batch_size: got 300; allowed: an integer from 1 to 200 (the data size)"
    with i18n.using("zh"):
        assert str(exc) == "batch_size：给定的值为 300；允许：1 到 200 之间的整数（上限为数据量）"
        assert exc.named("批大小") == "批大小：给定的值为 300；允许：1 到 200 之间的整数（上限为数据量）"
    copy = pickle.loads(pickle.dumps(exc))  # a rank's error crosses to its parent with its key, not words
    with i18n.using("zh"):
        assert (copy.field, copy.value) == ("batch_size", 300)
        assert copy.allowed == "1 到 200 之间的整数（上限为数据量）"


def test_counts_in_refusals_follow_the_language():
    from fitcore.core.config import Limits

    with pytest.raises(ConfigError) as info:
        validate(FitConfig(epochs=3, batch_size=100), Limits(max_steps=5))
    assert info.value.allowed == "at most 5 steps in all; 3 epochs x 2 batches is 6"
    with i18n.using("zh"):
        assert info.value.allowed == "总共最多 5 步；3 轮 x 2 个批次 共 6 步"


# ---------------------------------------------------------------------------------------------------------
# A run's lines: torch's shapes unchanged, Chinese words around them.

RUN = ["--epochs", "2", "--data-size", "7", "--batch-size", "4", "--devices", "virtual:3", "--seed", "1"]


def test_a_chinese_run_prints_the_same_shapes_as_the_english_one(capsys):
    _, en, _ = run(capsys, *RUN)
    code, zh, err = run(capsys, "--lang", "zh", *RUN)
    # the header; batches of 4 and 3 rows: 2 and 3 replicas, each step its In Model lines and Outside; 4 more
    assert code == 0 and err == [] and len(zh) == len(en) == 1 + 2 * (3 + 4) + 4
    # every line holds the same torch.Size(...) parts, in the same order, and the same numbers
    assert [SIZE.findall(line) for line in zh] == [SIZE.findall(line) for line in en]
    # and the same numbers, but for the last digit: the emulated replicas' threads add gradients in any order
    number = re.compile(r"-?\d+\.\d+")
    zh_numbers = [[float(v) for v in number.findall(x)] for x in zh[:-1]]  # the last line: seconds
    en_numbers = [[float(v) for v in number.findall(x)] for x in en[:-1]]
    assert zh_numbers == [pytest.approx(v, rel=1e-3, abs=1e-3) for v in en_numbers]
    assert zh[0] == "在 CPU 上模拟 3 个设备（virtual:3）：批次按 DataParallel 的规则切分，但不使用 GPU。"
    assert zh[1] == (
        "\t模型内：输入大小 torch.Size([2, 2]) 输出大小 torch.Size([2, 1])  [virtual:0（在 CPU 上模拟）]"
    )
    assert zh[3].startswith("模型外：输入大小 torch.Size([4, 2]) 输出大小 torch.Size([4, 1]) 损失：")
    assert zh[3].endswith("（第 1 轮，第 1 步）")
    assert [line.split("：")[0] for line in zh[-4:]] == ["学到的参数", "真实参数", "最小二乘解", "状态"]
    assert zh[-1].startswith("状态：已完成（完成 4 步，用时 ")


def test_json_stays_data_in_chinese(capsys):
    _, en, _ = run(capsys, "--json", *RUN)
    _, zh, _ = run(capsys, "--lang", "zh", "--json", *RUN)
    en_doc, zh_doc = json.loads(en[0]), json.loads(zh[0])
    assert zh_doc["status"] == en_doc["status"] == "finished"  # the status is a value, not a word
    assert zh_doc["weights"] == pytest.approx(en_doc["weights"], rel=1e-5)
    labels = [f"virtual:{i} (emulated on CPU)" for i in range(3)]  # names of devices, not words to translate
    assert zh_doc["devices"] == en_doc["devices"] == labels


# ---------------------------------------------------------------------------------------------------------
# check, help, and the scan for English words.


def test_check_table_in_chinese(capsys, monkeypatch):
    real = [r for r in check.plan_rows(check.probe(gpus=[])) if r.name == "dataparallel virtual:3"]
    with i18n.using("zh"):
        skipped = Row("dataparallel cuda:0", None, i18n.t("cli.check.skip.no_gpu"))
    rows = [*real, skipped, Row("x", lambda: Verified("a; b"))]
    monkeypatch.setattr(check, "plan_rows", lambda machine: rows)
    code, out, _ = run(capsys, "check", "--lang", "zh")
    assert code == 0
    assert out[0].split() == ["路径", "结果", "用时"]
    assert set(out[1]) == {"-"}
    assert re.split(r"\s{2,}", out[2].strip())[:2] == ["dataparallel virtual:3", "通过"]
    assert out[2].endswith(" 秒")
    assert "切分 67/67/66 = tensor.chunk，全部 40 步一致" in out[3]
    assert re.split(r"\s{2,}", out[5].strip()) == ["dataparallel cuda:0", "跳过，原因：没有 CUDA GPU", "-"]
    assert out[-1] == "check：全部正常（2 项通过，0 项失败，1 项跳过）"
    # the columns line up on a terminal, where a Chinese character takes two columns
    from fitcore.core.text import width

    starts = {width(line[: line.index(word)]) for line, word in ((out[0], "结果"), (out[2], "通过"))}
    assert len(starts) == 1


@pytest.mark.parametrize("command", [[], ["check"], ["compare"], ["whatif"], ["replay"]])
def test_help_in_chinese(capsys, command):
    code, out, _ = run(capsys, *command, "--lang", "zh", "--help")
    text = "\n".join(out)
    assert code == 0 and out[0].startswith("用法：python -m fitcore")
    assert "选项" in text and "显示本帮助并退出" in text and "输出语言：zh 或 en" in text
    assert english_words(text) == set()


def test_main_help_names_every_flag_in_chinese(capsys):
    _, out, _ = run(capsys, "--lang", "zh", "--help")
    text = "\n".join(out)
    expected = ["批大小，即每批的行数（默认 200）", "学习率（默认 0.5）",
                "--strategy " + " 或 ".join(s.name for s in registry.STRATEGIES.values() if s.processes)
                + " 的进程数（rank 数，默认 2）", "配合 --data：要预测的列"]  # fmt: skip
    for words in expected:
        assert words in text


def ddp_lines() -> list[str]:
    """Every line a DDP run prints, made from a recorded run's values (no ranks spawned)."""
    recording = read_recording(ROOT / "examples" / "ddp-2ranks.fitrec")
    cfg = recording.config
    labels = recording.started.devices
    layout = Layout(cfg.data_size, len(labels), cfg.batch_size)
    steps = [e for e in recording.events if isinstance(e, Step)]
    group = group_value(layout, "gloo", ("127.0.0.1", 29500), "spawned with torch.multiprocessing",
                        ["cpu"] * len(labels), labels, {"pids": [1, 2]})  # fmt: skip
    torchrun = dict(group, launcher="launched by torchrun")
    shards = first_epoch_value(cfg, labels)
    padded = first_epoch_value(FitConfig(data_size=7, batch_size=7, strategy="ddp"), labels)
    same = final_value([(label, (1.0, 2.0), 3.0) for label in labels])
    differ = final_value([(labels[0], (1.0, 2.0), 3.0), (labels[1], (1.5, 2.0), 3.0)])
    return [
        i18n.t("cli.ddp.header.cpu", processes=i18n.count("count.process", 2), backend="gloo"),
        i18n.t("cli.ddp.header.gpu", processes=i18n.count("count.process", 2), backend="nccl"),
        i18n.t("cli.ddp.header.torchrun", ranks=i18n.count("cli.count.rank", 2), backend="gloo"),
        group_line(group), group_line(torchrun), *shard_lines(shards), *shard_lines(padded),
        *rank_step_lines(steps[0]), *final_lines(same), *final_lines(differ),
    ]  # fmt: skip


def test_ddp_lines_in_chinese():
    with i18n.using("zh"):
        lines = ddp_lines()
    group = "进程组：2 个 rank，后端 gloo，127.0.0.1:29500（由 torch.multiprocessing 启动）；"
    assert lines[3].startswith(group)
    assert any("为补齐重复了 1 行" in line for line in lines)
    assert any("（用 " in line and "补齐）" in line for line in lines)
    rank0 = "\t[rank 0 · cpu · gloo] 模型内：输入大小 torch.Size([50, 2]) 输出大小 torch.Size([50, 1])"
    assert rank0 in lines
    with i18n.using("en"):
        english = ddp_lines()
    assert [SIZE.findall(x) for x in lines] == [SIZE.findall(x) for x in english]


def test_no_english_words_left_in_any_chinese_output(capsys, monkeypatch, tmp_path):
    """Every Chinese output of the command line, scanned for English words outside the code names."""
    outputs: dict[str, str] = {}

    codes: dict[str, int] = {}

    def collect(name: str, *argv: str) -> None:
        codes[name], out, err = run(capsys, *argv)
        outputs[name] = "\n".join(out + err)

    collect("run", "--lang", "zh", *RUN)
    csv = tmp_path / "houses.csv"
    csv.write_text("area,rooms,price\n50,2,100\n80,3,160\n65,2,130\n120,4,230\n", encoding="utf-8")
    collect("csv run", "--lang", "zh", "--data", str(csv), "--target", "price", "--epochs", "3")
    collect("quiet run", "--lang", "zh", "--quiet", "--epochs", "1", "--devices", "cpu")
    lab = ["--epochs", "2", "--data-size", "7", "--batch-size", "7", "--devices", "virtual:2"]
    collect("compare", "compare", "--lang", "zh", *lab, "--loss-reduction", "sum", "--optimizer", "sgd",
            "--no-set-epoch")  # fmt: skip
    collect("whatif", "whatif", "--lang", "zh", "--epochs", "2", "--counts", "2,64,1024", "--params", "1e10")
    for i, argv in enumerate(
        [["--batch-size", "300"], ["--devices", "cuda"], ["--workers", "9", "--strategy", "ddp"],
         ["--weights", "1", "--bias", "1e9"], ["--bogus"], ["--data", str(csv), "--target", "nope"],
         ["--data", str(csv), "--target", "price", "--features", "price"], ["compare", "--epochs", "0"],
         ["whatif", "--tflops", "0"], ["whatif", "--latency", "-1"], ["--strategy", "zero"]]
    ):  # fmt: skip
        collect(f"error {i}", "--lang", "zh", *argv) if argv[0] not in ("compare", "whatif") else collect(
            f"error {i}", argv[0], "--lang", "zh", *argv[1:]
        )
    with i18n.using("zh"):
        outputs["ddp"] = "\n".join(ddp_lines())
        # every row's name and why it is skipped, on a machine without GPUs, gloo or nccl
        bare = check.Machine("3.11", "2.13", None, None, (), nccl=False, gloo=False)
        outputs["check rows"] = "\n".join(f"{r.name} {r.skip}" for r in check.plan_rows(bare))
    real = [r for r in check.plan_rows(check.probe(gpus=[])) if r.name == "dataparallel virtual:2"]
    monkeypatch.setattr(check, "plan_rows", lambda machine: real)
    collect("check", "check", "--lang", "zh")
    assert {name: code for name, code in codes.items() if name.startswith("error") and code != 2} == {}
    assert [name for name, text in outputs.items() if not HAN.search(text)] == []
    theirs = {"houses.csv", "area", "rooms", "price", "nope", "zero"}  # the user's file, columns and values
    left = {name: english_words(text) - theirs for name, text in outputs.items()}
    assert {name: words for name, words in left.items() if words} == {}
