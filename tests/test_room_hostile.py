"""The board holds a hostile room: a real server on loopback (``room serve``, ended by its own pid), a hostile
client on other loopback addresses (127.0.0.2...) beside a real room on 127.0.0.1.

Each attack of the second hostile pass is here: slow bodies with and without the token, a flood of connections,
a process out of file descriptors, oversized headers, values that break a naive parser (a number too large for a
float, NaN, duplicate keys), posting as someone else's seat, a look-alike name, made-up seats, two servers on one
file, a world-readable database, tracebacks and the token in the log. Every server test is bounded in time
(``timeout``s on every socket, ``BOUND`` on the whole flood) and in connections."""

from __future__ import annotations

import http.client
import json
import os
import resource
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explainer.room import client, seat_names
from explainer.room.board import guard, intake
from roomserver import ONE_MACHINE_ROOM, REPO, report, room_server

pytestmark = pytest.mark.slow
BOUND = 40.0                       # seconds: the whole flood test, whatever the server does
HOSTILE = [f"127.0.0.{i}" for i in range(2, 7)]


def _host_port(board) -> tuple[str, int]:
    host, port = board.base.removeprefix("http://").split(":")
    return host, int(port)


def _connect(board, source: str) -> socket.socket:
    return socket.create_connection(_host_port(board), timeout=5, source_address=(source, 0))


