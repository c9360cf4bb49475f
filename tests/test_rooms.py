"""fitcore.core.rooms and its routes: a class's answers counted per room, seen and revealed by its teacher
only; bad or guessed codes get nothing and change nothing (fuzzed)."""

from __future__ import annotations

import asyncio
import secrets
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from fitcore import api
from fitcore.core import identity
from fitcore.core.rooms import (
    MAX_ROOMS,
    MAX_ROOMS_PER_ADDRESS,
    MAX_ROOMS_PER_TEACHER,
    MAX_VOTERS,
    ROOM_IDLE_S,
    Answer,
    RoomNotFound,
    Rooms,
    RoomsFull,
)
from tests.helpers import FakeClock
from tests.test_live import call

TEACHER, STUDENTS = "e" * 32, [f"{i:032x}" for i in range(1, 41)]
Q = "rows/3/5b2c"


def students(n: int) -> list[str]:
    return STUDENTS[:n]


def joined(rooms: Rooms, code: str, *voters: str) -> None:
    """Each voter's page reads the room, as a student's page that opened the link does."""
    for voter in voters:
        rooms.follow(code, voter)


def test_a_room_counts_each_browsers_answer_once_and_shows_the_counts_to_its_teacher_only():
    rooms = Rooms()
    code = rooms.open(TEACHER)
    assert len(code) == 22 and rooms.open(TEACHER) != code  # token_urlsafe(16): 128 random bits
    rooms.ask(code, TEACHER, Q, 4)
    joined(rooms, code, *STUDENTS)
    for i, s in enumerate(students(30)):
        assert rooms.answer(code, s, Q, [0, 1, 1, 2, 1][i % 5])
    assert rooms.answer(code, STUDENTS[0], Q, 3) == Answer.ANSWERED  # a second click, a reload: once
    assert rooms.answer(code, STUDENTS[31], "idle/3/aa", 0) == Answer.OTHER_QUESTION
    assert rooms.answer(code, STUDENTS[31], Q, 4) == Answer.NO_CHOICE
    assert rooms.answer(code, TEACHER, Q, 1) == Answer.TEACHER  # the teacher's own answer: never counted
    state = rooms.state(code, TEACHER)
    assert state.counts == (6, 18, 6, 0) and state.answered == 30 and not state.revealed
    assert rooms.state(code, STUDENTS[0]).counts is None  # a student sees no one's answers
    with pytest.raises(RoomNotFound):
        rooms.reveal(code, STUDENTS[0], Q)  # nor reveals
    rooms.reveal(code, TEACHER, Q)
    assert rooms.state(code, STUDENTS[5]).revealed
    assert rooms.answer(code, STUDENTS[35], Q, 0) == Answer.REVEALED  # after the reveal: not counted
    rooms.ask(code, TEACHER, "idle/4/bb", 3)  # the next question: new counts
    assert rooms.state(code, TEACHER).counts == (0, 0, 0)
    rooms.close(code, TEACHER)
    with pytest.raises(RoomNotFound):
        rooms.state(code, TEACHER)  # gone with the room


def test_rooms_are_capped_per_teacher_per_address_and_per_server_and_say_which():
    clock = FakeClock()
    rooms = Rooms(clock, ttl=60)
    mine = [rooms.open(TEACHER, "10.0.0.1") for _ in range(MAX_ROOMS_PER_TEACHER)]
    with pytest.raises(RoomsFull) as full:
        rooms.open(TEACHER, "10.0.0.2")  # one browser: at most its few rooms, from any address
    assert (full.value.limit, full.value.most) == ("teacher", MAX_ROOMS_PER_TEACHER)
    teachers = iter(f"{i:032x}" for i in range(100, 200))
    for _ in range(MAX_ROOMS_PER_ADDRESS - MAX_ROOMS_PER_TEACHER):
        rooms.open(next(teachers), "10.0.0.1")
    with pytest.raises(RoomsFull) as full:
        rooms.open(next(teachers), "10.0.0.1")  # a loop of browsers from one address
    assert (full.value.limit, full.value.most) == ("address", MAX_ROOMS_PER_ADDRESS)
    while len(rooms) < MAX_ROOMS:
        rooms.open(next(teachers))
    with pytest.raises(RoomsFull) as full:
        rooms.open(next(teachers))
    assert (full.value.limit, full.value.most) == ("server", MAX_ROOMS)
    rooms.ask(mine[0], TEACHER, Q, 2)
    voters = [f"{i:032x}" for i in range(MAX_VOTERS + 5)]
    joined(rooms, mine[0], *voters)
    counted = sum(bool(rooms.answer(mine[0], v, Q, 0)) for v in voters)
    assert counted == MAX_VOTERS
    assert rooms.answer(mine[0], voters[-1], Q, 0) == Answer.FULL


