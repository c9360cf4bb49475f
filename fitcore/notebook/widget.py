"""`Live`: the dashboard's live view as a notebook widget (anywidget), with the run's buttons above it.

The run trains in a thread of the kernel (fitcore.runs.runner.Run, as on the page), so the notebook stays
free: a button pressed in the widget reaches the kernel only while no cell runs, and a cell may read the run
(`live.snapshot()`) while it trains. A pusher thread sends the view what changed, as the page's polls
would ask for it (fitcore.kit.live.payload after the last step sent): at most MAX_UPDATES_PER_S messages a
second, and always the newest step, so that a fast run never floods Jupyter's message rate limit (which
drops messages and freezes a view on an old step) and a slow one shows every step.

`live.run()` blocks instead, pushing from the calling thread: a script's way, and a host's that shows no
update sent from a thread (Colab today: the widget says so).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Any

import anywidget
import traitlets

from fitcore import api
from fitcore.core import i18n
from fitcore.core.config import Checked, ConfigError, FitConfig, check
from fitcore.core.errors import Text
from fitcore.kit import live
from fitcore.notebook import bundle
from fitcore.runs.runner import Run, Snapshot
from fitcore.view.controls import DEFAULT_PACE

MAX_UPDATES_PER_S = 30.0  # Jupyter's default limit is 1,000 messages a second per kernel, averaged over 3 s
ACTIONS = ("start", "pause", "resume", "step", "stop", "reset")
MAX_ERROR_CHARS = 200  # an error is one line a student reads, whatever the value it quotes
MIN_PACE, MAX_PACE = 0.1, 1000.0  # steps a second; None: as fast as it trains


def one_line(text: str) -> str:
    """text on one line, cut to MAX_ERROR_CHARS."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"


def configure(config: FitConfig | None, values: dict[str, Any]) -> Checked:
    """config with `values` on top (a keyword argument per FitConfig field, as the CLI's flags), checked as
    the command line checks it; ConfigError names the argument, the value given and what is allowed."""
    merged = {**(config.to_dict() if config is not None else {}), **values}
    merged.pop("data_sha256", None)  # filled in from the file by check(), never given
    return check(FitConfig.from_mapping(merged))


def check_widget(lang: Any, pace: Any) -> None:
    """The widget's own arguments, beside the config's: ConfigError names the one that is bad."""
    if not (isinstance(lang, str) and lang in i18n.LANGUAGES):
        raise ConfigError("lang", lang, ", ".join(i18n.LANGUAGES))
    number = isinstance(pace, (int, float)) and not isinstance(pace, bool)
    if pace is not None and not (number and MIN_PACE <= pace <= MAX_PACE):
        raise ConfigError("pace", pace, Text("notebook.pace", low=MIN_PACE, high=MAX_PACE))


def in_colab() -> bool:
    return "google.colab" in sys.modules


