"""`fitcore serve [streamlit flags]`: the dashboard, as `streamlit run app.py [flags]` runs it in a checkout.

It runs the app.py that fitcore.core.paths finds (the installed package's, or the checkout's), from that app's
folder so that Streamlit reads the project's .streamlit/config.toml (theme, headless, upload limit) there;
every flag goes to `streamlit run` as it is (`--server.port 8502`, `--server.address 127.0.0.1`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from fitcore.core import paths


def command(argv: list[str]) -> list[str]:
    """The command line that serves the page: this interpreter's streamlit on the app, then argv."""
    return [sys.executable, "-m", "streamlit", "run", str(paths.APP), *argv]


def main(argv: list[str]) -> int:
    """Become `streamlit run <app.py> argv`: Ctrl-C, signals and the exit status are Streamlit's own."""
    os.chdir(paths.APP_ROOT)
    sys.stdout.flush()
    os.execv(sys.executable, command(argv))
    return 1  # not reached: execv replaces this process or raises


def end_on_sigterm() -> None:
    """A service manager's SIGTERM ends the server as Ctrl-C does, so that the runs end and the uploads
    folder is removed at exit.

    Streamlit's server (uvicorn) shuts down gracefully on either signal, then raises the signal again with
    the handler it found: for SIGINT Python's KeyboardInterrupt, which runs the atexit cleanup; for SIGTERM
    the default, which ends the process at once and leaves both behind. Called where the server imports
    the app, on its main thread (elsewhere no handler can be set).
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))


class ProtocolErrorsInOneLine(logging.Filter):
    """A malformed request (a broken chunked body, say) makes the HTTP layer under the page log 60 lines of
    traceback, every time; a class's server log gets one line for it instead. Other errors keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and type(exc).__module__.split(".")[0] in ("h11", "httptools"):
            record.msg = "a malformed HTTP request was refused: %s: %s"
            record.args = (type(exc).__name__, exc)
            record.exc_info, record.exc_text = None, None
        return True


def quiet_protocol_errors() -> None:
    """Put ProtocolErrorsInOneLine on the server's error log (once)."""
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, ProtocolErrorsInOneLine) for f in log.filters):
        log.addFilter(ProtocolErrorsInOneLine())