def test_a_room_whose_teachers_page_is_gone_closes_after_its_idle_time():
    clock = FakeClock()
    rooms = Rooms(clock)
    kept, left = rooms.open(TEACHER), rooms.open("f" * 32)
    clock.advance(ROOM_IDLE_S - 1)
    rooms.state(kept, TEACHER)  # the teacher's page reads its room every second or so
    clock.advance(2)
    assert len(rooms) == 2 and rooms.state(kept, TEACHER).question == ""
    with pytest.raises(RoomNotFound):
        rooms.state(left, "f" * 32)  # its page gone for ROOM_IDLE_S: closed
    assert len(rooms) == 1


@pytest.fixture
def rooms():
    return Rooms()


def test_the_routes_answer_the_student_and_the_teacher(rooms):
    code = rooms.open(TEACHER)
    rooms.ask(code, TEACHER, Q, 4)
    joined(rooms, code, STUDENTS[0])
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


# -- the ballot box, as an attacker tries it ------------------------------------------------------------


def test_made_up_ids_and_signatures_add_nothing_to_the_tally(rooms):
    """200 answers, each under an id (or a signature) the server never gave, change no count."""
    code = rooms.open(TEACHER)
    rooms.ask(code, TEACHER, Q, 4)
    answer = api.answer_handler(lambda: rooms)
    made_up = [secrets.token_hex(16) for _ in range(200)]
    joined(rooms, code, *made_up[:100])  # half of them even read the room first, as a script can
    for i, owner in enumerate(made_up):
        query = urlencode({"room": code, "q": Q, "choice": i % 4})
        status, body = call(answer, "POST", query, owner, signed=False)  # no signature at all
        assert status == 403 and body["error"].startswith("fitcore_signed: got ''")
    forged = [(owner, secrets.token_hex(16)) for owner in made_up]  # a signature of the right shape
    for owner, signature in forged:
        headers = [(b"cookie", f"fitcore_owner={owner}; fitcore_signed={signature}".encode())]
        assert _post(answer, {"room": code, "q": Q, "choice": 0}, headers) == 403
    assert rooms.state(code, TEACHER).counts == (0, 0, 0, 0) and rooms.state(code, TEACHER).answered == 0


def test_a_real_student_is_counted_once_whatever_others_send_in_its_name(rooms):
    code = rooms.open(TEACHER)
    rooms.ask(code, TEACHER, Q, 4)
    answer = api.answer_handler(lambda: rooms)
    student = STUDENTS[7]
    # before it answers, others post under its owner id with signatures of their own making
    for _ in range(20):
        headers = [(b"cookie", f"fitcore_owner={student}; fitcore_signed={secrets.token_hex(16)}".encode())]
        assert _post(answer, {"room": code, "q": Q, "choice": 3}, headers) == 403
    query = urlencode({"room": code, "q": Q, "choice": 1})
    assert call(answer, "POST", query, student)[0] == 403  # signed, but its page has not joined the room
    joined(rooms, code, student)
    assert call(answer, "POST", query, student) == (204, None)  # never locked out by the others
    assert rooms.state(code, TEACHER).counts == (0, 1, 0, 0)
    assert call(answer, "POST", query, student)[0] == 409  # and counted once


def test_the_teachers_own_answer_and_a_choice_out_of_range_are_refused_by_name(rooms):
    code = rooms.open(TEACHER)
    rooms.ask(code, TEACHER, Q, 3)
    answer = api.answer_handler(lambda: rooms)
    status, body = call(answer, "POST", urlencode({"room": code, "q": Q, "choice": 0}), TEACHER)
    assert status == 403 and "counts students only" in body["error"]
    joined(rooms, code, STUDENTS[0])
    status, body = call(answer, "POST", urlencode({"room": code, "q": Q, "choice": 5}), STUDENTS[0])
    assert status == 400 and body["error"] == "choice: got '5'; allowed: one of the question's choices"
    assert rooms.state(code, TEACHER).counts == (0, 0, 0)


def test_an_address_is_signed_a_bounded_number_of_browsers_a_minute():
    clock = FakeClock()
    minting = identity.Minting(clock=clock)
    assert all(minting.allow("192.0.2.7") for _ in range(identity.SIGNS_PER_MINUTE))
    assert not minting.allow("192.0.2.7") and minting.allow("192.0.2.8")  # another address: its own bound
    clock.advance(identity.SIGN_WINDOW_S)
    assert minting.allow("192.0.2.7")


def test_a_signature_is_the_servers_own():
    owner = "a" * 32
    assert identity.signed(owner, identity.sign(owner))
    assert not identity.signed(owner, identity.sign("b" * 32))  # another browser's signature
    assert not identity.signed(owner, identity.sign(owner, secret=b"another server" * 3))
    assert not identity.signed(owner, None) and not identity.signed(None, identity.sign(owner))
    assert not identity.signed(owner, identity.sign(owner).upper())  # only the form the page writes


def _post(handler, query: dict, headers: list) -> int:
    scope = {"type": "http", "method": "POST", "path": "/", "query_string": urlencode(query).encode(),
             "headers": headers}  # fmt: skip
    return asyncio.run(handler(Request(scope))).status_code