class Live(anywidget.AnyWidget):
    """The live view of one fitcore config: `Live(weights=[5.2, 9.6], devices="virtual:3")`, or
    `Live(FitConfig(...), strategy="ddp")`; every FitConfig field is a keyword argument.

    Args:
        config: a FitConfig to start from; keyword arguments override its fields.
        lang: "en" or "zh", the view's and the buttons' language (also settable later: `live.lang = "zh"`).
        pace: steps per second (None: as fast as it trains); the page's default, 20, takes the
            tutorial's 200 steps in ten seconds. Set `live.pace` while a run trains and the run takes it at
            once, as the page's pace control does.
    A bad argument does not raise here: the widget shows it as one line (and `error` holds it), so that a
    class sees what to change; `start()` and `run()` raise it as a ValueError.
    """

    _esm = bundle.bundle()
    _css = bundle.styles()
    lang = traitlets.Unicode(i18n.DEFAULT).tag(sync=True)
    texts = traitlets.Dict().tag(sync=True)  # the live view's words in `lang` (core/locales/live.json)
    labels = traitlets.Dict().tag(sync=True)  # the buttons' words: the page's own
    error = traitlets.Unicode("").tag(sync=True)
    note = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        config: FitConfig | None = None,
        *,
        lang: str = i18n.DEFAULT,
        pace: float | None = float(DEFAULT_PACE),
        **values: Any,
    ):
        super().__init__()
        self._pace = pace
        self.last_traceback = ""  # a failed push's, for whoever debugs it; the widget shows one line
        self._checked: Checked | None = None
        self._run: Run | None = None
        self._sent = 0  # the last step the view was sent
        self._lock = threading.RLock()  # one push at a time: the pusher's, run()'s, a new view's
        self._pusher: threading.Thread | None = None
        self._pushing: Run | None = None  # the run the pusher thread follows
        # messages sent to the view, and the CPU seconds their making took (benchmarks read both)
        self.pushes, self.push_seconds = 0, 0.0
        self.set_trait("lang", lang if isinstance(lang, str) and lang in i18n.LANGUAGES else i18n.DEFAULT)
        self._words()
        try:
            check_widget(lang, pace)
            self._checked = configure(config, values)
        except ConfigError as exc:
            with i18n.using(self.lang):
                self.error = one_line(str(exc))
        if in_colab():
            self.note = i18n.t("notebook.colab", lang=self.lang)
        self.on_msg(self._on_message)

    @property
    def pace(self) -> float | None:
        """Steps per second of the run (None: as fast as it trains)."""
        return self._pace

    @pace.setter
    def pace(self, pace: float | None) -> None:
        """A new pace, for the run under way (at once, as the page's pace control) and the next one; a bad
        value raises ValueError with one line, and nothing changes."""
        try:
            check_widget(self.lang, pace)
        except ConfigError as exc:
            raise ValueError(one_line(str(exc))) from None
        self._pace = pace
        if self._run is not None:
            self._run.set_pace(pace)

    # -- what a cell reads -----------------------------------------------------------------------------
    @property
    def config(self) -> FitConfig | None:
        """The checked config this widget runs (None after a bad argument: `error` says why)."""
        return self._checked.config if self._checked else None

    def snapshot(self) -> Snapshot | None:
        """The run's state now (fitcore.runs.runner.Snapshot: loss and parameter histories, the latest step's
        split, weights, bias), or None before the first Start."""
        run = self._run
        return run.snapshot() if run else None

    # -- the run's buttons, callable from a cell ---------------------------------------------------------
    def start(self) -> None:
        """Start a run of the config (a new one, if one has ended) in a thread; the widget follows it, and
        the cell returns at once (`wait()` blocks until the run ends)."""
        run = self._start()
        if self._pusher is not None and self._pusher.is_alive() and self._pushing is run:
            return  # a run in progress already has its pusher (a second Start changes nothing)
        self._pushing = run
        self._pusher = threading.Thread(target=self._push_until_done, args=(run,), name="fitcore-notebook",
                                        daemon=True)  # fmt: skip
        self._pusher.start()

    def run(self, timeout: float | None = None) -> Snapshot:
        """Start a run and block until it ends (or `timeout` seconds pass), pushing the view's updates from
        this thread. Ctrl-C (the kernel's interrupt) stops the run."""
        run = self._start()
        try:
            self._push_until_done(run, deadline=None if timeout is None else time.monotonic() + timeout)
        except KeyboardInterrupt:
            run.stop()
            run.wait(10)
            self._push()
            raise
        return run.snapshot()

    def wait(self, timeout: float | None = None) -> Snapshot | None:
        """Block until the run ends (or `timeout` seconds pass); the widget goes on following it meanwhile.
        The run's snapshot then, or None before the first Start."""
        run, pusher = self._run, self._pusher
        if run is None:
            return None
        run.wait(timeout)
        if run.done and pusher is not None:
            pusher.join(1.0)  # its last push, the run's end, is sent before the cell goes on
        return run.snapshot()

    def pause(self) -> None:
        if self._run:
            self._run.pause()
            self._push()

    def resume(self) -> None:
        if self._run:
            self._run.resume()

    def step(self) -> None:
        """While paused: one step, then paused again."""
        if self._run:
            self._run.step_once()

    def stop(self) -> None:
        if self._run:
            self._run.stop()

    def reset(self) -> None:
        """Stop the run, if any, and show the config's planned step again."""
        run, self._run = self._run, None
        if run:
            run.stop()
        self._push(replace=True)

    def close(self) -> None:
        if self._run:
            self._run.stop()  # a closed widget leaves no run training in the kernel
        super().close()

    # -- inside ------------------------------------------------------------------------------------------
    def _start(self) -> Run:
        if self._checked is None:
            raise ValueError(self.error)
        with self._lock:
            if self._run is not None and self._run.snapshot().active:
                return self._run
            checked = self._checked
            self._run = Run(checked.config, pace=self._pace, plan=checked.plan).start()
            self._sent = 0
        self._push(replace=True)
        return self._run

    def _push_until_done(self, run: Run, deadline: float | None = None) -> None:
        """Push what changed, at most MAX_UPDATES_PER_S times a second, until `run` ends; then its end."""
        stamp = None
        while not run.done and (deadline is None or time.monotonic() < deadline):
            time.sleep(1.0 / MAX_UPDATES_PER_S)
            if run is not self._run:
                return  # reset, or a newer run: that one's pusher speaks for it
            now = run.stamp()
            if now != stamp:
                stamp = now
                if not self._push():
                    return
        if run is self._run:
            self._push()

    def _push(self, replace: bool = False) -> bool:
        """Send the view the run's steps after the last one sent (all of it where `replace`), or the planned
        step where no run is. False where that failed: the widget then says why, in one line (a thread's
        traceback would land in whatever cell runs, or nowhere)."""
        with self._lock, i18n.using(self.lang):
            began = time.thread_time()
            try:
                self._send_payload(replace)
            except Exception as exc:
                self.last_traceback = traceback.format_exc()
                self.error = one_line(i18n.t("notebook.push_failed", error=f"{type(exc).__name__}: {exc}"))
                return False
            finally:
                self.pushes += 1
                self.push_seconds += time.thread_time() - began
            return True

    def _send_payload(self, replace: bool) -> None:
        run = self._run
        if run is None:
            body = live.planned_payload(self._checked) if self._checked else None
            self.send({"type": "payload", "payload": body, "replace": True})
            return
        since = 0 if replace else self._sent
        body = live.payload(run.snapshot(), since)
        self.send({"type": "payload", "payload": body, "replace": replace})
        # the next push starts after the last point sent, as the page's polls do (poll.js lastStep)
        self._sent = max([since] + [p[0] for p in (body["loss"][-1:] + body["params"][-1:])])

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "hello":
            self._push(replace=True)
        elif kind == "plotly":
            self.send({"type": "plotly"}, buffers=[api.plotly_js().read_bytes()])
        elif kind == "control" and content.get("action") in ACTIONS:
            try:
                getattr(self, content["action"])()
            except ValueError:
                pass  # a bad config: the widget already shows why, and Start is disabled

    @traitlets.observe("lang")
    def _on_lang(self, _change: Any) -> None:
        self._words()

    def _words(self) -> None:
        lang = self.lang if self.lang in i18n.LANGUAGES else i18n.DEFAULT
        self.labels = {action: i18n.t(f"page.{action}", lang=lang) for action in ACTIONS}
        self.texts = i18n.browser_texts(lang=lang)
