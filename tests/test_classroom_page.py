"""The classroom on the page, through AppTest: the teacher's link, the presenter mode, predict then reveal."""

from __future__ import annotations

import re

import pytest

from dashboard import classroom
from fitcore.core import i18n
from fitcore.kit.live import short_label
from fitcore.view import quiz
from tests import test_app
from tests.helpers import wait_for
from tests.test_app import _pool, live_view, shown

page = test_app.page  # the page fixture: fresh sessions, and every run stopped afterwards

ASK = {"ask": "1", "pace": "1"}  # one step a second: a paused run stays at a step the test can read


def test_a_hidden_control_is_absent_and_a_locked_one_disabled_with_the_links_value(page):
    at = page({"batch_size": "50", "seed": "3", "hide": "strategy,seed", "lock": "batch_size,devices,preset"})
    assert not at.exception and at.error == []
    with pytest.raises(KeyError):
        at.radio(key="strategy")
    with pytest.raises(KeyError):
        at.number_input(key="seed")
    assert "Strategy" not in [h.value for h in at.sidebar.subheader]
    batch = at.number_input(key="batch_size")
    assert batch.disabled and batch.value == 50
    assert at.slider(key="virtual_devices").disabled and at.selectbox(key="preset").disabled
    assert not at.number_input(key="epochs").disabled
    # the link keeps the classroom (in the controls' order), and the link's values
    assert at.query_params["hide"] == "seed,strategy"
    assert at.query_params["lock"] == "batch_size,devices,preset"
    assert (at.query_params["seed"], at.query_params["batch_size"]) == ("3", "50")
    # a locked control keeps the link's value even when the session says otherwise
    at.session_state["batch_size"] = 120
    at.session_state["seed"] = 9
    at.run()
    assert at.number_input(key="batch_size").value == 50
    assert (at.query_params["seed"], at.query_params["batch_size"]) == ("3", "50")
    # a student's page does not offer the builder
    assert "Teacher's link" not in [e.proto.label for e in at.sidebar.expander]
    at.button(key="start").click()
    at.run()
    pool, owner = _pool(at)
    cfg = pool.snapshot(owner, at.session_state["run_id"]).config
    assert (cfg.batch_size, cfg.seed, cfg.devices) == (50, 3, "virtual:2")
    at.button(key="stop").click()
    at.run()


def test_bad_classroom_parameters_show_one_error_each(page):
    at = page({"hide": "bias,colour", "presenter": "big"})
    errors = [shown(e) for e in at.error]
    link = "The link had a bad value, so the default is used. "
    assert errors == [
        link + "hide: got 'bias,colour'; allowed: comma-separated control names from: weights, bias, "
        "noise, data_size, batch_size, epochs, lr, optimizer, shuffle, seed, devices, strategy, workers, "
        "mesh, reshard_after_forward, layers, width, microbatches, schedule, block_ms, slow_stage, pace, "
        "preset",
        link + "presenter: got 'big'; allowed: 1 or 0 (or true/false, on/off, yes/no)",
    ]
    assert not at.number_input(key="bias").disabled  # nothing hidden or locked
    assert "hide" not in at.query_params and "presenter" not in at.query_params


def test_a_room_link_that_switches_questions_off_is_refused_not_overruled(page):
    teacher = page(ASK)
    teacher.button(key="room_open").click().run()
    student = page({"ask": "0", "room": teacher.session_state["room"]})
    assert [shown(e) for e in student.error] == [
        "The link had a bad value, so the default is used. ask: got '0'; allowed: 1 with a room (a room's "
        "pages ask each paused step's question), or no room"
    ]
    # the student's page follows the room, which asks: no toggle of its own to switch it off
    assert student.session_state["room"] == teacher.session_state["room"] and student.session_state["ask"]
    assert [t.key for t in student.toggle] == []


