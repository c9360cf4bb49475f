"""The server's small HTTP routes beside the page: the live view's updates, a closing page's goodbye, a
class's room (its question, and the students' answers), and the live view's own files (frontend/'s modules
and plotly.js, served here so that a classroom needs no CDN).

The first two act for the browser's owner id (the `fitcore_owner` cookie the page sets), through the same
owner rule as every other call on the pool: a run of another owner answers 404, exactly like a run that does
not exist. They are Starlette handlers (what Streamlit's own server is built on); fitcore itself never
imports streamlit.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path
from typing import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fitcore.core import i18n, identity, paths
from fitcore.core.rooms import (
    CODE_PATTERN,
    MAX_VOTERS,
    QUESTION_PATTERN,
    Answer,
    RoomNotFound,
    Rooms,
    server_rooms,
)
from fitcore.follow import Followers
from fitcore.kit import live
from fitcore.protocols import registry
from fitcore.runs.pool import RunNotFound, RunPool, server_pool

OWNER_COOKIE = "fitcore_owner"
SIGNED_COOKIE = "fitcore_signed"  # the server's signature of the owner id (fitcore.core.identity)
# the run this browser's live view showed live last (frontend/mount.js keeps it while the run is active): a
# page whose server no longer has that run (it restarted) says so once, where it would otherwise show Ready
LIVE_RUN_COOKIE = "fitcore_run"
OWNER_PATTERN = re.compile(r"[0-9a-f]{32}")  # what the page makes: uuid4().hex
RUN_PATTERN = re.compile(r"run-[0-9]{1,12}")
MAX_SINCE = 10**12
# ASCII digits only: str.isdigit() also takes "²", "①" (which int() refuses) and "٣", "１" (which it reads)
SINCE_PATTERN = re.compile(r"[0-9]{1,13}")
LIVE_PATH, BYE_PATH = "/fitcore/live", "/fitcore/bye"
PAUSE_PATH = "/fitcore/pause"  # the Pause button's press, sent by the live view at once (frontend/mount.js)
ROOM_PATH, ANSWER_PATH = "/fitcore/room", "/fitcore/room/answer"  # a class's room (fitcore.core.rooms)
WALK_PATH = "/fitcore/room/walk"  # the teacher's picture's phase, which the students' pictures follow
REVEAL_PATH = "/fitcore/room/reveal"  # the teacher reveals the room's question, from the picture
MAX_STEP = 10**9
CHOICE_PATTERN = re.compile(r"[0-7]")
STATIC_PATH = "/fitcore/static"  # + "/<file>": the live view's modules and styles, and plotly.js
FRONTEND = paths.FRONTEND
STATIC_NAME = re.compile(r"[a-z_]+\.(js|css)")  # frontend/'s own files; its tests/ and preview are not served
PLOTLY_JS = "plotly.min.js"
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def owner_of(cookies: dict) -> str | None:
    """The owner id in the cookies, or None where it is missing or not one the page could have made."""
    owner = cookies.get(OWNER_COOKIE)
    return owner if isinstance(owner, str) and OWNER_PATTERN.fullmatch(owner) else None


def live_run_of(cookies: dict) -> str | None:
    """The run id the live view last showed live, or None where the cookie is missing or not a run id."""
    run = cookies.get(LIVE_RUN_COOKIE)
    return run if isinstance(run, str) and RUN_PATTERN.fullmatch(run) else None


def _error(status: int, field: str, value: str, allowed: str) -> JSONResponse:
    # the same shape of message as everywhere: the field, the value given, what is allowed
    text = f"{field}: got {value[:40]!r}; allowed: {allowed}"
    return JSONResponse({"error": text}, status_code=status, headers={"Cache-Control": "no-store"})


def _request_args(request: Request) -> tuple[str, str | None, int] | JSONResponse:
    """(owner, run id or None for the owner's latest run, since), or the 4xx answer for bad ones."""
    owner = owner_of(request.cookies)
    if owner is None:
        return _error(403, OWNER_COOKIE, request.cookies.get(OWNER_COOKIE, ""), "the cookie the page sets")
    query = request.query_params
    run_id = query.get("run")
    if run_id is not None and not RUN_PATTERN.fullmatch(run_id):
        return _error(400, "run", run_id, "a run id such as run-12")
    since_text = query.get("since", "0")
    if not SINCE_PATTERN.fullmatch(since_text) or int(since_text) > MAX_SINCE:
        return _error(400, "since", since_text, f"a step number from 0 to {MAX_SINCE}")
    return owner, run_id, int(since_text)


def live_handler(
    get_pool: Callable[[], RunPool] = server_pool,
    get_rooms: Callable[[], Rooms] = server_rooms,
    followers: Followers | None = None,
):
    """GET /fitcore/live?run=<id>&since=<step>&lang=<en|zh>: the run's payload after step `since`
    (fitcore.kit.live), its words in `lang` (English without one). With `room=<code>`: a student's page, the
    room's teacher's run (fitcore.follow), read-only, whatever run id it names."""
    followers = followers or Followers(get_pool, get_rooms)

    async def handle(request: Request) -> Response:
        args = _request_args(request)
        if isinstance(args, Response):
            return args
        owner, run_id, since = args
        lang = request.query_params.get("lang", i18n.DEFAULT)
        if lang not in i18n.LANGUAGES:
            return _error(400, "lang", lang, " or ".join(i18n.LANGUAGES))
        if "room" in request.query_params:
            code = request.query_params["room"]
            if not CODE_PATTERN.fullmatch(code):
                return _error(400, "room", code, "the room code in the teacher's link")
            try:
                body = followers.answer(code, owner, run_id, since, lang)
            except RoomNotFound:
                return _error(404, "room", code, _NO_ROOM)
            return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})
        pool = get_pool()
        try:
            run_id = run_id or pool.latest_run(owner)
            if run_id is None:
                raise RunNotFound("")
            snap, number = pool.snapshot(owner, run_id), pool.run_number(owner, run_id)
        except RunNotFound:  # not this owner's, or dropped meanwhile: the same answer either way
            if run_id and pool.was_reset(owner, run_id):  # its page pressed Reset: nothing more to show
                return Response(status_code=204, headers={"Cache-Control": "no-store"})
            return _error(404, "run", run_id or "", "one of this browser's runs")
        with i18n.using(lang):  # the status line and the run's label in the page's language
            body = live.payload(snap, since, number)
        teach = request.query_params.get("teach")
        if teach is not None and CODE_PATTERN.fullmatch(teach):
            body["teach"] = _teacher_part(get_rooms(), teach, owner)
        return Response(
            json.dumps(body, separators=(",", ":"), allow_nan=False),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    return handle


def run_action_handler(act: str, get_pool: Callable[[], RunPool] = server_pool):
    """POST <path>?run=<id>: RunPool's `act` on this browser's run (204); another owner's run, or none: 404,
    exactly like a run that does not exist.

    bye (`page_closed`): the page is closing; free the run soon unless a page reads it again.
    pause: the live view sends the Pause button's press the moment it is pressed, so that a run at 20 steps/s
    stops within a step of the click; the page's own rerun, a few hundred ms later, pauses it again, which
    changes nothing.
    """

    async def handle(request: Request) -> Response:
        args = _request_args(request)
        if isinstance(args, Response):
            return args
        owner, run_id, _ = args
        if run_id is None:
            return _error(400, "run", "", "a run id such as run-12")
        try:
            getattr(get_pool(), act)(owner, run_id)
        except RunNotFound:
            return _error(404, "run", run_id, "one of this browser's runs")
        return Response(status_code=204)

    return handle


def _room_args(request: Request) -> tuple[str, str] | JSONResponse:
    """(owner, room code), or the 4xx answer: a missing cookie 403, a code no room could have 400."""
    owner = owner_of(request.cookies)
    if owner is None:
        return _error(403, OWNER_COOKIE, request.cookies.get(OWNER_COOKIE, ""), "the cookie the page sets")
    code = request.query_params.get("room", "")
    if not CODE_PATTERN.fullmatch(code):
        return _error(400, "room", code, "the room code in the teacher's link")
    return owner, code


_NO_ROOM = "an open room's code"  # an unknown code and a closed room answer alike: 404, nothing else


def room_handler(get_rooms: Callable[[], Rooms] = server_rooms):
    """GET /fitcore/room?room=<code>: the room's current question and whether it is revealed; the counts
    per choice for its teacher only."""

    async def handle(request: Request) -> Response:
        args = _room_args(request)
        if isinstance(args, Response):
            return args
        owner, code = args
        try:
            state = get_rooms().state(code, owner)
        except RoomNotFound:
            return _error(404, "room", code, _NO_ROOM)
        body = {"question": state.question, "revealed": state.revealed, "answered": state.answered}
        if state.counts is not None:
            body["counts"] = list(state.counts)
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    return handle


def answer_handler(get_rooms: Callable[[], Rooms] = server_rooms):
    """POST /fitcore/room/answer?room=<code>&q=<question>&choice=<0-7>: this browser's answer, counted once
    (204). 403 for a browser the server's page did not sign (fitcore.core.identity), one that does not follow
    the room from its page, or the room's teacher; 400 for a choice the question lacks; 409 where it does not
    count now (another question, revealed, answered already, the room full)."""

    async def handle(request: Request) -> Response:
        args = _room_args(request)
        if isinstance(args, Response):
            return args
        owner, code = args
        question, choice = request.query_params.get("q", ""), request.query_params.get("choice", "")
        if not QUESTION_PATTERN.fullmatch(question):
            return _error(400, "q", question, "the room's question")
        if not CHOICE_PATTERN.fullmatch(choice):
            return _error(400, "choice", choice, "a choice from 0 to 7")
        if not identity.signed(owner, request.cookies.get(SIGNED_COOKIE)):
            shown = request.cookies.get(SIGNED_COOKIE, "")
            return _error(403, SIGNED_COOKIE, shown, "the signature this server's page gave this browser")
        try:
            outcome = get_rooms().answer(code, owner, question, int(choice))
        except RoomNotFound:
            return _error(404, "room", code, _NO_ROOM)
        if outcome:
            return Response(status_code=204)
        status, field, allowed = _REFUSED[outcome]
        return _error(status, field, {"choice": choice, "q": question, "room": code}[field], allowed)

    return handle


_REFUSED = {  # why an answer did not count: (status, the field to blame, what is allowed)
    Answer.NO_CHOICE: (400, "choice", "one of the question's choices"),
    Answer.NOT_FOLLOWING: (403, "room", "a room this browser's page follows (open the room's link)"),
    Answer.TEACHER: (403, "room", "a room of another teacher: the class's tally counts students only"),
    Answer.OTHER_QUESTION: (409, "q", "the room's current question"),
    Answer.REVEALED: (409, "q", "a question not revealed yet"),
    Answer.ANSWERED: (409, "q", "the room's current question, answered once"),
    Answer.FULL: (409, "q", f"one of the first {MAX_VOTERS} answers"),
}


def _teacher_part(rooms: Rooms, code: str, owner: str) -> dict | None:
    """What the teacher's picture shows of its room: the question asked, the counts per choice as they
    come in, how many answered and how many pages follow. None for anyone but the room's teacher."""
    try:
        state = rooms.state(code, owner)
    except RoomNotFound:
        return None
    if state.counts is None:
        return None
    return {"question": state.question, "counts": list(state.counts), "answered": state.answered,
            "following": state.following, "revealed": state.revealed}  # fmt: skip


def reveal_handler(get_rooms: Callable[[], Rooms] = server_rooms):
    """POST /fitcore/room/reveal?room=<code>&q=<question>: the teacher reveals the question to the room
    (204); anyone but the room's teacher: 404, and nothing changes."""

    async def handle(request: Request) -> Response:
        args = _room_args(request)
        if isinstance(args, Response):
            return args
        owner, code = args
        question = request.query_params.get("q", "")
        if not QUESTION_PATTERN.fullmatch(question):
            return _error(400, "q", question, "the room's question")
        try:
            get_rooms().reveal(code, owner, question)
        except RoomNotFound:
            return _error(404, "room", code, _NO_ROOM)
        return Response(status_code=204)

    return handle


def walk_handler(get_rooms: Callable[[], Rooms] = server_rooms):
    """POST /fitcore/room/walk?room=<code>&run=<id>&step=<n>&phase=<i>: the teacher's picture shows phase i
    of step n of its run; the students' pictures follow (204). Anyone but the room's teacher: 404."""

    async def handle(request: Request) -> Response:
        args = _room_args(request)
        if isinstance(args, Response):
            return args
        owner, code = args
        query = request.query_params
        run_id, step, phase = query.get("run", ""), query.get("step", ""), query.get("phase", "")
        if not RUN_PATTERN.fullmatch(run_id):
            return _error(400, "run", run_id, "a run id such as run-12")
        if not SINCE_PATTERN.fullmatch(step) or int(step) > MAX_STEP:
            return _error(400, "step", step, f"a step number from 0 to {MAX_STEP}")
        if not re.fullmatch(r"[0-9]{1,2}", phase):
            return _error(400, "phase", phase, "a phase index from 0 to 99")
        try:
            get_rooms().walk_to(code, owner, run_id, int(step), int(phase))
        except RoomNotFound:
            return _error(404, "room", code, _NO_ROOM)
        return Response(status_code=204)

    return handle


def plotly_js() -> Path:
    """The plotly wheel's own plotly.min.js (the page's charts), found without importing plotly."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("plotly is not installed: pip install -r requirements.txt")
    return Path(spec.origin).parent / "package_data" / PLOTLY_JS


def plotly_url() -> str:
    """plotly.js's address, with plotly's version in it: a browser may keep the file until plotly changes."""
    return f"{STATIC_PATH}/{PLOTLY_JS}?v={importlib.metadata.version('plotly')}"


def static_files(frontend: Path = FRONTEND) -> dict[str, Path]:
    """What GET /fitcore/static/<name> answers, by name: frontend/'s modules and styles, and plotly.min.js."""
    files = {p.name: p for p in sorted(frontend.iterdir()) if STATIC_NAME.fullmatch(p.name) and p.is_file()}
    files[PLOTLY_JS] = plotly_js()
    return files


@functools.lru_cache(maxsize=64)
def _static_body(path: Path, mtime_ns: int) -> tuple[bytes, bytes, str]:
    """(the file, gzipped, its ETag), read once per version of the file (mtime_ns keys the cache)."""
    body = path.read_bytes()
    return body, gzip.compress(body, compresslevel=6, mtime=0), f'"{hashlib.sha256(body).hexdigest()[:32]}"'


def drawer_files() -> dict[str, Path]:
    """What GET /fitcore/static/drawers/<name> answers: each registered strategy's drawer from outside
    frontend/ (its record's `drawer_file`), as `<its drawer key>.js`; read at each request, as a strategy may
    be registered after the routes are made."""
    return {f"{s.drawer}.js": Path(s.drawer_file) for s in registry.STRATEGIES.values() if s.drawer_file}


def static_handler(files: dict[str, Path] | Callable[[], dict[str, Path]]):
    """GET /fitcore/static/<name>: one of `files`, gzipped where the browser takes it; 404 for any other name.

    The modules import each other by plain relative names, so the browser checks them again on every page
    (no-cache: a 304 while unchanged); plotly.min.js is asked for with plotly's version, and kept a week.
    """

    async def handle(request: Request) -> Response:
        name = request.path_params["name"]
        path = (files() if callable(files) else files).get(name)
        if path is None:
            return _error(404, "file", name, "one of the live view's files")
        try:
            body, zipped, etag = await run_in_threadpool(_static_body, path, path.stat().st_mtime_ns)
        except OSError:
            return _error(404, "file", name, "one of the live view's files")
        cache = "public, max-age=604800, immutable" if name == PLOTLY_JS else "no-cache"
        headers = {"Cache-Control": cache, "ETag": etag, "Vary": "Accept-Encoding"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            body, headers["Content-Encoding"] = zipped, "gzip"
        return Response(body, media_type=STATIC_TYPES[Path(name).suffix], headers=headers)

    return handle


class Only:
    """The ASGI app of one path: `handle` for `methods`; any other method answers 405 with the Allow header.

    It claims every method itself: a Route limited by methods=... lets the others fall through to
    Streamlit's catch-all, which answers GET /fitcore/bye with the page and 200. (A plain function given
    to Route would be limited to GET; an ASGI app is routed every method.)
    """

    def __init__(self, methods: tuple[str, ...], handle: Callable):
        self.methods, self.handle = methods, handle

    async def __call__(self, scope, receive, send) -> None:
        request = Request(scope, receive)
        if request.method in self.methods:
            answer = await self.handle(request)
        else:
            answer = _error(405, "method", request.method, " or ".join(self.methods))
            answer.headers["Allow"] = ", ".join(self.methods)
        await answer(scope, receive, send)


def routes(
    get_pool: Callable[[], RunPool] = server_pool,
    frontend: Path = FRONTEND,
    get_rooms: Callable[[], Rooms] = server_rooms,
    followers: Followers | None = None,
) -> list[Route]:
    """The routes to mount beside the page (st.App(..., routes=routes()))."""
    # async handlers run on the event loop itself: each takes a run's lock only to copy its state, for
    # microseconds, and a thread-pool hop would cost more than the answer
    return [
        Route(LIVE_PATH, Only(("GET", "HEAD"), live_handler(get_pool, get_rooms, followers))),
        Route(BYE_PATH, Only(("POST",), run_action_handler("page_closed", get_pool))),
        Route(PAUSE_PATH, Only(("POST",), run_action_handler("pause", get_pool))),
        Route(ROOM_PATH, Only(("GET", "HEAD"), room_handler(get_rooms))),
        Route(ANSWER_PATH, Only(("POST",), answer_handler(get_rooms))),
        Route(WALK_PATH, Only(("POST",), walk_handler(get_rooms))),
        Route(REVEAL_PATH, Only(("POST",), reveal_handler(get_rooms))),
        Route(STATIC_PATH + "/{name}", Only(("GET", "HEAD"), static_handler(static_files(frontend)))),
        Route(live.DRAWER_PATH + "/{name}", Only(("GET", "HEAD"), static_handler(drawer_files))),
    ]
