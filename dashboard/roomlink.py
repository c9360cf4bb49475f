"""The room's way in for a class: the server's network address, a short code, its link and a QR code.

The teacher's browser often reads `http://localhost:8501`, which no phone reaches: the link a student needs
names the address Streamlit itself prints as its "Network URL" (`streamlit.net_util.get_internal_ip`) and
the port the server listens on, and carries the room's short code only (`?room=K7QM2X`): the students
follow the teacher's run, so no setting need travel. Where the server listens on this machine alone
(`--server.address 127.0.0.1`), no address would reach it: the page says so, and how to start it for a class.
"""

from __future__ import annotations

import io
from functools import lru_cache
from typing import NamedTuple

LOOPBACK = ("127.0.0.1", "localhost", "::1")
EVERYWHERE = ("", "0.0.0.0", "::")  # listening on every interface: the machine's network address reaches it


class JoinLink(NamedTuple):
    """The link a class opens, or None with the reason (a loopback-only server) in `loopback`."""

    url: str | None
    loopback: bool


def join_link(pin: str) -> JoinLink:
    """`http://<the server's network address>:<port>/?room=<pin>`, from the server's own settings."""
    from streamlit import config, net_util

    address = str(config.get_option("server.address") or "")
    port = int(config.get_option("server.port"))
    if address in LOOPBACK:
        return JoinLink(None, True)
    host = net_util.get_internal_ip() if address in EVERYWHERE else address
    if not host:
        return JoinLink(None, False)
    host = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
    return JoinLink(f"http://{host}:{port}/?room={pin}", False)


@lru_cache(maxsize=16)
def qr_png(url: str) -> bytes:
    """The link as a QR code, a PNG big enough to scan from the back of a room when shown 240 px wide."""
    import segno

    out = io.BytesIO()
    segno.make(url, error="m").save(out, kind="png", scale=10, border=2)
    return out.getvalue()
