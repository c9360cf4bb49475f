"""The classroom load test in CI: 12 sessions on `streamlit run app.py`, 4 runs training at once.

The same code as `python -m benchmarks.load_test`, run once for the module and then checked fact by fact.
Each session is a client of Streamlit's own websocket protocol (benchmarks/session_client.py) with its own
owner cookie, beside the page's live view (benchmarks/live_client.py), which asks GET /fitcore/live for
news every 0.4 s while the run trains (every second while it waits) and reruns the page once when the run's
status changes, as the browser's component does, so that a class of sessions fits on 2 cores beside the
server. The first 4 sessions hold every slot at 1 step/s until the other 8 show their place in the queue, so
the cap is reached and a queue is seen by construction; the 8 then train at 50 steps/s, 4 s a run, so that
every live view is asked about a run that lasts. Nothing here is skipped: without websockets or pyarrow (both
Streamlit's own dependencies) the module fails.
"""

from __future__ import annotations

import math

import pytest

from benchmarks.live_client import POLL_S
from benchmarks.load_test import (
    ANSWER_ALLOWANCE_S,
    GOODBYE_SLACK_S,
    HEALTH_P95_MS,
    MAX_GAP_S,
    RSS_GROWTH_MIB,
    TOLERANCE,
    LoadSettings,
    reference,
    run_load,
    session_fields,
    session_table,
    summary,
)

SESSIONS, CAP, PACE = 12, 4, 50
STEPS = 200  # the tutorial: 200 rows, one batch, 200 epochs
# idle timeout 6 s: a closed session's run is reaped 6 s after its last read (the abandoned sessions), three
# times the longest gap between a live page's answers this test allows (MAX_GAP_S);
# goodbye grace 3 s: a run whose page said goodbye is freed 3 s later unless a page reads it again
SETTINGS = LoadSettings(
    sessions=SESSIONS,
    cap=CAP,
    idle_timeout=6.0,
    closed_grace=3.0,
    abandoned=2,
    pace=str(PACE),
    timeout=200.0,
)

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
        assert s["step"] == s["total"] == STEPS
        want = reference(session_fields(i))  # lstsq on the session's own data, computed in the test
        assert len(s["learned"]) == 3
        assert s["learned"] == pytest.approx(want, abs=TOLERANCE)  # the results table
        assert s["page_lstsq"] == pytest.approx(want, abs=1e-4)  # the page shows 4 decimals
        assert s["live_learned_step"] == STEPS  # the live view's last answer holds the final step
        assert s["live_learned"] == pytest.approx(want, abs=TOLERANCE)


def test_the_sessions_answers_differ(load):
    # each session has its own W and b: a session showing another session's run would fail the lstsq check
    learned = [tuple(s["learned"]) for s in load["per_session"]]
    assert len(set(learned)) == SESSIONS


def test_every_live_view_was_answered_all_through_its_run(load):
    # a run of 200 steps at 50 steps/s trains 4 s; asked every POLL_S, and allowing each answer
    # ANSWER_ALLOWANCE_S, its live view gets at least floor(4 / (0.4 + 0.6)) = 4 answers while it trains
    least = math.floor(STEPS / PACE / (POLL_S + ANSWER_ALLOWANCE_S))
    assert least == 4
    for s in load["per_session"][CAP:]:
        assert s["run_s"] >= STEPS / PACE - 0.2, s["status_text"]  # the pace is the most it steps
        assert s["updates"] >= least, (s["session"], s["updates"])
    for s in load["per_session"]:  # the holders too, by their own runs' length
        assert s["updates"] >= s["least_updates"] >= 1, (s["session"], s["updates"], s["run_s"])
        assert s["max_gap_s"] < MAX_GAP_S, (s["session"], s["max_gap_s"])  # never 2 s without news
        assert s["failed_requests"] == 0, s["errors"]
    assert load["max_gap_s"] < MAX_GAP_S
    assert load["dropped_while_open"] == 0  # no open session's run was reaped under it


def test_the_page_reruns_only_when_its_run_changes(load):
    # no rerun on a timer: the page's script ran to open it, to start the run, once per status change its
    # live view saw (Queued > Running > Finished: 2, Running > Finished: 1) and, for a holder, to change
    # the pace; the server may merge two reruns asked for at once, never add one
    for i, s in enumerate(load["per_session"]):
        changes = len(s["statuses"]) - 1
        assert s["status_reruns"] == changes, (s["session"], s["statuses"])
        assert s["script_runs"] <= 2 + changes + (1 if i < CAP else 0), (s["session"], s["script_runs"])
    holders, behind = load["per_session"][:CAP], load["per_session"][CAP:]
    assert all(s["statuses"] == ["Running", "Finished"] for s in holders)
    assert all(s["statuses"] == ["Queued", "Running", "Finished"] for s in behind)


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


def test_a_reload_finds_its_run_and_a_goodbye_frees_it(load):
    reload = load["reload"]
    assert "error" not in reload, reload.get("error")
    assert reload["trained_before_reload"]
    assert reload["reload_bye_status"] == 204  # the first page's goodbye was taken
    assert reload["reload_found"] == reload["run_id"]  # same cookie, no run id: the owner's latest run
    assert reload["reload_status"] == "Running"
    assert reload["stranger_statuses"] == [404, 404]  # another cookie, with or without the run id
    assert reload["trains_after_grace"]  # the reloaded page read it within the grace: it was kept
    assert reload["bye_status"] == 204
    assert reload["gone_after_s"] is not None
    assert reload["gone_after_s"] <= SETTINGS.closed_grace + GOODBYE_SLACK_S


def test_the_server_kept_answering(load):
    assert load["health_all"]["requests"] > 0
    assert load["health_all"]["failed"] == 0  # no /_stcore/health request failed or took over 10 s
    assert load["health_during_runs"]["p95_ms"] < HEALTH_P95_MS
    assert load["server_log_problems"] == ""