def test_the_builder_writes_the_whole_link(page):
    at = page()
    (builder,) = [e for e in at.sidebar.expander if e.proto.label == "Teacher's link"]
    assert list(at.sidebar.code) == []  # folded away: no link drawn
    at.session_state[classroom.BUILDER_OPEN] = True  # the teacher opens it
    at.multiselect(key="teach_hide").set_value(["seed", "preset"])
    at.multiselect(key="teach_lock").set_value(["batch_size", "seed"])
    at.toggle(key="presenter").set_value(True)
    at.run()
    (code,) = [c.value for c in at.sidebar.code]
    assert code.startswith("/?weights=5.2,9.6&bias=3.4&")
    assert code.endswith("&pace=20&hide=seed,preset&lock=batch_size&presenter=1")
    # the builder's choices shape the link it shows, not this page
    assert not at.number_input(key="seed").disabled and "hide" not in at.query_params


def test_presenter_goes_to_the_live_view_and_the_link_and_leaves_it(page):
    at = page({"presenter": "1"})
    assert at.toggle(key="presenter").value is True
    assert live_view(at)["presenter"] is True and at.query_params["presenter"] == "1"
    at.toggle(key="presenter").set_value(False)
    at.run()
    assert live_view(at)["presenter"] is False and "presenter" not in at.query_params


def paused_at_a_step(at):
    at.button(key="start").click()
    at.run()
    pool, owner = _pool(at)
    run_id = at.session_state["run_id"]
    wait_for(lambda: pool.snapshot(owner, run_id).step >= 1, 30, interval=0.02, what="a first step")
    at.button(key="pause").click()
    at.run()
    return pool.snapshot(owner, run_id)


def from_events(snap, question: quiz.Question):
    """The answer to a DataParallel step's question, read off the Step itself."""
    step = snap.latest
    if question.kind == "rows":
        device = dict(question.text.fields)["device"]
        return next(r.rows for r in step.replicas if short_label(r.device) == device)
    if question.kind == "idle":
        busy = {r.device for r in step.replicas}
        return tuple(short_label(d) for d in snap.devices if d not in busy)
    phases = step.phases.phases()
    if question.kind == "meet":
        return next(short_label(p.device) for p in phases if p.name == "loss")
    return sum(p.bytes for p in phases if p.name == "gather")


def asked_of(snap) -> quiz.Question:
    return quiz.question_for(snap.latest, snap.config, snap.devices, snap.extra)


def test_a_paused_run_asks_and_a_right_answer_counts_and_reveals_the_step(page):
    at = page(ASK)
    snap = paused_at_a_step(at)
    question = asked_of(snap)
    data = live_view(at)
    assert data["reveal"] is False and data["ask_step"] == snap.latest.step == question.step
    # the veil says the question and its choices, over the picture on the first screen; the buttons are below
    choices = " · ".join(c.say("en") for c in question.choices)
    assert data["veil"] == f"{question.text.say('en')}\n{choices}\nAnswer the question below to see the step."
    labels = [at.button(key=f"quiz_choice_{i}").label for i in range(len(question.choices))]
    assert labels == [c.say("en") for c in question.choices]
    assert question.value == from_events(snap, question)
    at.button(key=f"quiz_choice_{question.answer}").click()
    at.run()
    assert [s.value for s in at.success if s.value.startswith("Right.")]
    assert "Right answers in this browser: 1 of 1" in [c.value for c in at.caption]
    assert live_view(at)["reveal"] is True
    # Step takes one step and asks about it; a wrong answer counts as asked, not as right
    at.button(key="step").click()
    at.run()
    pool, owner = _pool(at)
    after = pool.snapshot(owner, at.session_state["run_id"])
    assert after.step == snap.step + 1 and live_view(at)["ask_step"] == after.step
    assert live_view(at)["reveal"] is False
    question = asked_of(after)
    assert question.value == from_events(after, question)
    wrong = (question.answer + 1) % len(question.choices)
    at.button(key=f"quiz_choice_{wrong}").click()
    at.run()
    assert [e.value for e in at.error if e.value.startswith("Not quite: the answer is ")]
    assert "Right answers in this browser: 1 of 2" in [c.value for c in at.caption]
    assert live_view(at)["reveal"] is True
    # another browser (another owner id) has its own count
    other = page(ASK)
    paused_at_a_step(other)
    assert other.session_state["owner"] != at.session_state["owner"]
    assert "Right answers in this browser: 0 of 0" in [c.value for c in other.caption]
    for each in (at, other):
        each.button(key="stop").click()
        each.run()


