"""A room's students follow its teacher's run (fitcore.follow, the live route with `room=`): one shared
answer per update, the room's question and the reveal, the teacher's phase, and nothing a student can use
to control or even name the teacher's run.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import api
from fitcore.core.config import FitConfig
from fitcore.core.rooms import RoomNotFound, Rooms
from fitcore.follow import FOLLOW_WINDOW, Followers
from fitcore.runs.pool import PoolSettings, RunPool
from fitcore.view import quiz
from tests.helpers import wait_for
from tests.test_api import FAR, call, owner_cookie

TEACHER, ANN, BEN = "a" * 32, "b" * 32, "c" * 32


def _room(cfg: FitConfig):
    """A pool with the teacher's run of `cfg`, paused after 10 steps, and a room."""
    pool = RunPool(PoolSettings(max_active=2, idle_timeout=FAR, closed_grace=FAR), reap_interval=FAR)
    rooms = Rooms()
    code = rooms.open(TEACHER)
    run_id = pool.submit(TEACHER, cfg, pace=200.0).run_id
    wait_for(lambda: pool.snapshot(TEACHER, run_id).step >= 10, what="ten steps")
    pool.pause(TEACHER, run_id)
    # paused once the step under way when Pause came has ended: from then its step stands still
    wait_for(lambda: pool.snapshot(TEACHER, run_id).status == "paused", what="the pause")
    yield pool, rooms, code, run_id
    pool.shutdown()


@pytest.fixture
def room():
    """The teacher's paused run (40 steps of 2 emulated devices, paused after 10) and a room."""
    yield from _room(FitConfig(data_size=20, batch_size=10, epochs=20, devices="virtual:2", seed=1))


@pytest.fixture
def pp_room():
    """The same on a pipeline: 2 gloo ranks, 4 layers, 1F1B over 2 microbatches of 5 rows."""
    cfg = FitConfig(strategy="pp", devices="cpu", workers=2, layers=4, microbatches=2, data_size=20,
                    batch_size=10, epochs=20, seed=1)  # fmt: skip
    yield from _room(cfg)


def app(pool, rooms):
    from starlette.applications import Starlette

    return Starlette(routes=api.routes(lambda: pool, get_rooms=lambda: rooms))


def follow(server, owner, code, **query) -> tuple[int, dict]:
    answer = call(
        server, "GET", api.LIVE_PATH, urlencode({"room": code, **query}).encode(), owner_cookie(owner)
    )
    return answer.status, (answer.json() if answer.body else {})


def test_a_student_sees_the_teachers_run_whole_then_one_shared_update_for_everyone(room):
    pool, rooms, code, run_id = room
    server = app(pool, rooms)
    snap = pool.snapshot(TEACHER, run_id)
    status, body = follow(server, ANN, code)  # a page that shows no run yet: the whole history
    assert status == 200 and body["run"]["id"] == run_id and body["run"]["status"] == "paused"
    assert [p[0] for p in body["loss"]] == [s for s, _ in snap.loss_history]
    assert body["follow"] == {"walk": None, "question": None}
    followers = Followers(lambda: pool, lambda: rooms)
    first = followers.answer(code, ANN, run_id, snap.step, "en")
    second = followers.answer(code, BEN, run_id, snap.step - 3, "en")
    assert followers.made == 1  # both pages got the one update, made once
    assert first.split(',"follow":')[0] == second.split(',"follow":')[0]
    shared = json.loads(first)
    assert shared["run"]["step"] == snap.step and shared["picture"]["step"] == snap.step
    # a page of another run, or further behind than the window, gets its own whole answer
    own = json.loads(followers.answer(code, BEN, "run-999", 0, "en"))
    assert [p[0] for p in own["loss"]][0] == 1 and followers.made == 1
    assert FOLLOW_WINDOW >= 1


def paused_question(room) -> tuple:
    """The room's routes, the teacher's paused step, the question it asks and that question's key."""
    pool, rooms, code, run_id = room
    snap = pool.snapshot(TEACHER, run_id)
    question = quiz.question_for(snap.latest, snap.config, snap.devices, snap.extra)
    return app(pool, rooms), snap, question, quiz.question_key(question)