def _post(board, path: str, body: bytes, source: str = "127.0.0.1", token: str | None = "") -> tuple[int, dict]:
    host, port = _host_port(board)
    conn = http.client.HTTPConnection(host, port, timeout=10, source_address=(source, 0))
    try:
        conn.request("POST", f"{path}?token={board.token if token == '' else token}", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _stderr(tmp_path: Path) -> str:
    return (tmp_path / "room-server-stderr.txt").read_text()


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_flood_from_one_client_neither_blocks_the_room_nor_fills_the_log(tmp_path):
    """Hostile 127.0.0.2: 300 connections, slow bodies without a token, slow bodies with it, idle ones. The
    real room on 127.0.0.1 posts 30 seats through the learners' client meanwhile: every report lands at once."""
    t_end = time.monotonic() + BOUND
    with room_server(tmp_path / "room.sqlite3", *ONE_MACHINE_ROOM) as board:
        held, refused = [], 0
        for i in range(300):
            try:
                s = _connect(board, HOSTILE[0])
                head = (f"POST /api/report{'?token=' + board.token if i % 3 == 1 else ''} HTTP/1.1\r\nHost: x\r\n"
                        "Content-Type: application/json\r\nContent-Length: 2000\r\n\r\n{")
                s.sendall(head.encode() if i % 3 < 2 else b"GET /api/summary HT")     # the third: slow headers
                held.append(s)
            except OSError:
                refused += 1
        post_url, times = client.report_url(board.url), []
        for i in range(30):                                 # the real room, through the product's client
            t0 = time.monotonic()
            out = client.post(post_url, client.payload("accept", i % 2 == 0, "ties", seat=f"learner-{i:02d}"),
                              timeout=5)
            times.append(time.monotonic() - t0)
            assert out.get("status") == 200, out
        assert max(times) < 2.0, times
        assert board.summary()["seats"] == 30
        open_now = _open_fds(board.proc.pid)
        assert open_now < 64 + guard.PER_CLIENT, open_now    # one client holds at most PER_CLIENT connections
        tokenless_answered = 0
        for s in held[0::3]:
            try:
                s.settimeout(2)
                tokenless_answered += s.recv(64).startswith(b"HTTP/1.1 401")
            except OSError:
                pass
        deadline = time.monotonic() + guard.HEADER_TIMEOUT + guard.BODY_TIMEOUT + 5
        while _open_fds(board.proc.pid) > open_now - 40 and time.monotonic() < min(deadline, t_end):
            time.sleep(0.5)                               # the slow ones end at their deadline
        assert _open_fds(board.proc.pid) < open_now - 40
        for s in held:
            s.close()
        assert board.api("/api/summary", timeout=5)[0] == 200
    err = _stderr(tmp_path)
    assert tokenless_answered >= 1                         # refused from the headers alone, body unread
    assert "Traceback" not in err and board.token not in err and len(err) < 4000, err[-2000:]
    assert time.monotonic() < t_end


def test_out_of_file_descriptors_the_board_pauses_says_one_line_and_recovers(tmp_path):
    """The server's file limit lowered to 128 under it, five hostile addresses open 64 connections each: accept
    fails for lack of descriptors. The board neither spins nor floods its log, and serves again after."""
    with room_server(tmp_path / "room.sqlite3") as board:
        resource.prlimit(board.proc.pid, resource.RLIMIT_NOFILE, (128, 128))
        held = []
        for source in HOSTILE:
            for _ in range(guard.PER_CLIENT):
                try:
                    held.append(_connect(board, source))
                except OSError:
                    pass
        time.sleep(2.0)
        cpu0 = _cpu_seconds(board.proc.pid)
        time.sleep(2.0)
        assert _cpu_seconds(board.proc.pid) - cpu0 < 1.0        # no busy loop on the failing accept
        for s in held:
            s.close()
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                status = board.api("/api/summary", timeout=3)[0]
            except OSError:
                time.sleep(0.5)
        assert status == 200
    err = _stderr(tmp_path)
    assert "Traceback" not in err and len(err.splitlines()) < 20, err[-3000:]
    assert "no file descriptor left" in err


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_every_malformed_value_is_a_4xx_and_the_log_has_no_traceback(tmp_path):
    def raw(value: bytes, field: str = "time") -> bytes:
        body = {"exercise": "accept", "passed": True, "failure": None, "seat": "ada", "time": 1, "seat_key": None}
        text = json.dumps(body).encode()
        return text.replace(f'"{field}": {json.dumps(body[field])}'.encode(), f'"{field}": '.encode() + value)

    cases = {"a 400-digit time": raw(b"9" * 400), "1e400": raw(b"1e400"), "NaN": raw(b"NaN"),
             "-Infinity": raw(b"-Infinity"), "a nested time": raw(b'{"a": [1]}'), "a list seat": raw(b"[1]", "seat"),
             "a duplicate key": raw(b'1, "time": 2'), "bytes not UTF-8": b'{"exercise": "\xff\xfe"}',
             "deep nesting": b"[" * 1000 + b"]" * 1000, "a huge seat": raw(json.dumps("x" * 1500).encode(), "seat"),
             "an object key": raw(b'{"k": 1}', "seat_key"), "a number key": raw(b"12", "seat_key")}
    with room_server(tmp_path / "room.sqlite3") as board:
        for what, body in cases.items():
            status, answer = _post(board, "/api/report", body)
            assert 400 <= status < 500 and "error" in answer, (what, status, answer)
        assert _post(board, "/api/join", b'{"seat": null, "seat_key": null}')[0] == 400
        assert board.api("/api/summary", body=b"{}")[0] == 400             # a body where none is taken
        with _connect(board, HOSTILE[0]) as s:                            # 200 kB of headers: refused unread
            s.sendall(f"GET /api/summary?token={board.token} HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 200_000}\r\n\r\n".encode())
            try:
                first = s.recv(64)
            except ConnectionResetError:
                first = b""
            assert not first.startswith(b"HTTP/1.1 200")
        assert board.summary()["seats"] == 0
    err = _stderr(tmp_path)
    assert "Traceback" not in err and board.token not in err and "refused 400" in err


def test_a_seat_belongs_to_who_claimed_it_and_look_alikes_are_refused(tmp_path):
    with room_server(tmp_path / "room.sqlite3") as board:
        status, first = _post(board, "/api/report", report("accept", True, None, "alice"))
        key = first["seat_key"]
        assert status == 200 and isinstance(key, str) and len(key) >= 20
        assert _post(board, "/api/report", report("accept", False, "ties", "alice"))[0] == 403       # no key
        assert _post(board, "/api/report", report("accept", False, "ties", "alice", seat_key="x" * 32))[0] == 403
        status, again = _post(board, "/api/report", report("accept", False, "ties", "alice", seat_key=key))
        assert status == 200 and again["seat_key"] is None
        assert _post(board, "/api/report", report("accept", True, None, "\uff41lice"))[0] == 403   # full-width a
        assert _post(board, "/api/report", report("accept", True, None, "ace"))[0] == 200
        look = {"\u0430lice": 400, "ALICE": 409, "\u0410LICE": 400, "\u0391lice": 400, "a\u200blice": 400,
                "\u0430\u0441\u0435": 409, "\u0410\u0421\u0415": 409}
        for name, code in look.items():      # Cyrillic a, upper, mixed, Greek, zero-width, all-Cyrillic "ace"
            assert _post(board, "/api/report", report("accept", True, None, name))[0] == code, name
        status, joined = _post(board, "/api/join", json.dumps({"seat": "bo", "seat_key": None}).encode())
        assert status == 200 and joined["seat"] == "bo"
        assert _post(board, "/api/join", json.dumps({"seat": "bo", "seat_key": joined["seat_key"]}).encode()) == (
            200, {"seat": "bo", "seat_key": None})
        assert _post(board, "/api/report", report("sync-fields", True, None, "bo", seat_key=joined["seat_key"]))[0] == 200
        rows = [r["seat"] for r in board.api("/api/board")[1]["seats"]]
    assert rows == ["ace", "alice", "bo"]
    with room_server(tmp_path / "room.sqlite3") as again:                       # a restart keeps the keys
        assert _post(again, "/api/report", report("accept", True, None, "alice"))[0] == 403
        assert _post(again, "/api/report", report("accept", True, None, "alice", seat_key=key))[0] == 200


def test_one_client_claims_a_bounded_number_of_seats_the_instructors_folder_any(tmp_path):
    with room_server(tmp_path / "room.sqlite3", "--seats-per-client", "3") as board:
        codes = [_post(board, "/api/report", report("accept", False, "ties", f"fake-{i}"), source=HOSTILE[0])[0]
                 for i in range(6)]
        assert codes == [200, 200, 200, 429, 429, 429]
        assert _post(board, "/api/report", report("accept", True, None, "real"), source=HOSTILE[1])[0] == 200
        key = client.instructor_key(board.url)                  # room serve kept it for this user
        assert key and key not in "".join(board.lines)          # never printed
        wrong = [_post_as(board, report("accept", True, None, f"guess-{i}"), "x" * 32) for i in range(4)]
        own = [_post_as(board, report("accept", True, None, f"handin-{i}"), key) for i in range(10)]
        assert wrong == [200, 200, 200, 429] and own == [200] * 10   # the instructor grading a folder
        assert board.summary()["seats"] == 3 + 1 + 3 + 10


def test_the_instructors_folder_grading_sends_the_instructor_key(monkeypatch):
    """`workshop check ID DIR` (report_verdict(instructor=True)) sends the key `room serve` kept, beside the hub's
    header when there is one; a learner's check never sends it. (A merge once let the hub's header replace it, so
    the instructor's folder was capped like a client.)"""
    sent = []
    monkeypatch.setattr(client, "post", lambda url, body, timeout=client.TIMEOUT, headers=None:
                        sent.append(headers) or {"status": 200})
    room = "http://127.0.0.1:9/?token=instructor-test"
    client.keep_instructor_key(room, "k" * 32)
    monkeypatch.setenv(client.ENV_ROOM, room)
    monkeypatch.delenv(client.ENV_HUB_TOKEN, raising=False)
    client.report_verdict("accept", True, None, seat="handin-1", wait=True, instructor=True)
    client.report_verdict("accept", True, None, seat="ada", wait=True)
    assert sent == [{client.INSTRUCTOR_HEADER: "k" * 32}, {}]
    hub = "http://127.0.0.1:9/services/board/"
    client.keep_instructor_key(hub, "h" * 32)
    monkeypatch.setenv(client.ENV_ROOM, hub)
    monkeypatch.setenv(client.ENV_HUB_TOKEN, "server-token")
    client.report_verdict("accept", True, None, seat="handin-2", wait=True, instructor=True)
    assert sent[-1] == {"Authorization": "token server-token", client.INSTRUCTOR_HEADER: "h" * 32}


def _post_as(board, body: bytes, instructor: str) -> int:
    host, port = _host_port(board)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("POST", f"/api/report?token={board.token}", body=body,
                     headers={"Content-Type": "application/json", client.INSTRUCTOR_HEADER: instructor})
        return conn.getresponse().status
    finally:
        conn.close()


def test_one_board_per_database_and_the_file_is_private(tmp_path):
    db = tmp_path / "room.sqlite3"
    with room_server(db) as board:
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert board.api("/api/report", body=report("accept", True, None, "ada"))[0] == 200
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in tmp_path.glob("room.sqlite3*"))
        second = subprocess.run([sys.executable, "-m", "explainer", "room", "serve", "--port", "0", "--db", str(db)],
                                capture_output=True, text=True, timeout=60, cwd=REPO)
        assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert "another room board already serves" in second.stderr and second.stdout == ""
        assert board.summary()["seats"] == 1                   # the first one still serves