def test_without_ask_a_paused_run_shows_its_picture(page):
    at = page({"pace": "1"})
    paused_at_a_step(at)
    assert live_view(at)["reveal"] is True and live_view(at)["ask_step"] is None
    with pytest.raises(KeyError):
        at.button(key="quiz_choice_0")
    at.button(key="stop").click()
    at.run()


def at_step(at, target: int):
    """A page's paused run taken to `target` with Step (each page of a class at the teacher's step)."""
    snap = paused_at_a_step(at)
    while snap.step < target:
        at.button(key="step").click().run()
        pool, owner = _pool(at)
        snap = pool.snapshot(owner, at.session_state["run_id"])
    assert snap.step == target
    return snap


COUNT_ROW = re.compile(
    r"`[█ ]{20}` \*\*(\d+)\*\* · "
)  # one choice's bar on the teacher's page, once revealed
RUN_BUTTONS = ("start", "pause", "resume", "step", "stop", "reset")


@pytest.mark.slow  # four sessions of the page: about 6 s on 2 cores
def test_a_rooms_students_follow_the_teachers_run_and_the_tally_stays_the_teachers(page):
    from fitcore.core import rooms
    from fitcore.view import controls

    teacher = page(ASK)
    teacher.button(key="room_open").click().run()
    code = teacher.session_state["room"]
    pin = rooms.server_rooms().pin(code)
    assert len(code) == 22 and rooms.PIN_PATTERN.fullmatch(pin)
    links = [c.value for c in teacher.code]  # the class's short link first, then the link builder's
    assert links[0].endswith(f"/?room={pin}") and f"room={code}" in links[1]
    assert teacher.markdown.values.count(f"### Room code: {pin}") == 1
    snap = at_step(teacher, 2)
    question = asked_of(snap)
    key = quiz.question_key(question)
    # the teacher's picture is veiled by the question itself, its counts and Reveal (frontend/follow.js)
    data = live_view(teacher)
    assert (data["teach"], data["reveal"], data["tally"]) == (code, False, None)  # no answer before Reveal
    assert data["question"] == {
        "key": key,
        "text": question.text.say(),
        "choices": [c.say() for c in question.choices],
    }
    class_ = [page({**ASK, "room": code}) for _ in range(3)]
    for i, student in enumerate(class_):
        # a student's page follows the teacher's run: no run of its own, no run button, no settings
        follow = live_view(student)
        assert follow["follow"] == code and follow["payload"] is None and "teach" not in follow
        assert [b.key for b in student.button if b.key in RUN_BUTTONS] == []
        assert student.button(key="room_leave") and not student.number_input
        choice = question.answer if i < 2 else (question.answer + 1) % len(question.choices)
        # what the page's choice posts (fitcore.api's answer route, tests/test_follow.py drives it over HTTP)
        rooms.server_rooms().follow(code, student.session_state["owner"])  # its live view's first poll
        assert rooms.server_rooms().answer(code, student.session_state["owner"], key, choice)
        assert not rooms.server_rooms().answer(code, student.session_state["owner"], key, choice)  # once
    state = rooms.server_rooms().state(code, teacher.session_state["owner"])
    counts = [0] * len(question.choices)
    counts[question.answer] += 2
    counts[(question.answer + 1) % len(question.choices)] += 1
    assert list(state.counts) == counts and state.answered == 3 and state.following == 3  # a poll each
    assert rooms.server_rooms().state(code, class_[0].session_state["owner"]).counts is None  # the teacher's
    rooms.server_rooms().reveal(code, teacher.session_state["owner"], key)  # the veil's Reveal
    teacher.run()
    assert live_view(teacher)["reveal"] is True
    # the answer and the class's counts under the picture, on the projector's first screen
    assert live_view(teacher)["tally"] == {
        "key": key, "text": question.text.say(), "choices": [c.say() for c in question.choices],
        "answer": question.answer, "why": question.explanation.say(), "counts": counts, "answered": 3,
    }
    rows = [m.value for m in teacher.markdown if COUNT_ROW.match(m.value)]
    assert [int(COUNT_ROW.match(r)[1]) for r in rows] == counts  # below the picture, once revealed
    # a student leaves: a page of its own, with the teacher's settings
    leaving = class_[2]
    leaving.button(key="room_leave").click().run()
    assert leaving.session_state["room"] is None and leaving.button(key="start")
    assert test_app.control_values(leaving) == controls.config_values(snap.config)
    # the teacher closes the room: the students' pages become their own at their next run
    teacher.button(key="room_close").click().run()
    class_[0].run()
    assert class_[0].session_state["room"] is None and class_[0].button(key="start")
    # a guessed code joins nothing: one error line, and the room's counts stay as they are
    guess = page({**ASK, "room": "A" * 22})
    assert guess.session_state["room"] is None
    assert [e for e in guess.error if "room: got 'AAAA" in shown(e)]