# a pipeline's room too: its questions once broke the page and the students' polls (a choice said as a
# plural count the catalog has not)
@pytest.mark.parametrize("which", ["room", pytest.param("pp_room", marks=pytest.mark.slow)])
def test_the_teachers_question_reaches_every_student_and_the_tally_stays_the_teachers(request, which):
    room = request.getfixturevalue(which)
    pool, rooms, code, run_id = room
    server, snap, question, key = paused_question(room)
    assert follow(server, ANN, code)[1]["follow"]["question"] is None  # not asked yet: no question
    rooms.ask(code, TEACHER, key, len(question.choices))
    _, body = follow(server, ANN, code, run=run_id, since=snap.step)
    asked = body["follow"]["question"]
    assert asked["key"] == key and asked["text"] == question.text.say("en") and asked["mine"] is None
    assert asked["choices"] == [c.say("en") for c in question.choices]
    assert "answer" not in asked and "why" not in asked and "counts" not in json.dumps(body)
    wrong = (question.answer + 1) % len(question.choices)
    follow(server, BEN, code)  # Ben's page joins too: a room counts the answers of the pages that read it
    for owner, choice in ((ANN, question.answer), (BEN, wrong), (BEN, question.answer)):
        call(server, "POST", api.ANSWER_PATH, urlencode({"room": code, "q": key, "choice": choice}).encode(),
             owner_cookie(owner))  # fmt: skip
    assert rooms.state(code, TEACHER).counts[question.answer] == 1  # Ben's second answer did not count
    assert follow(server, BEN, code, run=run_id, since=snap.step)[1]["follow"]["question"]["mine"] == wrong
    rooms.reveal(code, TEACHER, key)
    revealed = follow(server, BEN, code, run=run_id, since=snap.step)[1]["follow"]["question"]
    assert revealed["revealed"] and revealed["answer"] == question.answer
    assert revealed["why"] == question.explanation.say("en")
    zh = follow(server, ANN, code, run=run_id, since=snap.step, lang="zh")[1]["follow"]["question"]
    assert zh["text"] == question.text.say("zh") != question.text.say("en")


def test_the_teachers_phase_reaches_the_students_and_only_the_teacher_sets_it(room):
    pool, rooms, code, run_id = room
    server = app(pool, rooms)
    walk = urlencode({"room": code, "run": run_id, "step": 10, "phase": 3}).encode()
    assert call(server, "POST", api.WALK_PATH, walk, owner_cookie(ANN)).status == 404  # a student: no room
    assert rooms.state(code, TEACHER).walk is None
    assert call(server, "POST", api.WALK_PATH, walk, owner_cookie(TEACHER)).status == 204
    assert follow(server, ANN, code, run=run_id, since=0)[1]["follow"]["walk"] == {"step": 10, "phase": 3}
    assert rooms.state(code, TEACHER).following == 1  # Ann's page follows


def test_a_student_can_neither_read_nor_control_the_teachers_run_as_its_own(room):
    pool, rooms, code, run_id = room
    server = app(pool, rooms)
    for method, path in (("GET", api.LIVE_PATH), ("POST", api.BYE_PATH)):
        answer = call(server, method, path, urlencode({"run": run_id}).encode(), owner_cookie(ANN))
        assert answer.status == 404, (path, answer.status)
    bad = [
        ({"room": "x" * 22, "run": run_id}, 404),  # not a room
        ({"room": code[:-1]}, 400),  # not a room code
        ({"room": code, "since": "-1"}, 400),
        ({"room": code, "lang": "fr"}, 400),
    ]
    for query, want in bad:
        assert follow(server, ANN, **{"code": query.pop("room")}, **query)[0] == want, query
    # the teacher's own page is no follower: it reads its run as its own
    assert follow(server, TEACHER, code)[0] == 404
    with pytest.raises(RoomNotFound):
        rooms.follow(code, TEACHER)
    # nothing a student sent changed the run
    assert pool.snapshot(TEACHER, run_id).status == "paused"
    assert TEACHER not in json.dumps(follow(server, ANN, code)[1])  # the teacher's owner id never leaves