def test_a_valid_token_does_not_buy_a_slow_body_or_slow_headers(tmp_path):
    """Both trickle one byte a second, for ever: each is closed at its deadline (both watched at once)."""
    with room_server(tmp_path / "room.sqlite3") as board:
        heads = {"body": f"POST /api/report?token={board.token} HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{{",
                 "headers": f"GET /api/summary?token={board.token} HTTP/1.1\r\nHost: x\r\nX-A: "}
        socks = {what: _connect(board, HOSTILE[0]) for what in heads}
        for what, s in socks.items():
            s.sendall(heads[what].encode())
            s.setblocking(False)
        t0, ends = time.monotonic(), {}
        while len(ends) < len(socks) and time.monotonic() - t0 < guard.HEADER_TIMEOUT + guard.BODY_TIMEOUT + 5:
            for what, s in socks.items():
                if what in ends:
                    continue
                try:
                    s.send(b" ")
                    if s.recv(1) == b"":
                        ends[what] = time.monotonic() - t0
                except BlockingIOError:
                    pass
                except OSError:
                    ends[what] = time.monotonic() - t0
            time.sleep(1.0)
        for s in socks.values():
            s.close()
    assert ends["body"] < guard.BODY_TIMEOUT + 3 and ends["headers"] < guard.HEADER_TIMEOUT + 3, ends
    assert min(ends.values()) > guard.HEADER_TIMEOUT - 2, ends         # held until its deadline, not answered


