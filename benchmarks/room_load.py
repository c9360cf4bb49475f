"""A class answering at once: 30 students in one room, through fitcore's room routes, on loopback.

The server is a subprocess serving fitcore.api's routes (the same handlers `streamlit run app.py` mounts)
with uvicorn on a free loopback port; it opens one room and prints its code, and reveals the answer once
every student's answer is counted (what the teacher's Reveal does). Each student is a thread with its own
`fitcore_owner` cookie and its own keep-alive connection that, as a page in a room does:

1. reads the room every ROOM_POLL_S (GET /fitcore/room);
2. at the same moment as every other student (a barrier), answers (POST /fitcore/room/answer);
3. goes on reading until it sees the reveal.

It checks that every answer was counted exactly once (the teacher's counts against the choices sent), that a
second answer and a guessed code are refused, and prints the answers' latencies, how long the reveal took
to reach the last student, and the server's CPU time. Bounded: at most `--students` threads and
`--seconds` seconds. Run: `python -m benchmarks.room_load [--students 30] [--hold 10]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlencode

from benchmarks.browser import free_port
from fitcore.core import identity

TEACHER = "e" * 32
QUESTION = "rows/1/5b2c00000000"
CHOICES = 4
ROOM_POLL_S = 1.0  # dashboard.classroom.ROOM_POLL_S


def serve(port: int, students: int, hold: float) -> None:
    """The server side: the routes on `port`, one room, revealed `hold` s after `students` answers are in
    (the teacher looks at the counts and talks about them; every page goes on reading the room)."""
    import uvicorn
    from starlette.applications import Starlette

    from fitcore import api
    from fitcore.core.rooms import Rooms

    rooms = Rooms()
    code = rooms.open(TEACHER)
    rooms.ask(code, TEACHER, QUESTION, CHOICES)

    def teacher() -> None:  # the teacher's page reads the counts, and reveals once all are in
        while rooms.state(code, TEACHER).answered < students:
            time.sleep(0.05)
        time.sleep(hold)
        rooms.reveal(code, TEACHER, QUESTION)
        print(json.dumps({"revealed_at": time.time()}), flush=True)

    threading.Thread(target=teacher, daemon=True).start()
    app = Starlette(routes=api.routes(get_rooms=lambda: rooms))
    print(json.dumps({"code": code}), flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


SECRET = secrets.token_bytes(32)  # the server's (FITCORE_SECRET): each student's page is signed, as a page is


def request(conn, method: str, path: str, query: dict, owner: str) -> tuple[int, dict | None, float]:
    started = time.perf_counter()
    cookie = f"fitcore_owner={owner}; fitcore_signed={identity.sign(owner, SECRET)}"
    conn.request(method, f"{path}?{urlencode(query)}", headers={"Cookie": cookie})
    response = conn.getresponse()
    body = response.read()
    return response.status, (json.loads(body) if body else None), time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds from the last answer to the reveal")
    parser.add_argument("--seconds", type=float, default=60.0, help="give up after this long")
    args = parser.parse_args(argv)
    n = max(1, min(args.students, 200))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", f"from benchmarks.room_load import serve; serve({port}, {n}, {args.hold})"],
        stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env={**os.environ, "FITCORE_SECRET": SECRET.hex()},
    )  # fmt: skip
    try:
        code = json.loads(server.stdout.readline())["code"]
        for _ in range(200):  # until uvicorn listens
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
    barrier = threading.Barrier(n)
    answers: list[float] = []
    seen_reveal: list[float] = []
    polls: list[float] = []
    problems: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def student(i: int) -> None:
        owner = f"{i + 1:032x}"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        # its page's first poll joins the room: only a page that reads the room has its answers counted
        joined, _, _ = request(conn, "GET", "/fitcore/live", {"room": code, "since": 0}, owner)
        if joined != 200:
            problems.append(f"student {i}: joining the room {joined}")
        status, body, took = request(conn, "GET", "/fitcore/room", {"room": code}, owner)
        if status != 200 or "counts" in body:
            problems.append(f"student {i}: first read {status} {body}")
        barrier.wait()  # every student answers at the same moment
        status, _, took = request(conn, "POST", "/fitcore/room/answer",
                                  {"room": code, "q": QUESTION, "choice": i % CHOICES}, owner)  # fmt: skip
        once_more = {"room": code, "q": QUESTION, "choice": 0}
        again, _, _ = request(conn, "POST", "/fitcore/room/answer", once_more, owner)
        guessed, _, _ = request(conn, "GET", "/fitcore/room", {"room": "A" * 22}, owner)
        with lock:
            answers.append(took)
            if (status, again, guessed) != (204, 409, 404):
                problems.append(f"student {i}: answer {status}, again {again}, guessed {guessed}")
        while time.monotonic() < deadline:
            status, body, took = request(conn, "GET", "/fitcore/room", {"room": code}, owner)
            with lock:
                polls.append(took)
            if body and body.get("revealed"):
                with lock:
                    seen_reveal.append(time.time())
                return
            time.sleep(ROOM_POLL_S)
        problems.append(f"student {i}: no reveal within {seconds:g} s")

    cpu0, wall0 = cpu_seconds(server.pid), time.perf_counter()
    threads = [threading.Thread(target=student, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 5)
    wall, cpu = time.perf_counter() - wall0, cpu_seconds(server.pid) - cpu0
    revealed_at = json.loads(server.stdout.readline())["revealed_at"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    _, body, _ = request(conn, "GET", "/fitcore/room", {"room": code}, TEACHER)
    expected = [sum(1 for i in range(n) if i % CHOICES == c) for c in range(CHOICES)]
    if body["counts"] != expected:
        problems.append(f"counts {body['counts']}, expected {expected}")
    q = statistics.quantiles(answers, n=20) if len(answers) > 1 else answers * 19
    print(f"students: {n}, all answering at once; counts {body['counts']} (expected {expected})")
    print(f"answer latency: median {statistics.median(answers) * 1e3:.1f} ms, p95 {q[18] * 1e3:.1f} ms, "
          f"max {max(answers) * 1e3:.1f} ms")  # fmt: skip
    print(f"room reads: {len(polls)}, median {statistics.median(polls) * 1e3:.1f} ms, "
          f"max {max(polls) * 1e3:.1f} ms")  # fmt: skip
    print(f"reveal reached the last student {max(seen_reveal) - revealed_at:.2f} s after the teacher's "
          f"Reveal ({len(seen_reveal)}/{n} saw it; a page reads every {ROOM_POLL_S:g} s)")  # fmt: skip
    print(f"server CPU: {cpu:.2f} s in {wall:.1f} s ({100 * cpu / wall:.1f} % of one core, "
          f"{100 * cpu / wall / n:.2f} % per student)")  # fmt: skip
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