def test_a_room_without_a_run_yet_and_a_closed_room(room):
    pool, rooms, _, _ = room
    code = rooms.open("d" * 32)  # a teacher who has not started
    server = app(pool, rooms)
    status, body = follow(server, ANN, code)
    assert status == 200 and body == {"run": None, "follow": {"walk": None, "question": None}}
    rooms.close(code, "d" * 32)
    assert follow(server, ANN, code)[0] == 404


HOSTILE = st.one_of(
    st.none(), st.text(max_size=30), st.sampled_from(["run-1", "run-", "0", "99", "-1", "１"])
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from([api.LIVE_PATH, api.WALK_PATH, api.REVEAL_PATH, api.ANSWER_PATH]),
    method=st.sampled_from(["GET", "POST", "PUT"]),
    owner=st.sampled_from([ANN, BEN, "z" * 32, ""]),
    code=st.one_of(st.just("real"), HOSTILE),
    run=HOSTILE,
    step=HOSTILE,
    phase=HOSTILE,
    q=HOSTILE,
    choice=HOSTILE,
    since=HOSTILE,
    lang=HOSTILE,
)
def test_a_students_any_request_on_the_room_routes_is_4xx_or_its_own_view_and_changes_nothing(
    room, path, method, owner, code, run, step, phase, q, choice, since, lang
):
    pool, rooms, real_code, run_id = room
    server = app(pool, rooms)
    before = (rooms.state(real_code, TEACHER), pool.snapshot(TEACHER, run_id).status)
    params = {"room": real_code if code == "real" else code, "run": run, "step": step, "phase": phase, "q": q,
              "choice": choice, "since": since, "lang": lang}  # fmt: skip
    query = urlencode({k: v for k, v in params.items() if v is not None}).encode()
    got = call(server, method, path, query, owner_cookie(owner) if owner else [])
    assert got.status < 500, got.body
    if got.status == 200:  # a student's own view of the teacher's run: never its owner, never the counts
        assert path == api.LIVE_PATH and TEACHER not in got.body.decode() and b'"counts"' not in got.body
    after = (rooms.state(real_code, TEACHER), pool.snapshot(TEACHER, run_id).status)
    if path != api.ANSWER_PATH:  # an answer is the one thing a student may add (none is asked here)
        assert after[0].walk == before[0].walk and after[0].revealed == before[0].revealed
    assert after[0].counts == before[0].counts and after[1] == before[1]


def test_a_student_is_sent_the_asked_steps_picture_only_after_answering_or_the_reveal(room):
    """The answer is in the step's numbers: a page that has not answered gets the run without the picture."""
    pool, rooms, code, run_id = room
    server, snap, question, key = paused_question(room)
    before = follow(server, ANN, code, run=run_id, since=0)[1]
    assert before["picture"]["step"] == snap.step  # not asked yet: the step is there
    rooms.ask(code, TEACHER, key, len(question.choices))
    for owner, since in ((ANN, 0), (BEN, 0), (ANN, snap.step)):  # a whole answer, and the shared one
        body = follow(server, owner, code, run=run_id, since=since)[1]
        assert body["picture"] is None and body["follow"]["question"]["key"] == key
        assert body["run"]["step"] == snap.step and body["loss"][-1][0] == snap.step  # the run, the charts
    answer = urlencode({"room": code, "q": key, "choice": question.answer}).encode()
    assert call(server, "POST", api.ANSWER_PATH, answer, owner_cookie(ANN)).status == 204
    assert follow(server, ANN, code, run=run_id, since=snap.step)[1]["picture"]["step"] == snap.step
    assert follow(server, BEN, code, run=run_id, since=snap.step)[1]["picture"] is None  # Ben has not
    rooms.reveal(code, TEACHER, key)
    assert follow(server, BEN, code, run=run_id, since=snap.step)[1]["picture"]["step"] == snap.step