# -- the way in: a short code, typed or in the link, on the server's network address --------------------


def test_a_student_joins_by_the_links_short_code_or_by_typing_it_and_a_wrong_one_is_one_line(page):
    from fitcore.core import rooms

    teacher = page(ASK)
    teacher.button(key="room_open").click().run()
    code = teacher.session_state["room"]
    pin = rooms.server_rooms().pin(code)
    by_link = page({"room": pin})  # the short link: ?room=<the code>, no settings
    assert by_link.session_state["room"] == code and by_link.button(key="room_leave")
    typed = page()
    typed.text_input(key="room_pin").input(f" {pin.lower()[:3]} {pin.lower()[3:]} ")  # as a hand types it
    typed.button[[b.label for b in typed.button].index("Join")].click().run()
    assert typed.session_state["room"] == code and typed.button(key="room_leave") and not typed.error
    wrong = page()
    wrong.text_input(key="room_pin").input("ZZZZZZ")
    wrong.button[[b.label for b in wrong.button].index("Join")].click().run()
    assert wrong.session_state["room"] is None
    assert [e.value for e in wrong.error] == [
        "No open room has the code 'ZZZZZZ': check it with your teacher (6 letters and digits)"
    ]


def test_closing_the_room_tells_its_students_calmly(page):
    from fitcore.core import rooms

    teacher = page(ASK)
    teacher.button(key="room_open").click().run()
    pin = rooms.server_rooms().pin(teacher.session_state["room"])
    by_link = page({"room": pin})
    typed = page()  # drew its own controls first: Streamlit forgets them while the page follows the room
    typed.text_input(key="room_pin").input(pin)
    typed.button[[b.label for b in typed.button].index("Join")].click().run()
    assert typed.button(key="room_leave")
    teacher.button(key="room_close").click().run()
    for student in (by_link, typed):
        student.run()
        assert not student.exception
        assert [i.value for i in student.info if "closed" in i.value] == [
            "The teacher closed the room: this page is your own now."
        ]
        assert not student.error and student.button(key="start")  # no red "bad value": a page of its own


def test_the_room_link_names_the_servers_network_address_or_says_how_to_reach_it(monkeypatch):
    import segno
    from streamlit import config, net_util

    from dashboard import roomlink

    monkeypatch.setattr(net_util, "get_internal_ip", lambda: "192.0.2.7")
    on_the_network = "http://192.0.2.7:8502/?room=K7QM2X"
    given = "http://192.0.2.9:8502/?room=K7QM2X"  # a server bound to one address: that address
    for address, link in (("", on_the_network), ("0.0.0.0", on_the_network), ("192.0.2.9", given),
                          ("127.0.0.1", None)):  # fmt: skip
        config.set_option("server.address", address)
        config.set_option("server.port", 8502)
        assert roomlink.join_link("K7QM2X") == (link, link is None)
    config.set_option("server.address", "")
    config.set_option("server.port", 8501)
    png = roomlink.qr_png(on_the_network)
    width = int.from_bytes(png[16:20], "big")  # the PNG's IHDR width: 10 px a module, 2 modules of border
    modules = segno.make(on_the_network, error="m").symbol_size(scale=1, border=0)[0]
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width == 10 * (modules + 4) and width >= 250


def test_the_teacher_reads_how_many_student_pages_follow_in_words():
    """The sidebar's count of a room's student pages says page or pages, not page(s)."""
    assert i18n.count("classroom.follow.count", 1, "en") == "1 student page follows this run"
    assert i18n.count("classroom.follow.count", 3, "en") == "3 student pages follow this run"
