"""fitcore.rooms and its routes: a class's answers counted per room, seen and revealed by its teacher only;
bad or guessed codes get nothing and change nothing (fuzzed)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore import api
from fitcore.rooms import MAX_ROOMS, MAX_VOTERS, RoomNotFound, Rooms, RoomsFull
from tests.helpers import FakeClock
from tests.test_live import call

TEACHER, STUDENTS = "e" * 32, [f"{i:032x}" for i in range(1, 41)]
Q = "rows/3/5b2c"


def students(n: int) -> list[str]:
    return STUDENTS[:n]


def test_a_room_counts_each_browsers_answer_once_and_shows_the_counts_to_its_teacher_only():
    rooms = Rooms()
    code = rooms.open(TEACHER)
    assert len(code) == 22 and rooms.open(TEACHER) != code  # token_urlsafe(16): 128 random bits
    rooms.ask(code, TEACHER, Q, 4)
    for i, s in enumerate(students(30)):
        assert rooms.answer(code, s, Q, [0, 1, 1, 2, 1][i % 5])
    assert not rooms.answer(code, STUDENTS[0], Q, 3)  # a second click, a reload: counted once
    assert not rooms.answer(code, STUDENTS[31], "idle/3/aa", 0)  # not the room's question
    assert not rooms.answer(code, STUDENTS[31], Q, 4)  # no such choice
    state = rooms.state(code, TEACHER)
    assert state.counts == (6, 18, 6, 0) and state.answered == 30 and not state.revealed
    assert rooms.state(code, STUDENTS[0]).counts is None  # a student sees no one's answers
    with pytest.raises(RoomNotFound):
        rooms.reveal(code, STUDENTS[0], Q)  # nor reveals
    rooms.reveal(code, TEACHER, Q)
    assert rooms.state(code, STUDENTS[5]).revealed
    assert not rooms.answer(code, STUDENTS[35], Q, 0)  # answered after the reveal: not counted
    rooms.ask(code, TEACHER, "idle/4/bb", 3)  # the next question: new counts
    assert rooms.state(code, TEACHER).counts == (0, 0, 0)
    rooms.close(code, TEACHER)
    with pytest.raises(RoomNotFound):
        rooms.state(code, TEACHER)  # gone with the room


def test_rooms_are_capped_and_expire_without_their_teacher():
    clock = FakeClock()
    rooms = Rooms(clock, ttl=60)
    codes = [rooms.open(TEACHER) for _ in range(MAX_ROOMS)]
    with pytest.raises(RoomsFull):
        rooms.open(TEACHER)
    rooms.ask(codes[0], TEACHER, Q, 2)
    voters = [f"{i:032x}" for i in range(MAX_VOTERS + 5)]
    counted = sum(rooms.answer(codes[0], v, Q, 0) for v in voters)
    assert counted == MAX_VOTERS
    clock.advance(61)
    assert len(rooms.open(TEACHER)) == 22 and len(rooms) == 1  # the idle ones were closed


@pytest.fixture
def rooms():
    return Rooms()


def test_the_routes_answer_the_student_and_the_teacher(rooms):
    code = rooms.open(TEACHER)
    rooms.ask(code, TEACHER, Q, 4)
    room, answer = api.room_handler(lambda: rooms), api.answer_handler(lambda: rooms)
    assert call(answer, "POST", urlencode({"room": code, "q": Q, "choice": 2}), STUDENTS[0]) == (204, None)
    status, body = call(answer, "POST", urlencode({"room": code, "q": Q, "choice": 1}), STUDENTS[0])
    assert status == 409 and "answered once" in body["error"]
    assert call(room, "GET", urlencode({"room": code}), STUDENTS[1]) == (
        200, {"question": Q, "revealed": False, "answered": 1},
    )  # fmt: skip
    assert call(room, "GET", urlencode({"room": code}), TEACHER)[1]["counts"] == [0, 0, 1, 0]
    assert call(room, "GET", urlencode({"room": code}), None)[0] == 403
    assert call(room, "GET", urlencode({"room": "x" * 22}), STUDENTS[1])[0] == 404  # well-formed, not open


def state_of(rooms: Rooms, code: str):
    return rooms.state(code, TEACHER)


hostile = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)


@settings(max_examples=60)
@given(
    code=st.one_of(hostile, st.text(alphabet="ABCdef0189_-", min_size=22, max_size=22)),
    question=st.one_of(hostile, st.just(Q)),
    choice=st.one_of(hostile, st.sampled_from(["0", "1", "7", "8", "-1", "01"])),
    owner=st.one_of(st.none(), hostile, st.just(STUDENTS[2])),
    method=st.sampled_from(["GET", "POST"]),
)
def test_a_bad_or_guessed_room_code_gets_nothing_and_changes_nothing(code, question, choice, owner, method):
    rooms = Rooms()
    real = rooms.open(TEACHER)
    rooms.ask(real, TEACHER, Q, 4)
    before = state_of(rooms, real)
    handler = api.room_handler(lambda: rooms) if method == "GET" else api.answer_handler(lambda: rooms)
    query = urlencode({"room": code, "q": question, "choice": choice})
    status, body = call(handler, method, query, owner)
    assert 400 <= status < 500 and set(body) == {"error"}  # never the room, never a traceback
    assert "\n" not in body["error"]
    assert state_of(rooms, real) == before and len(rooms) == 1
