"""Joining the room once: ``room join URL --seat NAME`` keeps the room, the seat and its key for this user
outside the repository, and every later check (a command line, a notebook kernel, after restarts) reports there;
``EXPLAINER_ROOM``/``EXPLAINER_SEAT`` still override; identical machines are told apart; the board's database
defaults to this user's state folder. Each "machine" here is its own XDG_CONFIG_HOME."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explainer.room import client
from roomserver import FAIL_ACCEPT, PASS_ACCEPT, REPO, room_server

pytestmark = pytest.mark.slow


def _machine(tmp_path: Path, name: str) -> dict:
    """The environment of one learner's machine: its own settings folder, nothing of the room set."""
    env = {k: v for k, v in os.environ.items() if k not in (client.ENV_ROOM, client.ENV_SEAT)}
    env["XDG_CONFIG_HOME"] = str(tmp_path / name / "config")
    return env


def _room(env: dict, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "explainer", "room", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


def _check(env: dict, path: Path):
    return subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(path)],
                          capture_output=True, text=True, env={**env, "EXPLAINER_WORKSHOP_BUDGET": "3"}, cwd=REPO,
                          timeout=300)


def _cells(board) -> dict:
    return {r["seat"]: r["cells"] for r in board.api("/api/board")[1]["seats"]}


def test_join_once_then_every_check_reports_to_the_seat_across_kernels(tmp_path):
    laptop = _machine(tmp_path, "laptop")
    wrong, right = tmp_path / "wrong.py", tmp_path / "right.py"
    wrong.write_text(FAIL_ACCEPT)
    right.write_text(PASS_ACCEPT)
    with room_server(tmp_path / "room.sqlite3") as board:
        joined = _room(laptop, "join", board.url, "--seat", "  ada  ")
        assert joined.returncode == 0 and "joined http://127.0.0.1:" in joined.stdout, joined.stderr
        assert "token" not in joined.stdout                       # the learner's screen does not show the token
        assert _cells(board) == {"ada": {}}                       # the board shows the seat at once
        settings = Path(laptop["XDG_CONFIG_HOME"]) / "explainer" / "room.json"
        assert stat.S_IMODE(settings.stat().st_mode) == 0o600
        assert stat.S_IMODE(settings.parent.stat().st_mode) == 0o700
        kept = json.loads(settings.read_text())
        assert kept["room"] == board.url and kept["seat"] == "ada" and kept["keys"][board.url]["ada"]
        assert not str(settings).startswith(str(REPO))

        assert _check(laptop, wrong).returncode == 1              # a command line: no %env, no variables
        probe = ("from explainer.workshop import check\nimport sys, threading\nr = check('accept', sys.argv[1])\n"
                 "[t.join(5) for t in threading.enumerate() if t.name == 'explainer-room-report']\nprint(r.status)\n")
        kernel = subprocess.run([sys.executable, "-c", probe, str(right)], capture_output=True, text=True,
                                env={**laptop, "EXPLAINER_WORKSHOP_BUDGET": "3"}, cwd=tmp_path, timeout=300)
        assert kernel.stdout.split() == ["pass"], kernel.stderr          # another kernel, after a "restart"
        assert _cells(board)["ada"]["accept"] == {"passed": True, "failure": None, "attempts": 2}

        status = _room(laptop, "status")
        assert "seat 'ada', with its seat key" in status.stdout and board.token not in status.stdout
        other = _check({**laptop, client.ENV_SEAT: "ada-2"}, wrong)        # EXPLAINER_SEAT overrides
        assert other.returncode == 1 and _cells(board)["ada-2"]["accept"]["failure"] == "distinct values"


