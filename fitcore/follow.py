"""A room's students follow its teacher's run: one copy of each update, made once and sent to every student.

A student's live view polls GET /fitcore/live?room=<code>&run=<the run it shows>&since=<its last step>
(fitcore.api). The room names its teacher (fitcore.core.rooms, on the server only); the teacher's latest run
is the run followed. Each update of that run (its Run.stamp moves) is made into one JSON answer per language,
with the last FOLLOW_WINDOW steps of its history, and every student who polled within them gets that very
answer: the charts merge the steps they already hold. A student whose page shows another run (the teacher
started a new one), or who fell further behind, gets a whole answer of its own, once.

Each answer ends with the room's part, the only one made per student: the teacher's phase of the step
(`walk`), and, while the teacher's paused step asks the room a question, its text and choices, the
student's own answer, and after the reveal the right one and why. The counts stay the teacher's. While the
question waits for a student's answer (and the reveal), that student is sent the run without the step's
picture: the answer is in its numbers, and a page's data is readable by whoever holds the page.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Callable

from fitcore.core import i18n
from fitcore.core.events import Status
from fitcore.core.rooms import Rooms, RoomState
from fitcore.kit import live
from fitcore.runs.pool import RunNotFound, RunPool
from fitcore.runs.runner import Snapshot
from fitcore.view import quiz

FOLLOW_WINDOW = 64  # steps of history a shared answer carries: a page that polled within them merges it
MAX_SHARED = 64  # shared answers kept at once (run x language): a server's rooms, with room to spare


@dataclass(frozen=True)
class Shared:
    """One update of a followed run in one language: the answer every student gets, made once."""

    stamp: tuple
    base: int  # the step after which its history starts
    head: str  # the payload's JSON without its closing brace, for each student's room part to follow
    question: quiz.Question | None  # the question the run's paused step asks, if it asks one
    status: Status
    veiled: str = ""  # head without the step's picture: for a student who has not answered the question yet

    def head_for(self, state: RoomState) -> str:
        """The head a student gets: without the step's picture while the room's question about it waits for
        this student's answer and the reveal."""
        if self.veiled and asks(state, self) and not state.revealed and state.mine is None:
            return self.veiled
        return self.head


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def asks(state: RoomState, shared: Shared | None) -> bool:
    """Does the room ask the question of this update's paused step?"""
    question = shared.question if shared is not None and shared.status == Status.PAUSED else None
    return question is not None and state.question == quiz.question_key(question)


def room_part(state: RoomState, shared: Shared | None, run_id: str | None, lang: str) -> dict:
    """What a student's page shows of the room beside the run: the teacher's phase, the question it asks."""
    part: dict[str, Any] = {"walk": None, "question": None}
    if state.walk is not None and run_id is not None and state.walk[0] == run_id:
        part["walk"] = {"step": state.walk[1], "phase": state.walk[2]}
    if asks(state, shared):
        question = shared.question
        view = quiz.question_view(question, lang)  # the right answer only once the teacher reveals it
        view.update(revealed=state.revealed, mine=state.mine)
        if state.revealed:
            view.update(answer=question.answer, why=question.explanation.say(lang))
        part["question"] = view
    return part


class Followers:
    """The shared answers of the runs that rooms follow; thread-safe."""

    def __init__(self, get_pool: Callable[[], RunPool], get_rooms: Callable[[], Rooms]):
        self._get_pool, self._get_rooms = get_pool, get_rooms
        self._lock = threading.Lock()
        self._shared: dict[tuple[str, str], Shared] = {}
        self.made = 0  # shared answers made: what the room benchmark counts against the answers sent

    def _make(self, snap: Snapshot, number: int, lang: str, stamp: tuple, since: int) -> Shared:
        with i18n.using(lang):  # the status line and the run's label in the student's language
            body = live.payload(snap, since, number)
        question = None
        if snap.status == Status.PAUSED and snap.latest is not None:
            question = quiz.question_for(snap.latest, snap.config, snap.devices, snap.extra)
        veiled = _json({**body, "picture": None})[:-1] if question is not None else ""
        return Shared(stamp, since, _json(body)[:-1], question, snap.status, veiled)

    def shared(self, teacher: str, run_id: str, lang: str) -> Shared:
        """The run's current update in `lang`, made again only when the run has moved (its stamp)."""
        pool = self._get_pool()
        stamp = pool.stamp(teacher, run_id)
        key = (run_id, lang)
        with self._lock:
            found = self._shared.get(key)
        if found is not None and found.stamp == stamp:
            return found
        snap = pool.snapshot(teacher, run_id, keep=False)
        base = max(0, snap.step - FOLLOW_WINDOW)
        made = self._make(snap, pool.run_number(teacher, run_id), lang, stamp, base)
        with self._lock:
            if len(self._shared) >= MAX_SHARED and key not in self._shared:
                self._shared.pop(next(iter(self._shared)))  # the oldest made
            self._shared[key] = made
            self.made += 1
        return made

    def answer(self, code: str, follower: str, shown_run: str | None, since: int, lang: str) -> str:
        """The JSON a student's page gets: the teacher's run since `since` (all of it for another run than
        the one it shows), then the room's part. RoomNotFound for a bad code or the teacher's own page."""
        teacher, state = self._get_rooms().follow(code, follower)
        pool = self._get_pool()
        run_id = pool.latest_run(teacher)
        try:
            shared = self.shared(teacher, run_id, lang) if run_id is not None else None
        except RunNotFound:  # dropped meanwhile: the teacher has no run to follow now
            run_id, shared = None, None
        if shared is None:
            return _json({"run": None, "follow": room_part(state, None, None, lang)})
        head = shared.head_for(state)
        if shown_run != run_id or since < shared.base:  # a new run, or a page far behind: its own answer
            try:
                snap = pool.snapshot(teacher, run_id, keep=False)
                own = self._make(snap, pool.run_number(teacher, run_id), lang, shared.stamp, 0)
            except RunNotFound:
                return _json({"run": None, "follow": room_part(state, None, None, lang)})
            head = own.head_for(state)
        return f'{head},"follow":{_json(room_part(state, shared, run_id, lang))}}}'
