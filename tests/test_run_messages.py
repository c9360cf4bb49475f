"""A run's messages: catalog Texts from where they are made to where they are shown, read in the language of
the page or the command line that shows them, never a mapping of English sentences."""

from __future__ import annotations

import re
from pathlib import Path
from string import Formatter

import pytest

from fitcore.core import i18n
from fitcore.core.config import FitConfig, validate
from fitcore.core.errors import Text
from fitcore.core.events import Status, Step
from fitcore.core.train import Control, describe_failure, diverged_message, finished_message
from fitcore.kit import live
from fitcore.runs.pool import PoolSettings, RunPool
from fitcore.runs.runner import Run
from fitcore.strategies.dataparallel.train import train
from fitcore.view import status
from fitcore.view.controls import PRESETS
from tests.helpers import wait_for
from tests.test_cli_zh import HAN, english_words

ROOT = Path(__file__).resolve().parents[1]
KEY = re.compile(r'"(run\.message\.[a-z_]+)"')
AS_WRITTEN = ("error", "text")  # fields that hold an exception's or an old recording's own words
SHUTDOWN_ZH = "服务器正在关闭（训练尚未开始）"


def _as_written(message: Text) -> list[str]:
    """The fields of `message`, nested ones too, that are shown as written in every language."""
    out = []
    for name, value in message.fields.items():
        if isinstance(value, Text):
            out += _as_written(value)
        elif name in AS_WRITTEN:
            out.append(str(value))
    return out


def assert_reads_in_both(message: Text) -> None:
    """English with no Chinese in it, and Chinese with no English words but code names and given text."""
    en = str(message)
    with i18n.using("zh"):
        zh = str(message)
    assert en and not HAN.search(en), en
    for given in _as_written(message):
        zh = zh.replace(given, " ")
    assert english_words(zh) == set() and (HAN.search(zh) or not zh.strip()), (en, zh)  # or given text only


def test_the_shutdown_before_start_sentence_is_chinese_on_the_page(no_leftover_threads):
    pool = RunPool(PoolSettings(max_active=1), reap_interval=3600.0)
    assert pool.shutdown() is True
    snap = pool.submit("alice", validate(FitConfig(epochs=1)))
    assert snap.status == Status.STOPPED
    assert status.status_line(snap) == "Stopped · step 0 / 1 · the server is shutting down before it started"
    with i18n.using("zh"):
        assert status.status_line(snap) == f"已停止 · 步数 0 / 1 · {SHUTDOWN_ZH}"
        assert live.payload(snap)["run"]["status_line"].endswith(SHUTDOWN_ZH)  # the live view's line too
    assert_reads_in_both(snap.message)


def test_every_run_message_key_is_made_somewhere_and_has_both_languages():
    sources = [*ROOT.glob("fitcore/**/*.py"), *ROOT.glob("dashboard/*.py"), ROOT / "app.py"]
    made = {key for path in sources for key in KEY.findall(path.read_text(encoding="utf-8"))}
    catalog = {key for key in i18n.catalog() if key.startswith("run.message.")}
    assert made == catalog  # none made without its words, no words left that nothing makes
    assert all(i18n.catalog()[key].get("en") and i18n.catalog()[key].get("zh") for key in catalog)


def _sample(key: str) -> Text:
    """The message of `key` with every field given: a reason or a cause as the Text it is in the code."""
    failed = Text("run.message.rank_failed", rank=1, error=Text("run.message.error", error="OSError: gone"))
    nested = {"reason": Text("run.message.shutdown"), "why": Text("run.message.signal", name="SIGKILL"),
              "first": failed,
              "then": Text("run.message.exit_code", code="1"), "ahead": Text.count("count.run", 3),
              "steps": Text.count("count.step", 200), "error": "ValueError: cannot draw",
              "text": "finished 9 steps in 0.05 s"}  # fmt: skip
    names = {name for _, name, _, _ in Formatter().parse(i18n.catalog()[key]["en"]) if name}
    return Text(key, **{name: nested.get(name, "3") for name in names})


@pytest.mark.parametrize("key", sorted(k for k in i18n.catalog() if k.startswith("run.message.")))
def test_every_run_message_reads_in_both_languages(key):
    assert_reads_in_both(_sample(key))


def _ended(cfg: FitConfig, control: Control | None = None, on_event=lambda e: None):
    return train(validate(cfg), on_event, control)


def test_every_status_message_the_trainers_make_reads_in_both_languages(no_leftover_threads):
    messages = {}
    messages["finished"] = _ended(FitConfig(epochs=2)).message
    messages["diverged"] = _ended(next(p.config for p in PRESETS if p.key == "high_lr")).message
    stopper = Control()
    stopper.stop()
    messages["stopped"] = _ended(FitConfig(epochs=2), stopper).message
    timed = Control(max_seconds=0.0)
    messages["time limit"] = _ended(FitConfig(epochs=500), timed).message
    messages["failed"] = _ended(FitConfig(epochs=2), on_event=lambda e: isinstance(e, Step) and 1 / 0).message
    messages["out of memory"] = describe_failure(MemoryError("no room"))
    for where in (Text("cli.run.where.ddp", processes=Text.count("count.process", 2)),
                  Text("cli.run.where.fsdp", processes=Text.count("count.process", 4)),
                  Text("cli.run.where.torchrun", ranks=Text.count("cli.count.rank", 4))):  # fmt: skip
        messages[where.key] = finished_message(20, 3.5, 1.0, where)
    # the runner's own: queued, running at a step, paused, and a run stopped before it started
    run = Run(validate(FitConfig(epochs=50)))
    messages["queued"] = run.snapshot().message
    run.stop()
    messages["stopped before"] = run.snapshot().message
    paced = Run(validate(FitConfig(epochs=50)), pace=20)
    paced.start()
    wait_for(lambda: paced.snapshot().step >= 1)
    messages["running"] = paced.snapshot().message
    paced.pause()
    wait_for(lambda: paced.snapshot().status == Status.PAUSED)
    messages["paused"] = paced.snapshot().message
    paced.stop()
    assert paced.join(30)
    assert [str(messages[k]).split(" ")[0] for k in ("finished", "diverged", "stopped", "failed")] == [
        "finished", "the", "stopped", "ZeroDivisionError:"
    ]  # fmt: skip
    assert str(messages["time limit"]) == "stopped at the time limit of 0 s of training (pauses not counted)"
    assert messages["diverged"] == diverged_message(float("inf"), 43, 43, 1.5)
    for name, message in messages.items():
        assert isinstance(message, Text), name
        assert_reads_in_both(message)
