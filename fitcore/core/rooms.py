"""Ask mode as a room: a teacher's code, the class's answers to the current question counted on the server.

A teacher opens a room and shares its code in the link (`?room=<code>`, unguessable: secrets.token_urlsafe).
The teacher's page sets the room's current question as it asks it; each student's page answers it once;
the room keeps counts only (one number per choice, and which browsers have answered, so that none counts
twice: never a name), at most MAX_VOTERS answers a question. An answer counts for a browser whose page
follows the room (it read the room from its page) and that the server signed (fitcore.core.identity, checked
by the route): never for the teacher, never twice, never for a made-up id. The teacher's page reads the counts
and reveals the answer, which every student's page then shows at once. A room is gone when its teacher
closes it, after ROOM_IDLE_S without its teacher's page reading it (the page reads it every second or so
while it is open), or when the server stops. One teacher holds at most MAX_ROOMS_PER_TEACHER rooms, one
address at most MAX_ROOMS_PER_ADDRESS, and the server at most MAX_ROOMS.

Only the room's teacher (its owner id, the browser's `fitcore_owner`) sees the counts, asks or reveals; a
code that is not an open room's answers exactly like a malformed one: nothing, and it changes nothing.

Students follow the teacher's run: a student's page reads it through the room (fitcore.follow), never by
the teacher's owner id, which no page but the teacher's ever sees. The room keeps which phase of the step
the teacher's picture shows (`walk`), and which pages followed it lately (a count for the teacher).
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

CODE_BYTES = 16  # 128 random bits: 22 URL-safe characters, not guessed in any number of tries a server allows
CODE_PATTERN = re.compile(r"[A-Za-z0-9_-]{22}")
# What a student types: 6 characters with no look-alikes (no 0/O, 1/I/L), like a quiz game's PIN. A page
# joins by it; the routes take the room's full code only, which the page learns on joining.
PIN_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
PIN_LENGTH = 6
PIN_PATTERN = re.compile(rf"[{PIN_ALPHABET}]{{{PIN_LENGTH}}}")
QUESTION_PATTERN = re.compile(r"[0-9a-z_/-]{1,64}")  # the teacher's page's question key (quiz.question_key)
MAX_ROOMS = 50  # rooms open at once on one server
MAX_ROOMS_PER_TEACHER = 3  # one browser's rooms at once: a class, and a spare
MAX_ROOMS_PER_ADDRESS = 10  # rooms opened from one address at once: a few teachers behind a school's address
MAX_VOTERS = 200  # answers counted per question (a class, with room to spare)
MAX_CHOICES = 8
ROOM_IDLE_S = 20 * 60.0  # a room whose teacher's page has not read it for this long (the page is gone) closes
MAX_FOLLOWERS = 500  # pages counted as following a room at once
FOLLOWING_S = 5.0  # a page that read the room within this many seconds follows it


class RoomNotFound(Exception):
    """No open room has this code, or the caller is not its teacher: the same answer either way."""


class RoomsFull(Exception):
    """A limit on rooms is met: `limit` says which ("teacher", "address" or "server"), `most` its number."""

    def __init__(self, limit: str, most: int):
        super().__init__(limit, most)
        self.limit, self.most = limit, most


class Answer(str, Enum):
    """What became of an answer: counted, or why not (true only when counted)."""

    COUNTED = "counted"
    NO_CHOICE = "no_choice"  # a choice the question does not have: a bad request
    NOT_FOLLOWING = "not_following"  # no page of this browser reads the room: not one of the class
    TEACHER = "teacher"  # the room's own teacher: never counted in the class's tally
    OTHER_QUESTION = "other_question"  # not the room's current question
    REVEALED = "revealed"  # the answer is out already
    ANSWERED = "answered"  # this browser answered already
    FULL = "full"  # MAX_VOTERS answers are in

    def __bool__(self) -> bool:
        return self is Answer.COUNTED


@dataclass
class _Room:
    teacher: str
    seen: float  # when the teacher last read it
    address: str | None = None  # where the teacher's page opened it from
    pin: str = ""  # the short code a student types
    question: str = ""  # the current question's key; "" before the first
    counts: list[int] = field(default_factory=list)  # answers per choice
    voters: dict[str, int] = field(default_factory=dict)  # each browser's choice (owner ids, no names)
    revealed: bool = False
    walk: tuple[str, int, int] | None = None  # the teacher's picture: (run id, step, phase index)
    followers: dict[str, float] = field(default_factory=dict)  # owner id -> when it last read the room


@dataclass(frozen=True)
class RoomState:
    """What a page reads of a room: the current question, whether it is revealed, and (for its teacher)
    the counts per choice."""

    question: str
    revealed: bool
    answered: int
    counts: tuple[int, ...] | None  # None for a student: the class's answers are the teacher's to show
    mine: int | None = None  # the reader's own answer to the current question
    following: int = 0  # pages that follow the room now (for its teacher; 0 for a student)
    walk: tuple[str, int, int] | None = None  # the teacher's picture: (run id, step, phase index)


class Rooms:
    """Every open room on this server, each under its code; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl: float = ROOM_IDLE_S):
        self._lock = threading.Lock()
        self._rooms: dict[str, _Room] = {}
        self._clock = clock
        self._ttl = ttl

    def _expire(self) -> None:
        now = self._clock()
        for code in [c for c, r in self._rooms.items() if now - r.seen > self._ttl]:
            del self._rooms[code]

    def _room(self, code: str, teacher: str | None = None) -> _Room:
        room = self._rooms.get(code) if isinstance(code, str) else None
        if room is None or (teacher is not None and room.teacher != teacher):
            raise RoomNotFound(code)
        return room

    def open(self, teacher: str, address: str | None = None) -> str:
        """A new room for this teacher's browser, opened from `address`; its code. RoomsFull names the limit
        met: the teacher's, the address's or the server's."""
        with self._lock:
            self._expire()
            rooms = self._rooms.values()
            if sum(r.teacher == teacher for r in rooms) >= MAX_ROOMS_PER_TEACHER:
                raise RoomsFull("teacher", MAX_ROOMS_PER_TEACHER)
            if address is not None and sum(r.address == address for r in rooms) >= MAX_ROOMS_PER_ADDRESS:
                raise RoomsFull("address", MAX_ROOMS_PER_ADDRESS)
            if len(self._rooms) >= MAX_ROOMS:
                raise RoomsFull("server", MAX_ROOMS)
            code = secrets.token_urlsafe(CODE_BYTES)
            taken = {r.pin for r in rooms}
            pin = next(p for p in iter(_new_pin, None) if p not in taken)
            self._rooms[code] = _Room(teacher, self._clock(), address, pin)
            return code

    def pin(self, code: str) -> str:
        """The room's short code, for its teacher's page to show. RoomNotFound for a closed room."""
        with self._lock:
            return self._room(code).pin

    def by_pin(self, typed: str) -> str:
        """The full code of the open room whose short code was typed (case and spaces as a hand types them).
        RoomNotFound for any other text."""
        pin = "".join(str(typed).split()).upper()
        with self._lock:
            self._expire()
            if PIN_PATTERN.fullmatch(pin):
                for code, room in self._rooms.items():
                    if room.pin == pin:
                        return code
        raise RoomNotFound(pin)

    def close(self, code: str, teacher: str) -> None:
        with self._lock:
            self._room(code, teacher)
            del self._rooms[code]

    def ask(self, code: str, teacher: str, question: str, choices: int) -> None:
        """The teacher's page asks `question` (a new one clears the counts; the same one keeps them)."""
        if not QUESTION_PATTERN.fullmatch(question) or not 2 <= choices <= MAX_CHOICES:
            raise ValueError(question)
        with self._lock:
            room = self._room(code, teacher)
            room.seen = self._clock()
            if room.question != question:
                room.question, room.counts, room.voters, room.revealed = question, [0] * choices, {}, False

    def answer(self, code: str, voter: str, question: str, choice: int) -> Answer:
        """Count voter's answer to the room's current question, once; otherwise why it does not count (an
        Answer, false). `voter` must follow the room from its page and not be its teacher; the route checks
        that the server signed it. RoomNotFound for a bad code."""
        with self._lock:
            room = self._room(code)
            if voter == room.teacher:
                return Answer.TEACHER
            if voter not in room.followers:
                return Answer.NOT_FOLLOWING
            if question != room.question:
                return Answer.OTHER_QUESTION
            if not 0 <= choice < len(room.counts):
                return Answer.NO_CHOICE
            if room.revealed:
                return Answer.REVEALED
            if voter in room.voters:
                return Answer.ANSWERED
            if len(room.voters) >= MAX_VOTERS:
                return Answer.FULL
            room.voters[voter] = choice
            room.counts[choice] += 1
            return Answer.COUNTED

    def reveal(self, code: str, teacher: str, question: str) -> None:
        with self._lock:
            room = self._room(code, teacher)
            room.seen = self._clock()
            if question == room.question:
                room.revealed = True

    def state(self, code: str, reader: str) -> RoomState:
        """The room as `reader` may see it: with the counts only for its teacher."""
        with self._lock:
            self._expire()
            room = self._room(code)
            teacher = reader == room.teacher
            now = self._clock()
            if teacher:
                room.seen = now
            counts = tuple(room.counts) if teacher else None
            following = sum(now - t <= FOLLOWING_S for t in room.followers.values()) if teacher else 0
            mine = room.voters.get(reader)
            answered = len(room.voters)
            return RoomState(room.question, room.revealed, answered, counts, mine, following, room.walk)

    def follow(self, code: str, follower: str) -> tuple[str, RoomState]:
        """A student's page reads the room: (its teacher's owner id, the room as the student sees it). The
        owner id stays on the server: it finds the run the page follows, and is never sent to a page.
        RoomNotFound for a bad code, and for the teacher's own page (it shows its run as its own)."""
        with self._lock:
            self._expire()
            room = self._room(code)
            if follower == room.teacher:
                raise RoomNotFound(code)
            now = self._clock()
            if follower in room.followers or len(room.followers) < MAX_FOLLOWERS:
                room.followers[follower] = now
            if len(room.followers) >= MAX_FOLLOWERS:  # forget the pages that stopped reading
                room.followers = {o: t for o, t in room.followers.items() if now - t <= FOLLOWING_S}
            mine = room.voters.get(follower)
            state = RoomState(room.question, room.revealed, len(room.voters), None, mine, 0, room.walk)
            return room.teacher, state

    def walk_to(self, code: str, teacher: str, run_id: str, step: int, phase: int) -> None:
        """The teacher's picture shows this phase of this step: the students' pictures show it too."""
        with self._lock:
            room = self._room(code, teacher)
            room.seen = self._clock()
            room.walk = (run_id, step, phase)

    def is_teacher(self, code: str, owner: str) -> bool:
        with self._lock:
            room = self._rooms.get(code) if isinstance(code, str) else None
            return room is not None and room.teacher == owner

    def __len__(self) -> int:
        with self._lock:
            return len(self._rooms)


def _new_pin() -> str:
    return "".join(secrets.choice(PIN_ALPHABET) for _ in range(PIN_LENGTH))


_server_rooms = Rooms()


def server_rooms() -> Rooms:
    """The rooms of this server process (the page and the HTTP routes share them)."""
    return _server_rooms
