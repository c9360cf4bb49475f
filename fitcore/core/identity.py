"""A browser's identity as this server's page vouches for it: its owner id, signed with the server's secret.

The page gives every new browser an owner id (its `fitcore_owner` cookie), which keeps its runs apart from
another browser's. A cookie is whatever the client sends, so an id alone proves nothing: a script could post
200 answers to a room under 200 made-up ids. So the page, as it serves a browser, also signs its owner id
(the `fitcore_signed` cookie: HMAC-SHA256 of the id under a secret of the server's, 128 bits), and where a
count must be of people, not of requests (a room's tally, the rooms a teacher opens), only a signed id
counts. A made-up id still keeps its own runs apart (nothing is lost by it), but is never counted.

The secret is the server process's own, random at its start (`FITCORE_SECRET`, 64 hex digits, sets it for
several processes that must agree): a restarted server has forgotten its runs and rooms, and signs again.
How many ids the page signs for one address a minute is bounded (`Minting`), so that a script opening pages
cannot sign its way around the rule either.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import threading
import time
from collections import deque
from hashlib import sha256
from typing import Callable

SIGNATURE = re.compile(r"[0-9a-f]{32}")
SIGNS_PER_MINUTE = 60  # owner ids the page signs for one address a minute: a class behind one school address
SIGN_WINDOW_S = 60.0


def _secret() -> bytes:
    given = os.environ.get("FITCORE_SECRET", "")
    return bytes.fromhex(given) if re.fullmatch(r"[0-9a-fA-F]{64}", given) else secrets.token_bytes(32)


_SECRET = _secret()


def sign(owner: str, secret: bytes | None = None) -> str:
    """The signature of an owner id: 32 hex digits."""
    return hmac.new(secret or _SECRET, owner.encode("utf-8"), sha256).hexdigest()[:32]


def signed(owner: object, signature: object, secret: bytes | None = None) -> bool:
    """Did this server's page sign `owner`? False for a made-up id or signature, or another server's."""
    if not isinstance(owner, str) or not isinstance(signature, str) or not SIGNATURE.fullmatch(signature):
        return False
    return hmac.compare_digest(signature, sign(owner, secret))


class Minting:
    """At most `most` signatures per address in any `window` seconds; thread-safe, bounded in memory."""

    def __init__(self, most: int = SIGNS_PER_MINUTE, window: float = SIGN_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic, addresses: int = 10_000):  # fmt: skip
        self.most, self.window, self._clock, self._addresses = most, window, clock, addresses
        self._lock = threading.Lock()
        self._times: dict[str, deque[float]] = {}

    def allow(self, address: str | None) -> bool:
        """May `address` be given one more signature now? Counts it when it may."""
        key = address or "?"  # an address the server could not read: all such share one allowance
        now = self._clock()
        with self._lock:
            if len(self._times) >= self._addresses:  # forget the addresses whose window has passed
                self._times = {a: q for a, q in self._times.items() if q and now - q[-1] < self.window}
            times = self._times.setdefault(key, deque())
            while times and now - times[0] >= self.window:
                times.popleft()
            if len(times) >= self.most:
                return False
            times.append(now)
            return True


_server_minting = Minting()


def server_minting() -> Minting:
    """This server process's bound on signatures per address."""
    return _server_minting