def test_the_log_is_one_line_a_second_without_the_token():
    class Sink(list):
        def write(self, text):
            self.append(text)

        def flush(self):
            pass
    sink = Sink()
    log = guard.OneLine("s3cret", stream=sink)
    for i in range(1000):
        log.line(f"refused 403 from x: s3cret \x1b[2J {i}\nsecond line")
    time.sleep(guard.EVERY)
    log.line("later")
    text = "".join(sink)
    assert text.count("\n") == 2 and "s3cret" not in text and "\x1b" not in text and "second line" not in text
    assert "(and 999 more left out)" in text.splitlines()[1]


@pytest.mark.parametrize("name, kept", [("ada", "ada"), ("  ada   lovelace ", "ada lovelace"), ("\uff41da", "ada"),
                                        ("ﬁne", "fine")])
def test_seat_names_are_normalized(name, kept):
    assert intake.seat_name(name) == kept == client.clean_seat(name)
    assert seat_names.looks("\u0410\u0430") & seat_names.looks("Aa") == {"aa"}


# ---- the third hostile round: the board lies to nobody ------------------------------------------------------
INVISIBLE = {"a combining grapheme joiner": "alice\u034f", "a Khmer inherent vowel": "alice\u17b4",
             "a Hangul filler": "alice\u3164", "a Braille blank": "alice\u2800", "a tag character": "alice\U000e0061",
             "a variation selector": "alice\ufe0f", "a soft hyphen": "al\u00adice"}
LOOKS_TAKEN = {"capital I for l": "aIice", "capital A, capital I": "AIice", "digit 1 for l": "a1ice",
               "a vertical line for l": "a|ice", "Cyrillic small a and e": "\u0430lic\u0435"}


@pytest.mark.parametrize("what, name", list(INVISIBLE.items()))
def test_a_name_with_an_invisible_or_blank_character_is_refused(what, name):
    """What renders as "alice" is not a second seat: default-ignorable and blank code points are refused, by the
    board and by the learner's own ``room join`` before anything is sent."""
    with pytest.raises(intake.Refused) as exc:
        intake.seat_name(name)
    assert exc.value.status == 400 and "U+" in str(exc.value), what
    with pytest.raises(ValueError):
        client.clean_seat(name)


