"""The room board against a real server on loopback (``python -m explainer room serve``, ended by its own pid):
30 seats posting at once through the product's own client (4 of them through ``workshop check`` itself), the
summary exact, a restart keeping the room, the token and the report's shape enforced, the rate limit, the
client bounded in time and never changing a verdict, and the room command free of torch."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from explainer.room import client
from explainer.workshop import catalog
from explainer.room.board import intake, store as store_mod
from roomserver import (FAIL_ACCEPT, ONE_MACHINE_ROOM, PASS_ACCEPT, REPO, SIMULATED, expected_summary, fill_room, report,
                        room_server)

pytestmark = pytest.mark.slow
ROUTES = [("GET", "/"), ("GET", "/api/summary"), ("GET", "/api/board"), ("GET", "/api/events"),
          ("POST", "/api/report")]


def test_thirty_seats_at_once_the_summary_is_exact_and_a_restart_keeps_it(tmp_path):
    db = tmp_path / "room.sqlite3"
    with room_server(db, *ONE_MACHINE_ROOM) as board:
        assert board.url.startswith("http://127.0.0.1:")
        assert board.lines[-2] == ("learners run, in their explainer folder: .venv/bin/python -m explainer room join "
                                   f"'{board.url}' --seat <name>")      # as printed: tests/test_join_line.py
        fill_room(board, tmp_path)
        first = board.summary()
        token = board.token
        status, state = board.api("/api/board")
        assert state["seq"] == sum(len(p) for p in SIMULATED.values()) + 4
    assert first == expected_summary()
    assert first["seats"] == 30 and first["exercises"]["accept"]["top_failure"] == {"check": "distinct values",
                                                                                     "count": 9}
    with room_server(db, *ONE_MACHINE_ROOM) as again:    # a restart: same token, same room
        assert again.token == token
        assert again.summary() == first
        rows = {r["seat"]: r for r in again.api("/api/board")[1]["seats"]}
    assert rows["seat-03"]["cells"]["sync-fields"] == {"passed": True, "failure": None, "attempts": 2}
    assert rows["bo"]["cells"]["accept"]["failure"] == "syntax-error"      # the folder's file names
    assert rows["cli-fail"]["cells"]["accept"] == {"passed": False, "failure": "distinct values", "attempts": 1}


def test_every_route_needs_the_token_and_refused_reports_store_nothing(tmp_path):
    with room_server(tmp_path / "room.sqlite3") as board:
        ok = report("accept", True, None, "ada")
        for method, path in ROUTES:
            body = ok if method == "POST" else None
            assert board.api(path, token=None, body=body)[0] == 401, path
            assert board.api(path, token="not-the-token", body=body)[0] == 403, path
        bad = {
            "not JSON": b"{exercise: accept",
            "a list": b"[1, 2]",
            "the code too": report("accept", True, None, "ada", code="def entropy_bound_accept(): ..."),
            "a field missing": json.dumps({"exercise": "accept", "passed": True, "seat": "ada"}).encode(),
            "passed as a string": report("accept", "yes", None, "ada"),
            "a failure on a pass": report("accept", True, "ties", "ada"),
            "an empty seat": report("accept", False, "ties", ""),
            "a control character": report("accept", False, "ties", "ada\x1b[2J"),
            "a seat key of another type": report("accept", False, "ties", "ada", seat_key=7),
            "a time too large for a float": report("accept", False, "ties", "ada", time=10 ** 400),
            "a seat too long": report("accept", False, "ties", "x" * 65),
            "last year": report("accept", False, "ties", "ada", time=time.time() - 400 * 86400),
        }
        for what, body in bad.items():
            assert board.api("/api/report", body=body)[0] == 400, what
        assert board.api("/api/report", body=report("nope", False, "ties", "ada"))[0] == 422
        assert board.api("/api/report", body=report("accept", False, "x" * 3000, "ada"))[0] == 413
        host, port = board.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as raw:    # 200 kB announced, none sent:
            raw.sendall(f"POST /api/report?token={board.token} HTTP/1.1\r\nHost: x\r\n"    # refused unread
                        "Content-Type: application/json\r\nContent-Length: 200000\r\n\r\n".encode())
            assert raw.recv(200).split(b" ")[1] in (b"400", b"413")
        assert board.summary() == {"seats": 0, "exercises": {ex: {"passed": 0, "tried": 0, "top_failure": None}
                                                             for ex in catalog.EXERCISES}}
        assert board.api("/api/board")[1]["seq"] == 0


def test_a_seat_is_rate_limited_and_another_seat_is_not(tmp_path):
    with room_server(tmp_path / "room.sqlite3") as board:
        status, first = board.api("/api/report", body=report("accept", False, "ties", "ada"))
        codes = [status] + [board.api("/api/report", body=report("accept", False, "ties", "ada",
                                                                   seat_key=first["seat_key"]))[0]
                            for _ in range(intake.BURST + 4)]
        assert codes[:intake.BURST] == [200] * intake.BURST and 429 in codes[intake.BURST:]
        assert board.api("/api/report", body=report("accept", True, None, "bo"))[0] == 200
        cells = {r["seat"]: r["cells"]["accept"] for r in board.api("/api/board")[1]["seats"]}
        assert cells["ada"]["attempts"] == codes.count(200) and cells["bo"]["passed"]


def test_the_event_stream_sends_the_board_then_each_change(tmp_path):
    with room_server(tmp_path / "room.sqlite3") as board:
        host, port = board.base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", f"/api/events?token={board.token}")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"

        def next_state():
            while True:
                line = resp.fp.readline().decode()
                if line.startswith("data: "):
                    return json.loads(line[6:])

        assert next_state()["seq"] == 0
        assert board.api("/api/report", body=report("tensor-dict-gate", False, "two nodes: delivers", "ada"))[0] == 200
        state = next_state()
        assert state["seq"] == 1 and state["summary"]["exercises"]["tensor-dict-gate"]["top_failure"] == {
            "check": "two nodes: delivers", "count": 1}
        conn.close()


def test_the_room_is_bounded_by_its_seats(monkeypatch, tmp_path):
    monkeypatch.setattr(store_mod, "MAX_SEATS", 3)
    s = store_mod.Store(str(tmp_path / "r.sqlite3"), ["accept"])
    keys = [s.claim(f"s{i}", None, "10.0.0.1", 0.0, counted=False) for i in range(3)]
    for i in range(3):
        s.add({"seat": f"s{i}", "exercise": "accept", "passed": False, "failure": "ties", "time": 0.0}, 0.0)
    with pytest.raises(store_mod.RoomFull):
        s.claim("s3", None, "10.0.0.1", 0.0, counted=False)
    assert s.claim("s0", keys[0], "10.0.0.9", 0.0) is None                                   # known seat
    s.add({"seat": "s0", "exercise": "accept", "passed": True, "failure": None, "time": 0.0}, 0.0)
    assert s.db.execute("SELECT count(*) FROM latest").fetchone()[0] == 3
    assert s.summary()["exercises"]["accept"] == {"passed": 1, "tried": 3, "top_failure": {"check": "ties", "count": 2}}
    s.close()


def test_a_dead_board_neither_changes_nor_holds_up_a_check(tmp_path, monkeypatch):
    silent = socket.socket()                 # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        monkeypatch.setenv("EXPLAINER_ROOM", f"http://127.0.0.1:{silent.getsockname()[1]}/?token=t")
        t0 = time.monotonic()
        client.report_verdict("accept", False, "ties", seat="ada", wait=True)
        assert time.monotonic() - t0 < client.TIMEOUT + 1.0       # bounded: the post gives up, the check goes on
        assert "error" in client.LAST
        assert client.report_verdict("accept", True, None, seat="ada") is not None    # a notebook: no wait at all
    finally:
        silent.close()
    src = tmp_path / "wrong.py"
    src.write_text(FAIL_ACCEPT + "\nimport os\nprint('room seen by the learner:', os.environ.get('EXPLAINER_ROOM'))\n")
    runs = {}
    for room in (None, "http://127.0.0.1:9/?token=t"):
        env = {k: v for k, v in os.environ.items() if k != "EXPLAINER_ROOM"}
        if room:
            env["EXPLAINER_ROOM"] = room
        runs[room] = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(src)],
                                    env=env, capture_output=True, text=True, timeout=240, cwd=REPO)
    quiet, dead = runs[None], runs["http://127.0.0.1:9/?token=t"]
    assert quiet.returncode == dead.returncode == 1 and quiet.stdout == dead.stdout      # the same verdict
    assert "room seen by the learner: None" in dead.stdout    # the room's token never reaches learner code
    assert dead.stderr.count("room: report not sent") == 1 and "room" not in quiet.stderr


def test_a_report_is_six_fields_and_no_code():
    body = client.payload("accept", False, "distinct values", seat="ada")
    assert set(body) == set(client.FIELDS) == {"exercise", "passed", "failure", "seat", "time", "seat_key"}
    assert client.payload("accept", True, "ignored", seat="ada")["failure"] is None
    assert client.report_url("http://10.0.0.5:8765/?token=abc") == "http://10.0.0.5:8765/api/report?token=abc"
    with pytest.raises(ValueError):
        client.report_url("file:///etc/passwd")


def test_the_room_command_and_the_client_never_import_torch(tmp_path):
    with room_server(tmp_path / "room.sqlite3", python_flags=("-X", "importtime")) as board:
        assert board.summary()["seats"] == 0
    err = (tmp_path / "room-server-stderr.txt").read_text()
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in err.splitlines() if "|" in ln}
    assert "tornado.web" in imported and "explainer.room.board.server" in imported     # the probe sees imports
    assert not {m for m in imported if m.split(".")[0] in ("torch", "numpy")}
    out = subprocess.run([sys.executable, "-c", "import sys, explainer.room.client, explainer.workshop.catalog; "
                          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'tornado')))"],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("argv, words", [
    (["serve", "--port", "70000"], "--port"), (["serve", "--port", "0", "--listen", "nowhere"], "--listen"),
    (["serve", "--port", "0", "--db", "/nonexistent/x/r.db"], "--db"), (["sing"], "unknown action")])
def test_bad_input_is_one_line_and_exit_2(argv, words, tmp_path):
    out = subprocess.run([sys.executable, "-m", "explainer", "room", *argv], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        out = subprocess.run([sys.executable, "-m", "explainer", "room", "serve", "--port",
                              str(taken.getsockname()[1]), "--db", str(tmp_path / "r.db")],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "cannot serve" in out.stderr


def test_a_lan_board_warns_and_names_the_address(capsys):
    from explainer.commands import room
    room.announce("0.0.0.0")(8765, "T", "K")
    out, err = capsys.readouterr()
    assert "warning: listening on 0.0.0.0" in err and "http://0.0.0.0" not in out
    assert out.splitlines()[0].startswith("room board: http://") and out.splitlines()[0].endswith(":8765/?token=T")


def test_concurrent_posts_through_the_client_all_arrive(tmp_path, monkeypatch):
    with room_server(tmp_path / "room.sqlite3", *ONE_MACHINE_ROOM) as board:
        monkeypatch.setenv("EXPLAINER_ROOM", board.url)
        threads = [client.report_verdict("accept", i % 2 == 0, "ties", seat=f"p{i}") for i in range(40)]
        for t in threads:
            t.join(5)
        assert board.summary()["exercises"]["accept"] == {"passed": 20, "tried": 40,
                                                          "top_failure": {"check": "ties", "count": 20}}
    assert threading.active_count() < 5


def test_the_notebook_check_posts_on_every_path(tmp_path, monkeypatch):
    """``check()`` as a notebook calls it: a function that passes, a lambda (bad input), a file that fails."""
    import importlib.util
    from explainer.workshop import check
    (tmp_path / "cell.py").write_text(PASS_ACCEPT)
    spec = importlib.util.spec_from_file_location("room_test_cell", tmp_path / "cell.py")
    cell = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cell)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(FAIL_ACCEPT)
    solutions = {"nb-pass": cell.entropy_bound_accept, "nb-lambda": lambda entropy, bound: entropy,
                 "nb-file": str(wrong)}
    with room_server(tmp_path / "room.sqlite3") as board:
        monkeypatch.setenv("EXPLAINER_ROOM", board.url)
        verdicts = {}
        for seat, solution in solutions.items():
            monkeypatch.setenv("EXPLAINER_SEAT", seat)
            verdicts[seat] = check("accept", solution).status
        deadline = time.monotonic() + 10                   # the notebook does not wait: the posts arrive after
        while board.summary()["seats"] < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        cells = {r["seat"]: r["cells"]["accept"] for r in board.api("/api/board")[1]["seats"]}
    assert verdicts == {"nb-pass": "pass", "nb-lambda": "error", "nb-file": "fail"}
    assert cells == {"nb-pass": {"passed": True, "failure": None, "attempts": 1},
                     "nb-lambda": {"passed": False, "failure": "missing-function", "attempts": 1},
                     "nb-file": {"passed": False, "failure": "distinct values", "attempts": 1}}
