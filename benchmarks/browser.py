"""The system Chromium and a free loopback port for `streamlit run app.py`: browser tests and benchmarks."""

from __future__ import annotations

import socket
import urllib.request

CHROMIUM = "/usr/bin/chromium"  # Debian's package; Playwright's own download is never used
# headless on a closed network: without the background-networking flags Chromium's connections are refused
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    """Whether the Streamlit server at url answers its health endpoint with ok."""
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as response:
            return response.read().strip() == b"ok"
    except OSError:
        return False
