"""One browser tab's Streamlit session without a browser: a client of Streamlit's own websocket protocol.

It speaks what Streamlit's frontend speaks on /_stcore/stream (Streamlit 1.67, read from its server code
and its frontend bundle):

- the handshake offers the subprotocol "streamlit". The frontend repurposes Sec-WebSocket-Protocol to carry
  an XSRF token and, on a reconnect, the old session id as its 2nd and 3rd entries; a fresh session without
  auth cookies and without an Origin header has neither, and the server only checks the token for auth
  cookies. It sends the browser's one cookie the app reads, the owner id `fitcore_owner`, which the page
  finds in st.context.cookies: two sessions with the same owner are one browser's two tabs (or a reload);
- it asks for every script run with a BackMsg `rerun_script` (a ClientState: the query string, the widget
  states, the page, the fragment to rerun);
- it applies the ForwardMsgs as the frontend does: `new_session` starts a run (a full run cancels every
  auto-rerun timer), `delta` puts an element or a block at its `delta_path`, `script_finished` drops what
  the run did not draw again (for a fragment run, only inside that fragment), `page_info_changed` changes
  the query string, and `auto_rerun` asks for a rerun of one fragment every `interval` seconds until a full
  run or `stop_auto_rerun` ends it. The client keeps those timers as the browser's setInterval does, so a
  page with an `st.fragment(run_every=...)` keeps rerunning it for as long as the session is open.

Every rerun it asks for carries the values of the widgets it has set, as the browser's carry every
widget's: the server merges rerun requests that arrive while a run is going, and keeps only the newer
request's values (and any pending trigger), so a fragment's auto-rerun sent without them would undo a
change. It does not send the widgets it never set (the server keeps their values from the previous run), nor
cached message hashes (so the server sends every message in full, never a `ref_hash`), heartbeats or
reconnects.

    session = Session("http://127.0.0.1:8501", "weights=5.2,9.6&pace=max", owner=new_owner())
    await session.open()
    await session.click("Start training")
    await session.close()

What the page's live view does in the browser (asking the server for news while the run trains, and for one
rerun when the run's status changes) is benchmarks/live_client.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Iterator

import pandas as pd
import pyarrow as pa
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.Block_pb2 import Block
from streamlit.proto.Element_pb2 import Element
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

STREAM_PATH = "/_stcore/stream"
OWNER_COOKIE = "fitcore_owner"  # the browser's owner id, which the page reads from st.context.cookies
SUBPROTOCOL = Subprotocol("streamlit")
ROOT_CONTAINERS = 4  # delta_path[0]: main, sidebar, event, bottom
MAX_MESSAGE_BYTES = 64 * 2**20  # a ForwardMsg with a chart's figure; the browser takes any size
TEXT_FIELDS = {  # the text an element shows, by its type: what text() reads
    "alert": "body",
    "markdown": "body",
    "heading": "body",
    "text": "body",
    "code": "code_text",
    "button": "label",
}


def new_owner() -> str:
    """An owner id as the page makes one (uuid4().hex: 32 lowercase hex characters)."""
    return uuid.uuid4().hex


def owner_headers(owner: str | None) -> dict[str, str]:
    """The Cookie header a browser with this owner id sends to the server (none without an owner)."""
    return {"Cookie": f"{OWNER_COOKIE}={owner}"} if owner else {}


class SessionClosed(RuntimeError):
    """The server closed the websocket, or the client was closed."""


@dataclass
class Node:
    """An element or a block of the page, tagged with the run and the fragment that last drew it."""

    proto: Element | Block
    run_id: str
    fragment_id: str
    children: list[Node | None] | None = None  # a block's, by the last index of their delta path

    @property
    def is_block(self) -> bool:
        return self.children is not None


@dataclass
class _Timer:
    interval: float
    task: asyncio.Task


@dataclass
class Runs:
    """Counters of the session's script runs, as the ForwardMsgs report them."""

    full_started: int = 0  # new_session messages of full runs
    full_finished: int = 0  # the number (1, 2, ...) of the last full run that finished successfully
    fragment_started: int = 0  # new_session messages of fragment runs
    fragment_finished: int = 0  # fragment runs that finished successfully
    finished_early: int = 0  # runs that ended early because another run was asked for (full or fragment)
    messages: int = 0
    fragment_ids: tuple[str, ...] = field(default_factory=tuple)  # of the run in progress


