"""The page in Chinese: every text it shows comes from the catalog, and the link and the live route keep
the language.

The test renders the page with `?lang=zh` through AppTest (idle, after a DataParallel run, after a DDP run,
with the compare and what-if tabs filled in), collects every text a reader sees (labels, help, options,
Markdown, captions, alerts, metrics, tables' headers and cells, charts' titles, names and hover texts, the
status line and the run's label) and fails on any English word that is not a code name.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from fitcore import api
from fitcore.core import i18n
from fitcore.runs.pool import RunPool, close_server_pool
from fitcore.view import controls
from tests.helpers import wait_for

APP = str(Path(__file__).resolve().parents[1] / "app.py")

# English words allowed on the Chinese page: API, library and product names, which Chinese course material
# writes in English too, and the units and symbols of the numbers.
CODE_NAMES = {
    # the strategies and torch's API (the phases of a step are these calls)
    "nn.DataParallel", "DataParallel", "DistributedDataParallel", "DDP", "DistributedSampler", "torch",
    "scatter", "replicate", "parallel_apply", "gather", "all_reduce", "set_epoch", "drop_last", "shuffle",
    "tensor.chunk", "torch.nn.DataParallel", "ceil", "rank", "Rank", "Python", "True", "False",
    # FSDP's API and its collectives, as torch names them
    "fully_shard", "torch.distributed.fsdp.fully_shard", "all-gather", "reduce-scatter", "all-reduce",
    "reshard_after_forward", "torch.chunk", "gradient_as_bucket_view", "bucket", "dp", "tp", "dp=2,tp=2",
    # tensor parallelism's API, as torch names it
    "TP", "RowwiseParallel", "torch.distributed.tensor.parallel.RowwiseParallel",
    # torch's `reduction=` values, shown with a gloss; "epoch", the word Chinese course material keeps
    "mean", "sum", "epoch",
    # the tutorial's printed lines are named by their first words
    "Outside",
    # devices and backends, as the device specs spell them (virtual:0, cuda:1, cpu)
    "cuda", "CUDA", "cpu", "CPU", "GPU", "virtual", "gloo", "nccl", "spawn", "µs", "ms", "GB", "B",
    # bytes' units, written the same in Chinese (fitcore.lab.whatif.human: kB to EB)
    "kB", "MB", "TB", "PB", "EB",
    # the optimizers, the model's symbols, file formats
    "Adam", "SGD", "X", "W", "b", "y", "w", "K", "N", "CSV", "JSON", "e", "fp32", "fp16",
    # the scaling literature the what-if tab cites (names of methods, papers, products, a file)
    "ZeRO", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP", "NVLink", "PCIe", "SXM", "H100", "Ethernet", "InfiniBand",
    "NDR", "Gb/s", "GB/s", "GT/s", "K-1", "i", "x",
    # the measured links: the tools that made them and their unit
    "tbf", "veth", "Mbit/s",
    # the language control offers each language in its own name
    "English",
    "Rajbhandari", "Li", "PyTorch", "SC", "VLDB", "Hugging", "Face", "Ultra-Scale", "Playbook",
    "docs/scaling.md", "fitcore", "inf", "nan",
    # the trace's format and the viewers that open it
    "Chrome", "Perfetto",
    # the command line's flag the compare tab's causes name, and the cause words that carry a flag's name
    # (the lab's JSON promises them: `sum`, `padding`, `drop_last`, `set_epoch`, `batch`, `lr`)
    "--drop-last", "--batch-size", "padding", "batch", "lr",
    # the lab's traps: torch's modules and calls, DDP's comm hook, and their flags
    "BatchNorm", "BatchNorm1d", "SyncBatchNorm", "running_mean", "no_sync", "Join",
    "torch.distributed.algorithms.Join", "comm", "hook", "--batchnorm", "--sync-batchnorm", "--accumulate",
    "--uneven", "r", "d",
    # pipeline parallelism: torch.distributed.pipelining's names, its schedules and the formula's letters
    "stage", "Stage", "GPipe", "gpipe", "1F1B", "1f1b", "interleaved", "interleaved-1f1b", "zbv", "ZBV",
    "ZB-V",
    "unit-time", "h", "m", "p", "v", "t", "S", "F", "I", "I/W", "W_L", "A", "L", "mb", "scale_grads",
    "loss_reduction", "torch.distributed.pipelining", "tests/test_pp.py", "float64", "PP", "DP", "pp",
    "torchrun", "m+p", "F1B", "pipelining",
}
WORD = re.compile(r"-{0,2}[A-Za-zµ][A-Za-z0-9_./-]*")
# left out before looking for words: Markdown code spans (code, written as code), plotly's <extra> tag and
# numbers written with an exponent (9.54e-07)
NOT_WORDS = re.compile(r"`[^`]*`|<extra>.*?</extra>|\d(\.\d+)?e[-+]?\d+")
# fields of Streamlit's protos that hold ids, types, styles or data rather than words
SKIP_FIELDS = {
    "id", "form_id", "key", "type", "format", "spec", "data", "json", "body_css", "css", "component_name",
    "theme", "width", "height", "default", "value", "min", "max", "step", "label_visibility", "icon",
    "selection_mode", "arrow_data", "styler", "mime", "file_name", "url", "language", "html",
}


def english(text: str) -> list[str]:
    """The English words of a text that are not code names."""
    text = NOT_WORDS.sub(" ", text.replace("\\", ""))  # a Markdown escape is no part of a word
    words = [w.rstrip("./-") for w in WORD.findall(text)]
    return [w for w in words if w and w not in CODE_NAMES and not re.fullmatch(r"[a-z]?\d.*", w)
            and not re.fullmatch(r"(virtual|cuda|rank|run)[:-]\d+.*", w)
            and not re.fullmatch(r"[\w.-]*\.?(fitrec|csv)", w)]  # file names and their types  # fmt: skip


def _proto_texts(message, out: list[str]) -> None:
    for field, value in message.ListFields():
        if field.name in SKIP_FIELDS or field.name.endswith("_id"):
            continue
        values = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
        for v in values:
            if isinstance(v, str):
                out.append(v)
            elif hasattr(v, "ListFields"):
                _proto_texts(v, out)


def _figure_texts(spec: dict, out: list[str]) -> None:
    for trace in spec.get("data", []):
        out += [trace.get("name") or "", trace.get("hovertemplate") or ""]
        ys = trace.get("y")
        out += [y for y in ys if isinstance(y, str)] if isinstance(ys, list) else []
    for name, axis in spec.get("layout", {}).items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            title = axis.get("title") or {}
            out.append(title.get("text", "") if isinstance(title, dict) else str(title))


def _frame_texts(frame: pd.DataFrame, out: list[str]) -> None:
    out += [str(c) for c in frame.columns]
    out += [v for v in frame.to_numpy().ravel().tolist() if isinstance(v, str)]


def page_texts(at: AppTest) -> list[str]:
    """Every text the page shows a reader, as far as AppTest can reach it."""
    out: list[str] = []
    stack = [at._tree]
    while stack:
        node = stack.pop()
        stack.extend(getattr(node, "children", {}).values())
        proto = getattr(node, "proto", None)
        kind = getattr(node, "type", "")
        if proto is None or kind in ("code",):  # the console: the program's printed lines, as printed
            continue
        if kind == "plotly_chart":
            _figure_texts(json.loads(proto.spec), out)
        elif kind == "bidi_component" and proto.component_name == "fitcore_figure":
            _figure_texts(json.loads(proto.json)["figure"], out)
        elif kind == "bidi_component":
            run = json.loads(proto.json)["payload"]["run"]
            out += [run["status_line"], run["label"]]
        elif kind in ("table", "arrow_data_frame", "dataframe"):
            _frame_texts(node.value, out)
        elif kind != "html":  # the page's own <style>
            _proto_texts(proto, out)
    return [text for text in out if text]


def untranslated(at: AppTest) -> dict[str, list[str]]:
    found = {}
    for text in page_texts(at):
        words = english(text)
        if words:
            found[text[:100]] = words
    return found


@pytest.fixture
def zh_page(monkeypatch, no_leftover_threads):
    for name in list(os.environ):
        if name.startswith("FITCORE_"):
            monkeypatch.delenv(name)
    close_server_pool()
    st.cache_resource.clear()
    opened: list[AppTest] = []

    # AppTest calls a widget's format_func in this thread when it reads the widget's value: it must speak
    # the language the script run formatted the options in
    i18n.set_language("zh")

    def open_page(query: dict | None = None) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=90)
        at.query_params.update({"lang": "zh", **(query or {})})
        opened.append(at)
        at.run()
        assert not at.exception
        return at

    yield open_page
    for at in opened:
        try:
            at.session_state["pool"].shutdown()
        except KeyError:
            pass
    close_server_pool()
    st.cache_resource.clear()
    i18n.set_language(i18n.DEFAULT)


def run_to_end(at: AppTest, timeout: float = 60) -> AppTest:
    at.selectbox(key="pace").set_value("max")
    at.run()
    at.button(key="start").click()
    at.run()
    pool, owner, run_id = at.session_state["pool"], at.session_state["owner"], at.session_state["run_id"]
    wait_for(lambda: not pool.snapshot(owner, run_id).active, timeout, interval=0.05, what="the run to end")
    at.run()
    assert not at.exception
    return at


def test_the_idle_page_in_chinese_has_no_english_words(zh_page):
    at = zh_page()
    assert at.session_state["lang"] == "zh"
    assert at.button(key="start").label == "开始训练"
    assert at.query_params["lang"] == "zh"  # the link keeps the language
    assert untranslated(at) == {}
    # a multiselect without a placeholder shows Streamlit's own English one ("Choose options")
    assert at.multiselect and all(m.proto.placeholder == "请选择…" for m in at.multiselect)
    # the preset's lesson: its title, then a full-width colon, as Chinese punctuates (not "title. lesson")
    (lesson,) = [e.value for e in at.info if e.value.startswith("**")]
    title = at.selectbox(key="preset").format_func(at.selectbox(key="preset").value)
    assert lesson.startswith(f"**{title}**：") and ".**" not in lesson
    # the ddp choice's own panels, before a run
    at.radio(key="strategy").set_value("ddp")
    at.run()
    assert untranslated(at) == {}


def test_a_finished_dataparallel_run_in_chinese_with_the_lab_tabs(zh_page):
    at = zh_page({"epochs": "20", "devices": "virtual:3"})
    run_to_end(at)
    texts = page_texts(at)
    assert any(text.startswith("已完成 · 轮次 20 / 20 · 步数 20 / 20 · ") for text in texts), texts
    assert "第 1 次训练 · DataParallel · virtual:3" in texts
    at.button(key="cmp_run").click()
    at.run()
    at.button(key="wi_run").click()
    at.run()
    assert not at.exception
    assert at.session_state["cmp_result"] and at.session_state["wi_measured"] is not None
    assert untranslated(at) == {}


def test_a_diverged_run_explains_itself_in_chinese(zh_page):
    at = zh_page({"optimizer": "sgd", "lr": "1.5", "epochs": "50"})
    run_to_end(at)
    line = next(text for text in page_texts(at) if text.startswith("已发散"))
    assert "对这组数据来说学习率 1.5 太高了" in line
    assert untranslated(at) == {}


@pytest.mark.slow  # spawns ranks
def test_a_finished_ddp_run_in_chinese(zh_page):
    at = zh_page({"strategy": "ddp", "devices": "cpu", "workers": "2", "data_size": "40", "batch_size": "20",
                  "epochs": "3"})  # fmt: skip
    run_to_end(at, timeout=120)
    assert any("全部 2 个 rank 最终参数完全相同" in e.value for e in at.success)
    assert untranslated(at) == {}


def test_bad_values_in_a_chinese_link_are_named_by_their_chinese_label(zh_page):
    at = zh_page({"batch_size": "0", "lang": "zh"})
    assert any("批大小" in e.value for e in at.error), [e.value for e in at.error]


def test_the_language_control_switches_and_a_bad_lang_is_reported(zh_page):
    i18n.set_language("en")
    at = zh_page({"lang": "fr"})
    assert at.session_state["lang"] == "en"  # neither the link's nor AppTest's browser: English
    assert [e.value for e in at.error if "lang" in e.value.lower() or "Language" in e.value]
    # AppTest reads the widgets' values with the options of the run before: switch this thread after a run
    at.session_state["lang"] = "zh"
    at.run()
    i18n.set_language("zh")
    assert at.button(key="start").label == "开始训练" and at.query_params["lang"] == "zh"
    at.session_state["lang"] = "en"
    at.run()
    i18n.set_language("en")
    assert at.button(key="start").label == "Start training"


def test_every_key_the_page_names_is_in_the_catalog():
    """A key written in app.py, dashboard/ or fitcore/view that the catalog lacks fails here, not in front of
    a class."""
    root = Path(__file__).resolve().parents[1]
    files = [root / "app.py", *sorted((root / "dashboard").glob("*.py")),
             *sorted((root / "fitcore" / "view").glob("*.py")), root / "fitcore" / "kit" / "live.py",
             root / "fitcore" / "lab" / "compare.py", root / "fitcore" / "lab" / "whatif.py",
             *sorted((root / "fitcore" / "strategies").rglob("*.py"))]
    literal = re.compile(r"""\b(?:t|count)\(\s*f?["']([a-z_]+\.[a-z_.{}\[\]"']+)["']""")
    catalog = i18n.catalog()
    named = set()
    for path in files:
        for key in literal.findall(path.read_text(encoding="utf-8")):
            if "{" in key:  # an f-string key: every key its pattern can make is checked below
                continue
            named.add(key)
    plural = {k for k in named if f"{k}.one" in catalog and f"{k}.other" in catalog}
    missing = [k for k in named if k not in catalog and k not in plural]
    assert missing == []
    assert len(named) > 100  # the page's words are really read from the catalog
    # the keys built from names: a status, a strategy, a preset, a field
    from fitcore.core.events import Status
    from fitcore.protocols import registry

    built = [f"view.status.{s}" for s in Status] + [f"explain.{s}" for s in registry.NAMES]
    built += [s.words[role] for s in registry.STRATEGIES.values() for role in registry.WORDS]
    built += [f"view.field.{f}" for f in controls.LABELLED_FIELDS]
    built += [f"view.preset.{p.key}.{part}" for p in controls.PRESETS for part in ("name", "lesson")]
    assert [k for k in built if k not in catalog] == []


def test_english_stays_as_it_was():
    assert controls.field_label("batch_size") == "Batch size"
    assert controls.preset("Uneven split").title == "Uneven split"
    with i18n.using("zh"):
        assert controls.field_label("batch_size") == "批大小"
        assert controls.pace_label("20") == "每秒 20 步"


# -- the live route answers in the page's language --------------------------------------------------------

ALICE = "a" * 32


def _call(handler, query: str):
    import asyncio

    from starlette.requests import Request

    scope = {"type": "http", "method": "GET", "path": api.LIVE_PATH, "query_string": query.encode(),
             "headers": [(b"cookie", f"{api.OWNER_COOKIE}={ALICE}".encode())]}  # fmt: skip
    response = asyncio.run(handler(Request(scope)))
    return response.status_code, json.loads(response.body)


@pytest.fixture
def pool(no_leftover_threads):
    pool = RunPool()
    yield pool
    pool.shutdown()


def test_the_live_route_answers_in_the_asked_language_and_refuses_others(pool):
    from fitcore.core.config import FitConfig

    run = pool.submit(ALICE, FitConfig(epochs=2, devices="virtual:2"))
    wait_for(lambda: not pool.snapshot(ALICE, run.run_id).active, 30, interval=0.05, what="the run to end")
    handler = api.live_handler(lambda: pool)
    status, body = _call(handler, "since=0&lang=zh")
    assert status == 200
    assert body["run"]["status_line"].startswith("已完成 · 轮次 2 / 2 · 步数 2 / 2 · ")
    assert body["run"]["label"] == "第 1 次训练 · DataParallel · virtual:2"
    status, body = _call(handler, "since=0")  # no lang: English, as before
    assert body["run"]["status_line"].startswith("Finished · epoch 2 / 2 · step 2 / 2 · ")
    status, body = _call(handler, "since=0&lang=fr")
    assert status == 400 and body == {"error": "lang: got 'fr'; allowed: en or zh"}
    assert i18n.current() == "en"  # the request's language did not leak into this thread
