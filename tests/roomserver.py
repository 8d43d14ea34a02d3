"""A real room board for tests: ``python -m explainer room serve --port 0`` on loopback, ended by its own pid."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from explainer.workshop import catalog

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0
ONE_MACHINE_ROOM = ("--seats-per-client", "60")    # one machine plays a room of 30 laptops (each its own client)


class Board:
    def __init__(self, proc, url: str, lines: list[str]):
        self.proc, self.url, self.lines = proc, url, lines
        self.base, _, self.token = url.partition("/?token=")

    def api(self, path: str, token: str | None = "", body: bytes | None = None, timeout: float = 10.0):
        """(status, parsed JSON or raw text) of one request; ``token=""`` means the room's own."""
        token = self.token if token == "" else token
        url = f"{self.base}{path}" + (f"?token={token}" if token is not None else "")
        req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def summary(self) -> dict:
        status, data = self.api("/api/summary")
        assert status == 200, data
        return data


def _read_until(proc, marker: str, deadline: float) -> list[str]:
    """The server's stdout lines up to the one starting with ``marker`` (read by a thread: bounded wait)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln.rstrip("\n")) for ln in proc.stdout], daemon=True).start()
    seen: list[str] = []
    while time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            break
        if seen[-1].startswith(marker):
            return seen
    raise RuntimeError(f"the room server did not start: {seen}")


@contextlib.contextmanager
def room_server(db: Path, *extra: str, python_flags: tuple[str, ...] = ()):
    """Start the real command; yield a ``Board``; SIGTERM it by its pid and wait (bounded); it must exit 0."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("EXPLAINER_ROOM", None)
    errors = open(db.parent / "room-server-stderr.txt", "a")       # read after it ends (never a full pipe)
    proc = subprocess.Popen([sys.executable, *python_flags, "-m", "explainer", "room", "serve", "--port", "0",
                             "--db", str(db), *extra], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=errors)
    try:
        lines = _read_until(proc, "stop: ", time.monotonic() + START_TIMEOUT)    # its three lines, at once
        url = next(ln for ln in lines if ln.startswith("room board: ")).split(": ", 1)[1]
        yield Board(proc, url, lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        errors.close()
    assert proc.returncode == 0, f"the room server exited {proc.returncode}"


def report(exercise: str, passed: bool, failure: str | None, seat: str, **over) -> bytes:
    body = {"exercise": exercise, "passed": passed, "failure": failure, "seat": seat, "time": time.time(),
            "seat_key": None, **over}
    return json.dumps(body).encode()


# ---- a room of 30 seats -----------------------------------------------------------------------------------
PASS_ACCEPT = ("import torch\n\ndef entropy_bound_accept(entropy, bound):\n"
               "    h, order = torch.sort(entropy, dim=-1)\n    keep = torch.cumsum(h, dim=-1) - h <= bound\n"
               "    return torch.zeros_like(keep).scatter_(-1, order, keep)\n")
FAIL_ACCEPT = "import torch\n\ndef entropy_bound_accept(entropy, bound):\n    return entropy <= bound\n"
# seat -> its reports in order, (exercise, failing checks in order; [] = pass); the latest one counts
SIMULATED = {}
for i in range(1, 27):
    seat, plan = f"seat-{i:02d}", []
    plan.append(("accept", [] if i <= 10 else ["distinct values", "ties"] if i <= 18 else ["ties"] if i <= 20
                 else None))
    if i <= 12:
        plan.append(("sync-fields", ["no stale reads", "equal to PP=1"]))
    if i <= 5:
        plan.append(("sync-fields", []))                          # failed first, then passed
    if i >= 21:
        plan.append(("tensor-dict-gate", ["two nodes: delivers"] if i <= 24 else ["returns a bool"]))
    SIMULATED[seat] = [(ex, fails) for ex, fails in plan if fails is not None]
# the seats that run the real command line: seat -> (exercise, source, first failing check or None)
CLI = {"cli-pass": PASS_ACCEPT, "cli-fail": FAIL_ACCEPT}
FOLDER = {"ada": PASS_ACCEPT, "bo": "def entropy_bound_accept(entropy, bound)\n    return entropy\n"}
CLI_FAILURE = {"cli-pass": None, "cli-fail": "distinct values", "ada": None, "bo": "syntax-error"}


def expected_summary() -> dict:
    """The summary the plan above must give, computed here from the plan (not by the server's code)."""
    latest = {}
    for seat, plan in SIMULATED.items():
        for ex, fails in plan:
            latest[(seat, ex)] = fails[0] if fails else None
    for seat, failure in CLI_FAILURE.items():
        latest[(seat, "accept")] = failure
    out = {}
    for ex in catalog.EXERCISES:                                   # every exercise is on the board
        cells = [f for (s, e), f in latest.items() if e == ex]
        fails = sorted({f for f in cells if f}, key=lambda f: (-cells.count(f), f))
        out[ex] = {"passed": cells.count(None), "tried": len(cells),
                   "top_failure": {"check": fails[0], "count": cells.count(fails[0])} if fails else None}
    return {"seats": len({s for s, _ in latest}), "exercises": out}


def _simulated_seat(seat: str) -> None:
    from explainer.workshop.report import Check, verdict
    for ex, fails in SIMULATED[seat]:
        checks = [Check(name, False, "simulated") for name in fails] or [Check("all", True, "simulated")]
        catalog.report_verdict(verdict(ex, checks), seat=seat, wait=True)


def fill_room(board: Board, work: Path, with_cli: bool = True) -> None:
    """30 seats at once: 4 through ``workshop check`` (2 files, a folder of 2), 26 through the same hook."""
    env = {**os.environ, "EXPLAINER_ROOM": board.url}
    procs = []
    if with_cli:
        (work / "handins").mkdir()
        for name, src in FOLDER.items():
            (work / "handins" / f"{name}.py").write_text(src)
        for seat, src in CLI.items():
            (work / f"{seat}.py").write_text(src)
            procs.append(subprocess.Popen([sys.executable, "-m", "explainer", "workshop", "check", "accept",
                                           str(work / f"{seat}.py")], env={**env, "EXPLAINER_SEAT": seat},
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO))
        procs.append(subprocess.Popen([sys.executable, "-m", "explainer", "workshop", "check", "accept",
                                       str(work / "handins")], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, cwd=REPO))
    old = os.environ.get("EXPLAINER_ROOM")
    os.environ["EXPLAINER_ROOM"] = board.url
    try:
        threads = [threading.Thread(target=_simulated_seat, args=(seat,)) for seat in SIMULATED]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        if old is None:
            os.environ.pop("EXPLAINER_ROOM")
        else:
            os.environ["EXPLAINER_ROOM"] = old
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert b"room: report not sent" not in err, err.decode()
        assert p.returncode in (0, 1, 2), err.decode()
