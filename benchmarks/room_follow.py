"""A room following its teacher: N students' pages on the teacher's run, through the page's own routes, on
loopback.

The server is a subprocess serving fitcore.api's routes (the same handlers `streamlit run app.py` mounts)
with uvicorn on a free loopback port, a real RunPool and one room. Its teacher (what the teacher's page
does): starts a run at 20 steps/s, pauses it after `--run` seconds, asks the room the paused step's question
(fitcore.view.quiz), and reveals it `--hold` seconds after every student's answer is in. Each student is a
thread with its own `fitcore_owner` cookie and keep-alive connection that polls as frontend/follow.js does:
GET /fitcore/live?room=&run=&since= every poll_ms (400) while the run moves, every FOLLOW_IDLE_MS (500) while
it stands; it answers the question once it shows (POST /fitcore/room/answer).

It prints the lag from each of the teacher's steps (its server time) to the first poll of each student's
page that shows it or a later one (median, p95, max: it includes the wait for the next poll), the age of
the newest step at each poll, the time from the Reveal to the last unveiled page, the server's CPU per
student, how many answers the server made for how many it sent (one shared answer per update), and the
failed requests.
Bounded: at most 100 students and `--seconds` seconds.
Run: `python -m benchmarks.room_follow [--students 30]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlencode

from benchmarks.browser import free_port
from benchmarks.room_load import cpu_seconds

TEACHER = "e" * 32
POLL_MS, FOLLOW_IDLE_MS = 400, 500  # dashboard's refresh_ms default; frontend/follow.js FOLLOW_IDLE_MS
PACE = 20.0


def serve(port: int, students: int, run_s: float, hold: float) -> None:
    """The server side: the routes on `port`, a pool, one room, and its teacher's actions."""
    import uvicorn
    from starlette.applications import Starlette

    from fitcore import api
    from fitcore.core.config import FitConfig
    from fitcore.core.rooms import Rooms
    from fitcore.follow import Followers
    from fitcore.runs.pool import PoolSettings, RunPool
    from fitcore.view import quiz

    pool = RunPool(PoolSettings(max_active=2, idle_timeout=3600, closed_grace=3600))
    rooms = Rooms()
    code = rooms.open(TEACHER)
    followers = Followers(lambda: pool, lambda: rooms)

    def teacher() -> None:
        time.sleep(1.0)  # the students' pages are open first, waiting for the run
        cfg = FitConfig(epochs=4000, devices="virtual:2")
        run_id = pool.submit(TEACHER, cfg, pace=PACE).run_id
        print(json.dumps({"started_at": time.time(), "run": run_id}), flush=True)
        time.sleep(run_s)
        pool.pause(TEACHER, run_id)
        time.sleep(0.3)  # the step under way when Pause came ends
        snap = pool.snapshot(TEACHER, run_id)
        question = quiz.question_for(snap.latest, snap.config, snap.devices, snap.extra)
        rooms.ask(code, TEACHER, quiz.question_key(question), len(question.choices))
        print(json.dumps({"asked_at": time.time(), "step": snap.step}), flush=True)
        while rooms.state(code, TEACHER).answered < students:
            time.sleep(0.02)
        time.sleep(hold)
        rooms.reveal(code, TEACHER, quiz.question_key(question))
        state = rooms.state(code, TEACHER)
        print(json.dumps({"revealed_at": time.time(), "counts": list(state.counts), "made": followers.made}),
              flush=True)  # fmt: skip

    threading.Thread(target=teacher, daemon=True).start()
    app = Starlette(routes=api.routes(lambda: pool, get_rooms=lambda: rooms, followers=followers))
    print(json.dumps({"code": code}), flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--run", type=float, default=8.0, help="seconds the teacher's run moves before Pause")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds from the last answer to the reveal")
    parser.add_argument("--seconds", type=float, default=60.0, help="give up after this long")
    args = parser.parse_args(argv)
    n = max(1, min(args.students, 100))
    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    server = subprocess.Popen(
        [sys.executable, "-c",
         f"from benchmarks.room_follow import serve; serve({port}, {n}, {args.run}, {args.hold})"],
        stdout=subprocess.PIPE, text=True, cwd=root,
    )  # fmt: skip
    try:
        code = json.loads(server.stdout.readline())["code"]
        for _ in range(400):  # until uvicorn listens
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
                break
            except OSError:
                time.sleep(0.05)
        return drive(server, port, code, n, args.seconds)
    finally:
        server.terminate()
        server.wait(10)


def drive(server, port: int, code: str, n: int, seconds: float) -> int:
    lags: list[float] = []  # each step of the run, to the first poll of a page that showed it (or later)
    ages: list[float] = []  # the newest step's age at each poll
    unveiled: list[float] = []
    sent = [0]
    failed: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    deadline = time.monotonic() + seconds

    def student(i: int) -> None:
        owner = f"{i + 1:032x}"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        run_id, since, seen_step, answered = None, 0, 0, False
        while not stop.is_set() and time.monotonic() < deadline:
            query = {"room": code, "since": since, "lang": "en", **({"run": run_id} if run_id else {})}
            try:
                conn.request(
                    "GET", f"/fitcore/live?{urlencode(query)}", headers={"Cookie": f"fitcore_owner={owner}"}
                )
                response = conn.getresponse()
                body = response.read()
            except OSError as exc:
                with lock:
                    failed.append(f"student {i}: {exc}")
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                time.sleep(0.2)
                continue
            now = time.time()
            with lock:
                sent[0] += 1
            if response.status != 200:
                with lock:
                    failed.append(f"student {i}: HTTP {response.status}")
                time.sleep(0.5)
                continue
            payload = json.loads(body)
            run = payload.get("run")
            if run:
                run_id = run["id"]
                steps = [p[0] for p in payload.get("loss", [])]
                since = max([since, *steps])
                pic = payload.get("picture")
                if pic and pic["step"] > seen_step:
                    if run["status"] == "running" and seen_step:  # the steps this poll brings, each's wait
                        waits = [
                            now - (pic["time"] - (pic["step"] - s) / PACE)
                            for s in range(seen_step + 1, pic["step"] + 1)
                        ]
                        with lock:
                            lags.extend(waits)
                            ages.append(now - pic["time"])
                    seen_step = pic["step"]
            question = payload["follow"]["question"]
            if question and not question["revealed"] and not answered:
                choice = {"room": code, "q": question["key"], "choice": i % len(question["choices"])}
                conn.request("POST", f"/fitcore/room/answer?{urlencode(choice)}",
                             headers={"Cookie": f"fitcore_owner={owner}"})  # fmt: skip
                answer = conn.getresponse()
                answer.read()
                answered = True
                if answer.status != 204:
                    with lock:
                        failed.append(f"student {i}: answer HTTP {answer.status}")
            if question and question["revealed"]:
                with lock:
                    unveiled.append(now)
                return
            moving = run and run["status"] == "running"
            time.sleep((POLL_MS if moving else FOLLOW_IDLE_MS) / 1000)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    started = json.loads(server.stdout.readline())
    cpu0, wall0 = cpu_seconds(server.pid), time.perf_counter()
    asked = json.loads(server.stdout.readline())
    cpu_run, wall_run = cpu_seconds(server.pid) - cpu0, time.perf_counter() - wall0
    revealed = json.loads(server.stdout.readline())
    for t in threads:
        t.join(seconds + 5)
    stop.set()
    q = statistics.quantiles(lags, n=20) if len(lags) > 1 else lags * 19
    print(f"students: {n}; the teacher's run at {PACE:g} steps/s for {asked['step']} steps "
          f"({started['run']}), then paused and asked")  # fmt: skip
    print(f"lag from a teacher's step to a student's page: median {statistics.median(lags) * 1e3:.0f} ms, "
          f"p95 {q[18] * 1e3:.0f} ms, max {max(lags) * 1e3:.0f} ms over {len(lags)} steps x pages "
          f"(a page polls every {POLL_MS} ms)")  # fmt: skip
    print(f"the newest step's age when a page got it: median {statistics.median(ages) * 1e3:.0f} ms, "
          f"max {max(ages) * 1e3:.0f} ms over {len(ages)} polls")  # fmt: skip
    print(f"reveal reached the last page {max(unveiled) - revealed['revealed_at']:.2f} s after it "
          f"({len(unveiled)}/{n} unveiled; a still run's page polls every {FOLLOW_IDLE_MS} ms)")  # fmt: skip
    share = 100 * cpu_run / wall_run
    print(f"server CPU while the run moved: {cpu_run:.2f} s in {wall_run:.1f} s ({share:.1f} % of one core, "
          f"{share / n:.2f} % per student, the run's own training included)")  # fmt: skip
    print(f"answers: {sent[0]} sent, {revealed['made']} shared answers made; counts {revealed['counts']}")
    print(f"failed requests: {len(failed)}")
    for f in failed[:10]:
        print("FAILED:", f)
    ok = not failed and len(unveiled) == n and sum(revealed["counts"]) == n
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