class Session:
    """One session of a Streamlit app, driven over its websocket.

    Args:
        url: the server, "http://host:port".
        query: the page's query string without "?", as a link sets it.
        on_element: called with every element a delta draws, in the order they arrive (on the event loop).
        owner: the browser's owner id, sent as the `fitcore_owner` cookie on the handshake (None: no cookie).
    """

    def __init__(
        self,
        url: str,
        query: str = "",
        on_element: Callable[[Element], None] | None = None,
        owner: str | None = None,
    ):
        self.url = url
        self.owner = owner
        self.query_string = query
        self.on_element = on_element
        self.runs = Runs()
        self.page_script_hash = ""
        self.root = [Node(Block(), "", "", []) for _ in range(ROOT_CONTAINERS)]
        self._run_id = ""
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task | None = None
        self._timers: dict[str, _Timer] = {}
        self._values: dict[str, WidgetState] = {}  # by widget id: the values this client has set
        self._tick = asyncio.Event()
        self.closed = False

    # -- the connection ---------------------------------------------------------------------------
    async def open(self, timeout: float = 30.0) -> None:
        """Connect and run the page once, as loading its link does; return when that run has finished."""
        address = "ws" + self.url.removeprefix("http") + STREAM_PATH
        self._ws = await connect(
            address,
            subprotocols=[SUBPROTOCOL],
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=timeout,
            additional_headers=owner_headers(self.owner),  # the page reads st.context.cookies from it
        )
        if self._ws.subprotocol != SUBPROTOCOL:
            raise RuntimeError(f"the server chose subprotocol {self._ws.subprotocol!r}, not {SUBPROTOCOL!r}")
        self._reader = asyncio.create_task(self._read(), name="session-reader")
        await self.rerun_full([], timeout)

    async def close(self) -> None:
        """Close the websocket, as closing the tab does; the server keeps the session's runs until reaped."""
        self.closed = True
        self._stop_timers(list(self._timers))
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        self._wake()

    async def _read(self) -> None:
        try:
            async for data in self._ws:
                msg = ForwardMsg()
                msg.ParseFromString(data)
                self._handle(msg)
                self._wake()
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._stop_timers(list(self._timers))
            self._wake()

    def _wake(self) -> None:
        """Tell every wait_for that something changed."""
        self._tick.set()
        self._tick = asyncio.Event()

    # -- what the client sends --------------------------------------------------------------------
    async def _send_rerun(
        self, widgets: list[WidgetState], fragment_id: str = "", auto: bool = False
    ) -> None:
        if self.closed:
            raise SessionClosed("the session's websocket is closed")
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = self.query_string
        state.page_script_hash = self.page_script_hash
        given = {w.id for w in widgets}
        state.widget_states.widgets.extend(v for i, v in self._values.items() if i not in given)
        state.widget_states.widgets.extend(widgets)
        state.fragment_id = fragment_id
        state.is_auto_rerun = auto
        await self._ws.send(msg.SerializeToString())

    async def rerun_full(self, widgets: list[WidgetState], timeout: float = 30.0) -> None:
        """Ask for a full run with these widget states; return once a run started after it has finished."""
        started = self.runs.full_started
        await self._send_rerun(widgets)
        await self.wait_for(lambda: self.runs.full_finished > started, timeout)

    async def click(self, label: str, timeout: float = 30.0) -> None:
        """Press the button labelled `label` once it is drawn and enabled; wait for the run it starts."""
        await self.wait_for(lambda: self._enabled(self.find("button", label)), timeout)
        button = self.find("button", label).button
        await self.rerun_full([WidgetState(id=button.id, trigger_value=True)], timeout)

    async def select(self, label: str, option: str, timeout: float = 30.0) -> None:
        """Choose the option shown as `option` in the select slider or select box labelled `label`.

        Waits for the widget to be drawn and enabled, and then for the run that applies the choice.
        """
        await self.wait_for(lambda: self._enabled(self._chooser(label)), timeout)
        element = self._chooser(label)
        kind = element.WhichOneof("type")
        widget = getattr(element, kind)
        if option not in widget.options:
            raise ValueError(f"{kind} {label!r} has no option {option!r}; it has {list(widget.options)}")
        state = WidgetState(id=widget.id)
        if kind == "slider":
            state.string_array_value.data.append(option)  # a select slider's value: its options' labels
        else:
            state.string_value = option  # a select box's value: its option as shown
        self._values[widget.id] = state
        await self.rerun_full([], timeout)

    def options(self, label: str) -> list[str]:
        """The options, as shown, of the select slider or select box labelled `label` ([] if not drawn)."""
        element = self._chooser(label)
        return [] if element is None else list(getattr(element, element.WhichOneof("type")).options)

    def _chooser(self, label: str) -> Element | None:
        return self.find("selectbox", label) or self.find("slider", label)

    @staticmethod
    def _enabled(element: Element | None) -> bool:
        return element is not None and not getattr(element, element.WhichOneof("type")).disabled

    async def _auto_rerun(self, fragment_id: str, interval: float) -> None:
        """The browser's setInterval: rerun the fragment every `interval` s, whether the last run ended."""
        loop = asyncio.get_running_loop()
        due = loop.time() + interval
        while not self.closed:
            await asyncio.sleep(max(0.0, due - loop.time()))
            due += interval
            try:
                await self._send_rerun([], fragment_id, auto=True)
            except (SessionClosed, ConnectionClosed):
                return

    # -- what the server sends --------------------------------------------------------------------
    def _handle(self, msg: ForwardMsg) -> None:
        self.runs.messages += 1
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self._run_id = msg.metadata.run.script_run_id
            self.runs.fragment_ids = tuple(msg.metadata.run.fragment_ids)
            self.page_script_hash = msg.new_session.page_script_hash
            if not self.runs.fragment_ids:  # a full run: the browser drops every auto-rerun timer
                self.runs.full_started += 1
                self._stop_timers(list(self._timers))
            else:
                self.runs.fragment_started += 1
        elif kind == "delta":
            self._apply(list(msg.metadata.delta_path), msg.delta)
        elif kind == "script_finished":
            self._finished(msg.script_finished, tuple(msg.metadata.run.fragment_ids))
        elif kind == "auto_rerun":
            self._start_timer(msg.auto_rerun.fragment_id, msg.auto_rerun.interval)
        elif kind == "stop_auto_rerun":
            self._stop_timers(list(msg.stop_auto_rerun.fragment_ids))
        elif kind == "page_info_changed":
            self.query_string = msg.page_info_changed.query_string

    def _finished(self, status: int, fragment_ids: tuple[str, ...]) -> None:
        if status == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            self.runs.finished_early += 1
            return  # the frontend keeps the page as it is until the next run ends
        self._clear_stale(fragment_ids)
        if fragment_ids:
            self.runs.fragment_finished += 1
        else:
            self.runs.full_finished = self.runs.full_started
            self._forget_hidden_widgets()

    def _forget_hidden_widgets(self) -> None:
        """Drop the values of widgets the last full run did not draw, as the frontend does."""
        drawn = {getattr(getattr(e, e.WhichOneof("type")), "id", None) for e in self.elements()}
        self._values = {i: v for i, v in self._values.items() if i in drawn}

    def _start_timer(self, fragment_id: str, interval: float) -> None:
        if not fragment_id:
            return  # the frontend ignores an auto_rerun without a fragment
        timer = self._timers.get(fragment_id)
        if timer is not None and timer.interval == interval:
            return
        self._stop_timers([fragment_id])
        task = asyncio.create_task(self._auto_rerun(fragment_id, interval), name=f"auto-rerun-{fragment_id}")
        self._timers[fragment_id] = _Timer(interval, task)

    def _stop_timers(self, fragment_ids: list[str]) -> None:
        for fragment_id in fragment_ids:
            timer = self._timers.pop(fragment_id, None)
            if timer is not None:
                timer.task.cancel()

    # -- the page: a tree of blocks and elements by delta path ------------------------------------
    def _apply(self, path: list[int], delta) -> None:
        kind = delta.WhichOneof("type")
        if kind == "new_element":
            node = Node(delta.new_element, self._run_id, delta.fragment_id)
            if self.on_element is not None:
                self.on_element(delta.new_element)
        elif kind == "add_block":
            old = self._node_at(path)
            # as the frontend does: a block drawn again where a block of its type was keeps its children
            same = (
                old is not None
                and old.is_block
                and old.proto.WhichOneof("type") == delta.add_block.WhichOneof("type")
            )
            node = Node(delta.add_block, self._run_id, delta.fragment_id, old.children if same else [])
        else:
            return  # transient elements (spinners, toasts): nothing this client reads
        self._set_node(path, node)

    def _node_at(self, path: list[int]) -> Node | None:
        node = self.root[path[0]]
        for index in path[1:]:
            if not node.is_block or index >= len(node.children):
                return None
            node = node.children[index]
            if node is None:
                return None
        return node

    def _set_node(self, path: list[int], node: Node) -> None:
        """Put node at path; every block on the way is touched by this run, as the frontend's setIn does."""
        parent = self.root[path[0]]
        parent.run_id = self._run_id
        for index in path[1:-1]:
            parent.children.extend([None] * (index + 1 - len(parent.children)))
            child = parent.children[index]
            if child is None or not child.is_block:
                child = Node(Block(), self._run_id, "", [])
                parent.children[index] = child
            child.run_id = self._run_id
            parent = child
        index = path[-1]
        parent.children.extend([None] * (index + 1 - len(parent.children)))
        parent.children[index] = node

    def _clear_stale(self, fragment_ids: tuple[str, ...]) -> None:
        """Drop what this run did not draw again: the frontend's ClearStaleNodeVisitor.

        After a full run, every node another run drew. After a fragment run, only the nodes inside that
        fragment's blocks (and the blocks inside them) that another run drew.
        """
        for root in self.root:
            root.children = [c for c in (self._kept(c, fragment_ids, "") for c in root.children) if c]

    def _kept(self, node: Node | None, fragment_ids: tuple[str, ...], inside: str) -> Node | None:
        if node is None:
            return None
        current = node.run_id == self._run_id
        if not node.is_block:
            if current or (fragment_ids and (not node.fragment_id or not inside)):
                return node
            return None
        if fragment_ids:
            if inside and not current:
                return None
            if node.fragment_id in fragment_ids and current:
                inside = node.fragment_id
        elif not current:
            return None
        node.children = [c for c in (self._kept(c, fragment_ids, inside) for c in node.children) if c]
        return node

    def elements(self) -> Iterator[Element]:
        """Every element on the page, in page order (main, sidebar, event, bottom; depth first)."""

        def walk(node: Node) -> Iterator[Element]:
            for child in node.children:
                if child is None:
                    continue
                if child.is_block:
                    yield from walk(child)
                else:
                    yield child.proto

        for root in self.root:
            yield from walk(root)

    def find(self, kind: str, label: str) -> Element | None:
        """The first element of type `kind` ("button", "slider", ...) whose label is `label`."""
        for element in self.elements():
            if element.WhichOneof("type") == kind and getattr(element, kind).label == label:
                return element
        return None

    def text(self) -> str:
        """The page's text, one element a line: alerts, Markdown, headings, code, button labels."""
        return "\n".join(t for _, t in self.texts())

    def texts(self) -> list[tuple[str, str]]:
        """(element type, its text) for every element that shows text, in page order."""
        out = []
        for element in self.elements():
            kind = element.WhichOneof("type")
            if kind in TEXT_FIELDS:
                out.append((kind, getattr(getattr(element, kind), TEXT_FIELDS[kind])))
        return out

    def tables(self) -> list[pd.DataFrame]:
        """Every st.table and st.dataframe on the page, decoded from its Arrow bytes."""
        out = []
        for element in self.elements():
            kind = element.WhichOneof("type")
            if kind in ("table", "dataframe"):
                out.append(arrow_frame(getattr(element, kind).arrow_data.data))
        return out

    # -- waiting ----------------------------------------------------------------------------------
    async def wait_for(self, predicate: Callable[[], Any], timeout: float) -> Any:
        """Wait until predicate() is true, checked after every message; its value, or TimeoutError."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if self.closed:
                raise SessionClosed("the session's websocket closed while waiting")
            left = end - loop.time()
            if left <= 0:
                raise TimeoutError(
                    f"no page state satisfied the wait within {timeout:g} s; runs: {self.runs}"
                )
            try:
                await asyncio.wait_for(self._tick.wait(), left)
            except TimeoutError:
                pass


def arrow_frame(data: bytes) -> pd.DataFrame:
    """A DataFrame from the Arrow IPC stream bytes of a table or dataframe element."""
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all().to_pandas()


class LoopThread:
    """An asyncio event loop in a daemon thread, for sync code that drives many sessions at once.

    `run(coroutine)` runs a coroutine on it and returns its result; `call(fn, ...)` runs a plain function
    on it, so that reading a session's page never races the messages that change it.
    """

    def __init__(self, name: str = "session-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)

    def __enter__(self) -> "LoopThread":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()

    def run(self, coroutine: Coroutine, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, fn: Callable, *args, timeout: float | None = 30.0) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def inside() -> None:
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed back to the caller's thread
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(inside)
        return future.result(timeout)