def test_a_seat_is_not_taken_twice_and_identical_machines_differ(tmp_path):
    one, two = _machine(tmp_path, "vm1"), _machine(tmp_path, "vm2")
    with room_server(tmp_path / "room.sqlite3") as board:
        assert _room(one, "join", board.url, "--seat", "ada").returncode == 0
        taken = _room(two, "join", board.url, "--seat", "ada")
        assert taken.returncode == 2 and len(taken.stderr.strip().splitlines()) == 1
        assert "belongs to another learner" in taken.stderr
        assert not (Path(two["XDG_CONFIG_HOME"]) / "explainer" / "room.json").exists() or \
            "room" not in json.loads((Path(two["XDG_CONFIG_HOME"]) / "explainer" / "room.json").read_text())
        look = _room(two, "join", board.url, "--seat", "\u0430da")          # Cyrillic a: one script per name
        assert look.returncode == 2 and "look-alike" in look.stderr
        seats = set()
        for env in (_machine(tmp_path, "vm3"), _machine(tmp_path, "vm4")):   # no join: EXPLAINER_ROOM, the default
            probe = ("from explainer.room import client\nimport sys\n"
                     "client.report_verdict('accept', True, None, wait=True)\nprint(client.seat_name())\n")
            out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                                 env={**env, client.ENV_ROOM: board.url, client.ENV_SEAT: ""}, cwd=tmp_path)
            seats.add(out.stdout.strip())
        assert len(seats) == 2 and all("@" in s for s in seats), seats   # user@host-XXXX, one per machine
        assert seats <= set(_cells(board))


def test_join_with_the_board_down_keeps_the_room_and_bad_input_is_one_line(tmp_path):
    laptop = _machine(tmp_path, "laptop")
    down = _room(laptop, "join", "http://127.0.0.1:9/?token=t", "--seat", "ada")
    assert down.returncode == 1 and "the board did not answer" in down.stderr
    assert client.ENV_ROOM not in down.stderr
    for args, needle in ((("join", "file:///etc/passwd", "--seat", "ada"), "expected the board's URL"),
                         (("join", "http://127.0.0.1:9/?token=t"), "--seat NAME"),
                         (("join", "http://127.0.0.1:9/?token=t", "--seat", "\x1b\x07"), "printable")):
        out = _room(laptop, *args)
        assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_notebook_joins_with_one_call(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    from explainer.room import join
    with room_server(tmp_path / "room.sqlite3") as board:
        out = join(board.url, seat="nb-seat")
        assert out.joined and client.room() == board.url and client.seat_name() == "nb-seat"
        key = client.seat_key(board.url, "nb-seat")
        assert key and key not in repr(out) + str(vars(out)) + json.dumps(client.LAST)
        client.report_verdict("accept", False, "ties", wait=True)
        assert _cells(board)["nb-seat"]["accept"]["failure"] == "ties"
        assert key not in json.dumps(client.LAST)


def test_a_notebooks_join_shows_and_stores_no_secret(tmp_path):
    """The documented cell, run in a real kernel and saved: the .ipynb holds neither the seat key nor the room
    token in any output. (Before: the cell's output was the board's answer, seat key included, and another
    process posted a pass as that seat with only the saved file.)"""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    laptop = _machine(tmp_path, "laptop")
    with room_server(tmp_path / "room.sqlite3") as board:
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell("from explainer.room import join\n"
                                      f"join({board.url!r}, seat='ada')"),
            nbformat.v4.new_code_cell(f"out = join({board.url!r}, seat='ada')\nprint(out)\nout")])
        old = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "PYTHONPATH")}
        os.environ.update(XDG_CONFIG_HOME=laptop["XDG_CONFIG_HOME"], PYTHONPATH=str(REPO))
        try:
            nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        saved = tmp_path / "joined.ipynb"
        nbformat.write(nb, saved)
        key = json.loads((Path(laptop["XDG_CONFIG_HOME"]) / "explainer" / "room.json").read_text())["keys"][board.url]["ada"]
        outputs = json.dumps([c["outputs"] for c in json.loads(saved.read_text())["cells"]])
        assert "joined http://127.0.0.1:" in outputs and "'ada'" in outputs
        assert key not in outputs and board.token not in outputs
        forged = client.post(client.report_url(board.url), {"exercise": "accept", "passed": True, "failure": None,
                                                              "seat": "ada", "time": time.time(), "seat_key": None})
        assert forged.get("status") == 403                       # the file gives another process nothing to post with


def test_the_boards_database_defaults_outside_the_checkout(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "explainer", "room", "serve", "--port", "0"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("room board: http://127.0.0.1:")
        db = tmp_path / "state" / "explainer" / "room.sqlite3"
        deadline = time.monotonic() + 10
        while not db.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert db.exists() and stat.S_IMODE(db.stat().st_mode) == 0o600
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        assert not list(tmp_path.glob("*.sqlite3"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
    assert proc.returncode == 0
