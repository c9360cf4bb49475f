"""Generic fixtures: a clock that moves only when told to; a check that no fitcore thread outlives a test.

The clock and `wait_for` live in tests/helpers.py, which test modules import (a conftest is not importable
by name in every pytest import mode).
"""

from __future__ import annotations

import threading

import pytest

from tests.helpers import FakeClock


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def no_leftover_threads():
    """Fail the test if a `fitcore-` thread it started is still alive 10 s after it ends."""
    before = set(threading.enumerate())
    yield
    leftover = [t for t in threading.enumerate() if t not in before and t.name.startswith("fitcore-")]
    for t in leftover:
        t.join(10)
    alive = [t.name for t in leftover if t.is_alive()]
    assert not alive, f"threads still running after the test: {alive}"