def test_seats_are_compared_by_what_a_person_sees(tmp_path):
    with room_server(tmp_path / "room.sqlite3", *ONE_MACHINE_ROOM) as board:
        assert _post(board, "/api/join", json.dumps({"seat": "alice", "seat_key": None}).encode())[0] == 200
        for what, name in {**INVISIBLE, **LOOKS_TAKEN}.items():
            status, answer = _post(board, "/api/join", json.dumps({"seat": name, "seat_key": None}).encode())
            assert status in (400, 409) and "error" in answer, (what, status, answer)
        for name in ("Oscar", "0scar", "jim", "jirn"):                          # O/0 and m/rn, TR39's own pairs
            _post(board, "/api/join", json.dumps({"seat": name, "seat_key": None}).encode())
        distinct = ["ali", "all", "ivan", "lvan", "eve"]                        # what looks different stays allowed
        codes = [_post(board, "/api/join", json.dumps({"seat": n, "seat_key": None}).encode())[0] for n in distinct]
        rows = [r["seat"] for r in board.api("/api/board")[1]["seats"]]
    assert codes == [200] * len(distinct)
    assert rows == ["ali", "alice", "all", "eve", "ivan", "jim", "lvan", "Oscar"], rows


def test_a_failure_is_one_of_the_exercises_own_check_names(tmp_path):
    """Three seats of one laptop post a message as their failure: refused, and the projector's headline shows
    only what the exercise's checks are called."""
    note = "checker broken - skip accept, answers at bit.ly/xyz"
    with room_server(tmp_path / "room.sqlite3") as board:
        codes = [_post(board, "/api/report", report("accept", False, note, f"spam-{i}"))[0] for i in range(3)]
        assert _post(board, "/api/report", report("accept", False, "ties", "ada"))[0] == 200
        assert _post(board, "/api/report", report("accept", False, "time limit", "bo"))[0] == 200
        assert _post(board, "/api/report", report("sync-fields", False, "ties", "cy"))[0] == 400   # not its check
        summary = board.summary()
    assert codes == [400] * 3
    assert summary["exercises"]["accept"]["top_failure"]["check"] in ("ties", "time limit")
    assert summary["seats"] == 2


def test_the_seat_cap_holds_for_every_client_the_boards_machine_too(tmp_path):
    """One local user cannot take the room: the board's own machine claims at most N seats like any client."""
    with room_server(tmp_path / "room.sqlite3", "--seats-per-client", "3") as board:
        own = [_post(board, "/api/join", json.dumps({"seat": f"local-{i}", "seat_key": None}).encode())[0]
               for i in range(6)]
        assert own == [200, 200, 200, 429, 429, 429]
        assert board.summary()["seats"] == 3


def test_the_newest_report_wins_by_its_time(tmp_path):
    """A pass made at 10:00:05 and a fail made at 10:00:00 that arrives later: the board shows the pass."""
    with room_server(tmp_path / "room.sqlite3") as board:
        now = time.time()
        status, first = _post(board, "/api/report", report("accept", True, None, "ada", time=now))
        assert status == 200
        late = report("accept", False, "ties", "ada", time=now - 5, seat_key=first["seat_key"])
        assert _post(board, "/api/report", late)[0] == 200
        cells = {r["seat"]: r["cells"] for r in board.api("/api/board")[1]["seats"]}
    assert cells["ada"]["accept"] == {"passed": True, "failure": None, "attempts": 2}


def test_the_favicon_request_is_answered_quietly(tmp_path):
    with room_server(tmp_path / "room.sqlite3") as board:
        status, _ = board.api("/favicon.ico", token=None)
        page = board.api("/")[1]
    assert status in (200, 204)
    assert 'rel="icon"' in page
    assert "/favicon.ico" not in _stderr(tmp_path)


def test_an_endless_loop_shows_on_the_board_as_the_time_limit(tmp_path):
    """The board names the limit in words ("time limit"), never a bare "limit"; every failure it can show is one of
    the exercise's check names or a known kind."""
    loop = tmp_path / "loop.py"
    loop.write_text("def entropy_bound_accept(entropy, bound):\n    while True:\n        pass\n")
    with room_server(tmp_path / "room.sqlite3") as board:
        env = {**os.environ, "EXPLAINER_ROOM": board.url, "EXPLAINER_SEAT": "looper",
               "EXPLAINER_WORKSHOP_BUDGET": "2", "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(loop)],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        cells = {r["seat"]: r["cells"] for r in board.api("/api/board")[1]["seats"]}
    assert out.returncode == 1 and "room: report not sent" not in out.stderr, out.stderr
    assert cells["looper"]["accept"]["failure"] == "time limit"
