"""fitcore.view.quiz: every question's answer is read off the run's own events, and agrees with the plan."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fitcore.core import i18n
from fitcore.core.chunks import chunk_sizes
from fitcore.core.config import FitConfig
from fitcore.core.phases import GATHER, LOSS, gather_bytes
from fitcore.core.shards import first_epoch_value
from fitcore.kit.live import ITEMSIZE, short_label
from fitcore.view import controls, quiz
from tests.view_helpers import ddp_step, run_to_end

HAN = re.compile(r"[\u4e00-\u9fff]")


def one_epoch(name: str, **changes):
    cfg = dataclasses.replace(controls.preset(name).config, epochs=1, **changes)
    snap = run_to_end(cfg)
    assert snap.status == "finished"
    return snap


def asked(snap, kind: str) -> quiz.Question:
    found = {q.kind: q for q in quiz.questions(snap.latest, snap.config, snap.devices, snap.extra)}
    return found[kind]


def field(question: quiz.Question, name: str):
    return dict(question.text.fields)[name]


def check_choices(question: quiz.Question) -> None:
    """Distinct choices in both languages, the answer among them, and the same question asked twice."""
    for lang in i18n.LANGUAGES:
        shown = [c.say(lang) for c in question.choices]
        assert len(set(shown)) == len(shown) >= 3, shown
        assert question.text.say(lang) and question.explanation.say(lang)
    assert HAN.search(question.text.say("zh")) and HAN.search(question.explanation.say("zh"))
    assert 0 <= question.answer < len(question.choices) <= quiz.MAX_CHOICES


def test_rows_is_the_replicas_own_rows_and_tensor_chunks():
    snap = one_epoch("Uneven split")
    step = snap.latest
    q = asked(snap, "rows")
    replica = next(r for r in step.replicas if short_label(r.device) == field(q, "device"))
    assert q.value == replica.rows
    assert q.value == chunk_sizes(200, 3)[step.replicas.index(replica)]
    assert q.choices[q.answer] == quiz.Text("count.row", n=replica.rows)
    check_choices(q)


def test_idle_devices_are_the_selected_ones_without_a_replica():
    snap = one_epoch("Fewer rows than devices")
    q = asked(snap, "idle")
    busy = {r.device for r in snap.latest.replicas}
    assert q.value == tuple(short_label(d) for d in snap.devices if d not in busy)
    assert q.value == ("virtual:5", "virtual:6", "virtual:7")  # 5 rows on 8 devices
    assert q.choices[q.answer].say("en") == "virtual:5, virtual:6, virtual:7"
    check_choices(q)
    # every device busy: the answer is "none"
    q = asked(one_epoch("Uneven split"), "idle")
    assert q.value == () and q.choices[q.answer].say("en") == "none: every device gets rows"
    check_choices(q)


def test_the_outputs_meet_where_the_loss_ran_device_ids_0():
    snap = one_epoch("Uneven split")
    q = asked(snap, "meet")
    loss = [p for p in snap.latest.phases.phases() if p.name == LOSS]
    assert q.value == short_label(loss[0].device) == "virtual:0" == short_label(snap.devices[0])
    assert q.choices[q.answer].say("zh") == "virtual:0"
    check_choices(q)


@pytest.mark.parametrize(
    "name, rows", [("Uneven split", (67, 67, 66)), ("Fewer rows than devices", (1,) * 5)]
)
def test_gather_bytes_are_the_recorded_gather_phases(name, rows):
    snap = one_epoch(name)
    q = asked(snap, "gather_bytes")
    recorded = sum(p.bytes for p in snap.latest.phases.phases() if p.name == GATHER)
    formula = sum(gather_bytes(r, ITEMSIZE, i == 0) for i, r in enumerate(rows))
    assert q.value == recorded == formula == (sum(rows) - rows[0]) * ITEMSIZE
    assert q.choices[q.answer] == quiz.Text("classroom.c.bytes", n=recorded)
    check_choices(q)


def test_a_step_always_asks_the_same_question_and_steps_take_turns():
    snap = one_epoch("The tutorial")
    step = snap.latest
    first = quiz.question_for(step, snap.config, snap.devices)
    assert first == quiz.question_for(step, snap.config, snap.devices)
    kinds = [quiz.question_for(step._replace(step=n), snap.config, snap.devices).kind for n in range(4)]
    assert sorted(kinds) == ["gather_bytes", "idle", "meet", "rows"]


@pytest.mark.slow  # spawns ranks
def test_ddp_padded_duplicates_are_the_ranks_whose_shard_repeats_a_row():
    snap = run_to_end(dataclasses.replace(controls.preset("Uneven shards").config, epochs=1))
    assert snap.status == "finished"
    q = asked(snap, "padded")
    shards = snap.extra["shards"]["latest"]
    assert q.value == tuple(r["rank"] for r in shards["ranks"] if r["padded"])
    assert q.value == (1, 2)  # 10 rows on 3 ranks: positions 10 and 11 of the padded order, 10 % 3, 11 % 3
    assert q.choices[q.answer].say("en") == "rank 1, rank 2"
    check_choices(q)
    rows = asked(snap, "rows")
    replica = next(r for r in snap.latest.replicas if r.device == field(rows, "device"))
    assert rows.value == replica.rows == 4  # ceil(10 / 3) rows a rank, the whole shard in one step


@pytest.mark.slow  # spawns ranks
@pytest.mark.parametrize("schedule, held", [("gpipe", 4), ("1f1b", 2)])
def test_a_pipelines_questions_read_its_blocks_and_say_their_choices(schedule, held):
    """GPipe runs all m forwards before a backward, so stage 0 holds m = 4; 1F1B holds at most p = 2. The
    choices are said in both languages, as a room says them to key its question (a Text built with a count
    once looked for a plural key the catalog has not)."""
    snap = one_epoch("Pipeline (stages, 1F1B)", schedule=schedule)
    q = asked(snap, "pp_held")
    assert q.value == held and q.choices[q.answer].say("en") == str(held)
    assert (field(q, "p"), field(q, "m")) == (2, 4)
    check_choices(q)
    assert quiz.question_key(q)
    wait = asked(snap, "pp_wait")
    labels = [short_label(r.device) for r in snap.latest.replicas]
    assert wait.value == labels[1]  # the second stage waits for the first one's activations
    assert [c.say("zh") for c in wait.choices] == sorted(labels)
    assert quiz.question_key(wait)


def test_ddp_without_padding_asks_no_padding_question():
    cfg = FitConfig(strategy="ddp", workers=2, devices="cpu", data_size=10, batch_size=10)
    step = ddp_step()
    labels = tuple(r.device for r in step.replicas)
    kinds = [q.kind for q in quiz.questions(step, cfg, labels, {"shards": first_epoch_value(cfg, labels)})]
    assert kinds == ["rows"]


def test_scores_count_once_per_question_and_per_browser():
    scores = quiz.Scores()
    assert scores.answer("a" * 32, "run-1/3", 2, right=True)
    assert not scores.answer("a" * 32, "run-1/3", 0, right=False)  # a second click does not count
    assert scores.answer("a" * 32, "run-1/4", 1, right=False)
    assert scores.tally("a" * 32) == (1, 2) and scores.chosen("a" * 32, "run-1/3") == 2
    assert scores.tally("b" * 32) == (0, 0) and scores.chosen("b" * 32, "run-1/3") is None
    small = quiz.Scores(owners=2)
    for owner in "xyz":
        small.answer(owner, "q", 0, right=True)
    assert small.tally("x") == (0, 0) and small.tally("z") == (1, 1)  # the oldest owner is forgotten
