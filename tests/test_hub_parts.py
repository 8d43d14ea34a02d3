"""The hub's parts that need no JupyterHub: the room code, the sign-in buckets, names and account prefixes, the
learner's client on a hub, and the board's hub mode (a report's seat is who the hub says; a report for another
learner is refused), with a stand-in for the hub's answer. The real hub: tests/test_hub.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tornado.httpclient
import tornado.httpserver
import tornado.netutil

from explainer.hub import accounts
from explainer.hub.sign_in_limits import Bucket
from explainer.hub.state import CODE_ALPHABET, Settings, State, new_code, same_code
from explainer.room import client
from explainer.room.board import server

REPO = Path(__file__).resolve().parents[1]


def test_a_room_code_is_typed_in_any_case_with_or_without_its_dash():
    code = new_code()
    assert len(code) == 9 and code[4] == "-" and set(code.replace("-", "")) <= set(CODE_ALPHABET)
    for typed in (code, code.lower(), code.replace("-", ""), f" {code[:4]} {code[5:]} "):
        assert same_code(typed, code)
    assert not same_code(code[:-1] + ("2" if code[-1] != "2" else "3"), code)
    assert not same_code("", code)


def test_a_bucket_gives_a_burst_then_one_try_per_period():
    b = Bucket(burst=3, every=10.0)
    for _ in range(3):
        assert b.wait("x", now=0.0) == 0.0
        b.spend("x", now=0.0)
    assert b.wait("x", now=0.0) == pytest.approx(10.0)
    assert b.wait("x", now=5.0) == pytest.approx(5.0)
    assert b.wait("x", now=10.0) == 0.0
    assert b.wait("other", now=0.0) == 0.0                  # by address


@pytest.mark.parametrize("typed, why", [("bo\x1bb", "printable"), ("a\u202eb", "invisible character"), ("", "printable"),
                                        ("p\u0430ypal", "one script"), ("a/b", "'/'"), ("..", "'/'")])
def test_names_the_hub_refuses(typed, why):
    with pytest.raises(accounts.NameRefused) as refused:
        accounts.clean_name(typed)
    assert why in str(refused.value) and str(refused.value).startswith("name:")


def test_names_the_hub_keeps_as_typed_after_the_seat_rules():
    assert accounts.clean_name("  Zoë   Ng ") == "Zoë Ng"
    assert accounts.clean_name("ＡＮＡ") == "ANA"             # full-width letters are the plain ones


@pytest.mark.parametrize("prefix", ["exl-", "xh123-", "ab"])
def test_account_prefixes(prefix):
    assert accounts.check_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["", "x", "Exl-", "1ab", "a b", "root;", "averyveryverylongprefix"])
def test_bad_account_prefixes(prefix):
    with pytest.raises(ValueError):
        accounts.check_prefix(prefix)


def test_a_hub_room_keeps_its_path_and_sends_the_servers_token(monkeypatch):
    hub_room = "http://127.0.0.1:8123/services/board/"
    assert client.api_url(hub_room, "report") == "http://127.0.0.1:8123/services/board/api/report"
    laptop = "http://10.0.0.2:8765/?token=T"
    assert client.api_url(laptop, "report") == "http://10.0.0.2:8765/api/report?token=T"
    monkeypatch.delenv(client.ENV_HUB_TOKEN, raising=False)
    assert client.hub_headers(hub_room) == {}
    monkeypatch.setenv(client.ENV_HUB_TOKEN, "abc")
    assert client.hub_headers(hub_room) == {"Authorization": "token abc"}
    assert client.hub_headers(laptop) == {}                  # a laptop room's token never goes with another


class StandIn:
    """What the hub would answer: token A is ana's, token B is bea's; the page needs token ADMIN."""

    async def admit(self, handler):
        auth = handler.request.headers.get("Authorization", "")
        if handler.request.path.endswith("/api/report"):
            name = {"token A": "ana", "token B": "bea"}.get(auth)
            if name is None:
                handler.refuse(403, "the hub does not know this token")
            return name
        if auth != "token ADMIN":
            handler.refuse(403, "the board is the instructor's")
        return None


def report(seat: str, passed: bool) -> bytes:
    return json.dumps({"exercise": "accept", "passed": passed, "failure": None if passed else "ties",
                       "seat": seat, "time": time.time(), "seat_key": None}).encode()


def test_the_boards_hub_mode_seats_whom_the_hub_names_and_nobody_else(tmp_path):
    async def scenario():
        room = server.Room(str(tmp_path / "board.sqlite3"), auth=StandIn())
        app = server.make_app(room, prefix="/services/board/")
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        http = tornado.httpserver.HTTPServer(app)
        http.add_sockets(sockets)
        base = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/services/board/"
        fetch = tornado.httpclient.AsyncHTTPClient()

        async def call(path, token, body=None):
            r = await fetch.fetch(base + path, method="POST" if body else "GET", body=body, raise_error=False,
                                  headers={"Authorization": f"token {token}"} if token else {})
            return r.code, json.loads(r.body or b"null")

        try:
            out = {"own": await call("api/report", "A", report("ana", False)),
                   "bea": await call("api/report", "B", report("bea", True)),
                   "forged": await call("api/report", "A", report("bea", False)),      # newer: it would win
                   "unknown": await call("api/report", "Z", report("bea", False)),
                   "join": await call("api/join", "A", json.dumps({"seat": "ana", "seat_key": None}).encode()),
                   "learner's view": await call("api/board", "A"),
                   "board": await call("api/board", "ADMIN")}
        finally:
            http.stop()
            room.store.close()
        return out

    out = asyncio.run(scenario())
    assert out["own"][0] == 200 and out["own"][1]["seat"] == "ana"
    assert out["forged"][0] == 403 and "only for themselves" in out["forged"][1]["error"]
    assert out["unknown"][0] == 403 and out["bea"][0] == 200
    assert out["join"][0] == 403                           # the stand-in's page rule; the hub's own says 404
    assert out["learner's view"][0] == 403
    cells = {row["seat"]: row["cells"]["accept"]["passed"] for row in out["board"][1]["seats"]}
    assert cells == {"ana": False, "bea": True}              # the forged failures for bea never landed


def test_a_lan_hub_warns_that_it_is_plain_http(capsys):
    from explainer.commands.hub import announce
    from explainer.hub.state import Settings
    announce(Settings(listen="0.0.0.0", port=8000), "/var/lib/explainer-hub")("ABCD-EFGH", "cgroup v1: ...")
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and out.startswith("hub: http://") and "room code: ABCD-EFGH" in out
    assert "plain HTTP" in err and "listening on 0.0.0.0" in err
    announce(Settings(), "/s")("ABCD-EFGH", "x")
    out, err = capsys.readouterr()
    assert out == "hub: http://127.0.0.1:8000/   room code: ABCD-EFGH\n" and "plain HTTP" not in err


@pytest.mark.parametrize("args, says", [
    (["--memory", "lots"], "--memory 'lots'"), (["--port", "70000"], "--port"), (["--listen", "my-laptop"], "--listen"),
    (["--account-prefix", "Root"], "account prefix"), (["--prefix", "/nonexistent/hub"], "make hub"),
])
def test_hub_serve_refuses_bad_input_in_one_line(tmp_path, args, says):
    out = subprocess.run([sys.executable, "-m", "explainer", "hub", "serve", "--state", str(tmp_path / "s"), *args],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.count("\n") == 1 and says in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_new_home_gets_the_notebooks_and_its_own_copy_of_the_signature_store(tmp_path):
    import pwd
    prefix = tmp_path / "prefix"
    (prefix / "notebooks" / "workshop").mkdir(parents=True)
    (prefix / "notebooks" / "workshop" / "exercises.ipynb").write_text("{}")
    signed = prefix / "venv" / "share" / "jupyter" / "explainer-trust" / "nbsignatures.db"
    signed.parent.mkdir(parents=True)
    signed.write_bytes(b"signatures")
    home = tmp_path / "homes" / "exl-001"
    home.parent.mkdir()
    accounts.make_home(home, prefix / "notebooks", pwd.getpwuid(os.getuid()))
    assert (home / "notebooks" / "workshop" / "exercises.ipynb").is_file()
    store = accounts.trust_store(home)
    assert store.read_bytes() == b"signatures" and store != signed          # its own copy: the learner writes it
    assert oct(home.stat().st_mode & 0o777) == "0o700"


def test_hub_remove_ends_a_hub_that_outlived_its_serve(tmp_path):
    """`hub serve` killed (SIGKILL: no clean-up ran) leaves its JupyterHub running in its own session; `hub remove`
    ends every process that carries this hub's state folder before it deletes anything (a bench run left such hubs)."""
    state = State(tmp_path / "state")
    state.save_settings(Settings(prefix=str(tmp_path / "prefix"), homes=str(tmp_path / "homes"),
                                 account_prefix=f"xr{os.getpid() % 1000}-"))
    hub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                           env={**os.environ, "EXPLAINER_HUB_STATE": str(state.path)})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                             env={**os.environ, "EXPLAINER_HUB_STATE": str(tmp_path / "another-hub")})
    try:
        out = subprocess.run([sys.executable, "-m", "explainer", "hub", "remove", "--yes", "--state", str(state.path)],
                             capture_output=True, text=True, timeout=120, cwd=REPO)
        assert out.returncode == 0, out.stderr
        assert "ended 1 process of this hub" in out.stdout
        assert hub.wait(10) is not None and not state.path.exists()
        assert other.poll() is None                          # another hub's process is not this hub's
    finally:
        for p in (hub, other):
            p.kill()
            p.wait()
