"""The classroom load test in CI: 20 sessions on `streamlit run app.py`, 4 runs training at once.

The same code as `python -m benchmarks.load_test`, run once for the module and then checked fact by fact.
Each session is a client of Streamlit's own websocket protocol (benchmarks/session_client.py), which reruns
the live panels' fragment whenever the server asks, as a browser does, so that 20 sessions fit on 2 cores
beside the server. The first 4 sessions hold every slot at 1 step/s until the other 16 show their place in
the queue, so the cap is reached and a queue is seen by construction. Nothing here is skipped: without
websockets or pyarrow (both Streamlit's own dependencies) the module fails.
"""

from __future__ import annotations

import pytest

from benchmarks.load_test import (
    RSS_GROWTH_MIB,
    TOLERANCE,
    LoadSettings,
    reference,
    run_load,
    session_fields,
    session_table,
    summary,
)

SESSIONS, CAP = 20, 4
# idle timeout 15 s: a closed session's run is reaped 15 s after its last read, twice in the test (the
# abandoned sessions, then the end); an open session's longest gap between reads is printed in the summary
SETTINGS = LoadSettings(sessions=SESSIONS, cap=CAP, idle_timeout=15.0, abandoned=2, timeout=200.0)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def load() -> dict:
    """One load test for the whole module: the server and every session are gone when it returns."""
    result = run_load(SETTINGS)
    print(summary(result), session_table(result), sep="\n\n")  # shown with any failure below
    return result


def test_every_session_finishes_with_the_lstsq_parameters(load):
    assert load["client"] == "websocket"
    assert load["sessions"] == SESSIONS
    assert len(load["per_session"]) == SESSIONS
    wrong = [(s["session"], s["status_text"]) for s in load["per_session"] if not s["ok"]]
    assert load["finished_right"] == SESSIONS, wrong
    for i, s in enumerate(load["per_session"]):
        assert s["status"] == "Finished", s["status_text"]
        assert s["step"] == s["total"] == 200  # the tutorial: 200 rows, one batch, 200 epochs
        want = reference(session_fields(i))  # lstsq on the session's own data, computed in the test
        assert len(s["learned"]) == 3
        assert s["learned"] == pytest.approx(want, abs=TOLERANCE)
        assert s["page_lstsq"] == pytest.approx(want, abs=1e-4)  # the page shows 4 decimals


def test_the_sessions_answers_differ(load):
    # each session has its own W and b: a session showing another session's run would fail the lstsq check
    learned = [tuple(s["learned"]) for s in load["per_session"]]
    assert len(set(learned)) == SESSIONS


def test_the_live_panels_were_rerun_by_the_clients_timer(load):
    # the status line moves only when the fragment reruns: every session got there through auto-reruns
    for s in load["per_session"]:
        assert s["auto_reruns_sent"] >= 1, s["session"]
        assert s["fragment_runs"] >= 1, s["session"]
    assert load["dropped_while_open"] == 0  # no open session went unread for the idle timeout


def test_the_cap_is_reached_and_never_passed(load):
    assert (
        load["max_concurrent_runs"] == CAP
    )  # distinct fitcore-run-N thread names in /proc, 10 times a second
    assert load["hold"]["training_while_held"] == CAP  # the holders filled every slot
    assert load["hold"]["all_holders_trained"]
    assert load["hold"]["released"] == CAP, load["hold"].get("release_errors")  # then went full speed


def test_every_queued_session_saw_its_position(load):
    assert load["hold"]["holders"] == CAP
    assert load["hold"]["all_others_queued"]
    assert load["sessions_queued"] == SESSIONS - CAP
    holders, behind = load["per_session"][:CAP], load["per_session"][CAP:]
    assert all(s["max_queue_position"] == 0 and "Queued" not in s["statuses"] for s in holders)
    assert all("Queued" in s["statuses"] and s["max_queue_position"] >= 1 for s in behind)
    # 16 runs wait behind 4: the positions shown are 1 to 16
    assert 1 <= load["max_queue_position"] <= SESSIONS - CAP


def test_closed_sessions_are_reaped_and_nothing_trains_at_the_end(load):
    abandoned = load["abandoned"]
    assert abandoned["tabs"] == 2
    assert abandoned["training_when_closed"] == 2  # both were training when their sessions closed
    assert abandoned["gone_after_s"] is not None  # and the pool stopped them (bound: idle timeout + 30 s)
    assert load["end_training_runs"] == 0
    assert load["end_training_os_threads"] == 0
    rss = load["rss_mib"]
    assert rss["end"] - rss["start"] < RSS_GROWTH_MIB, rss  # memory back near its start


def test_the_server_kept_answering(load):
    assert load["health_all"]["requests"] > 0
    assert load["health_all"]["failed"] == 0  # no /_stcore/health request failed or took over 10 s
    assert load["server_log_problems"] == ""
