"""The hub's failure drills, run for real once (docs/instructor-guide.md, "When the hub fails"), as root after
`make hub`: one hub on loopback with two learners (1 GiB each, a room of at most 2), then, in order:

1. a learner's server out of memory: one kernel allocates 3 GiB; the other learner's kernel goes on;
2. the machine full (the room at --max-learners): a third name is refused with the hub's message;
3. the proxy killed (kill -9): how long until the hub's address and a learner's server answer again;
4. the hub restarted (Ctrl-C, hub serve again): how long it took, what a learner keeps (files, name, the board's
   verdicts) and loses (the kernel's variables).

Prints one line per observation; everything it made (accounts, homes, folders, processes) is removed at the end.
Usage: sudo PYTHONPATH=. .venv/bin/python scripts/hub_drills.py
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request

from explainer.hub.learner_session import Kernel, Session, SignInRefused
from explainer.hub.limits import Limits, group_for
from explainer.hub.process import HubProcess
from explainer.workshop import catalog

PREFIX = os.environ.get("EXPLAINER_HUB_PREFIX", "/opt/explainer-hub")
CHECK = "from explainer.workshop import check\nprint(check('accept', entropy_bound_accept).passed)"


def say(what: str, t0: float) -> None:
    print(f"[{time.monotonic() - t0:6.1f} s] {what}", flush=True)


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def until(what, timeout: float = 180.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if what():
            return time.monotonic() - t0
        time.sleep(0.25)
    raise TimeoutError("not within %.0f s" % timeout)


def main() -> None:
    t0 = time.monotonic()
    hub = HubProcess(PREFIX, f"xd{os.getpid() % 100000}-", pythonpath=os.getcwd(),
                     extra=["--memory", "1", "--processes", "256", "--max-learners", "2"])
    try:
        say(f"hub started in {hub.start():.1f} s: {hub.line}", t0)
        ada, bo = Session(hub.url), Session(hub.url)
        ada.sign_in("Ada", hub.code)
        bo.sign_in("Bo", hub.code)
        say(f"Ada's server ready in {ada.start_server(240):.1f} s, Bo's in {bo.start_server(240):.1f} s", t0)
        ka, kb = Kernel(ada), Kernel(bo)
        ka.run("open('kept.txt', 'w').write('written before the drills')")
        answer = catalog.load_all()["accept"].EXAMPLES["solution"].source      # a cell, as a learner types it
        ka.run(answer)
        kb.run(answer)
        say(f"Ada's check passed: {ka.run(CHECK, 300)['stdout'].strip()}; Bo's: {kb.run(CHECK, 300)['stdout'].strip()}",
            t0)

        # 1. out of memory
        out = ka.run("x = bytearray(3 << 30)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')", 120)
        limits = Limits(1 << 30, 256, group_for(hub.account_prefix))
        acct = next(a for a in hub.accounts() if a.endswith("001"))
        v2, v1 = limits.bases.get(""), limits.bases.get("memory")
        oom = ((v2 / acct / "memory.events").read_text().split() if v2 else
               (v1 / acct / "memory.oom_control").read_text().split() if v1 else [])
        say(f"1. Ada's kernel allocating 3 GiB: {out['error'] or out['stdout'].strip()} after {out['seconds']:.1f} s; "
            f"its memory group says: {' '.join(oom)}", t0)
        say(f"   Bo's kernel meanwhile: {kb.run('print(6 * 7)')['stdout'].strip()}", t0)
        restarted = until(lambda: ada.request(f"api/kernels/{ka.id}")["execution_state"] in ("idle", "starting"), 60)
        two, gone = ka.run("print(1 + 1)")["stdout"].strip(), ka.run("print('x' not in dir())")["stdout"].strip()
        say(f"   Ada's kernel back (the server's restarter) {restarted:.1f} s later: 1 + 1 = {two}; "
            f"its variables gone: {gone}", t0)

        # 2. the machine full: the room at --max-learners
        try:
            Session(hub.url).sign_in("Cleo", hub.code)
            say("2. a third name: signed in (unexpected)", t0)
        except SignInRefused as exc:
            say(f"2. a third name, room of 2: refused {exc.status}: {exc.message}", t0)

        # 3. the proxy killed
        pid = int((hub.state / "proxy.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        down = not answers(hub.url + "hub/api/")
        back = until(lambda: answers(hub.url + "hub/api/"), 120)
        srv = until(lambda: _status(ada) == 200, 120)
        new = int((hub.state / "proxy.pid").read_text())
        say(f"3. proxy (pid {pid}) killed: address down at once: {down}; the hub started a new proxy (pid {new}): "
            f"the address answered {back:.1f} s later, Ada's server {time.monotonic() - t_kill:.1f} s after the kill "
            f"(waited {srv:.1f} s more)", t0)
        say(f"   Ada's kernel after it: {ka.run('print(2 + 2)')['stdout'].strip()}", t0)

        # 4. the hub restarted
        t = time.monotonic()
        code = hub.stop()
        stopped = time.monotonic() - t
        say(f"4. hub stopped with Ctrl-C in {stopped:.1f} s (exit {code}); starting it again", t0)
        say(f"   hub answered again in {hub.start():.1f} s, same room code: {hub.line.endswith(hub.code)}", t0)
        again = ada                                            # Ada's browser, its cookies
        try:
            with again.follow.open(hub.url + "hub/api/user", timeout=30) as resp:
                say(f"   Ada's browser is still signed in as {json.loads(resp.read())['name']!r}", t0)
        except urllib.error.HTTPError as exc:
            say(f"   Ada's browser signed out ({exc.code}): signs in again", t0)
            again.sign_in("Ada", hub.code)
        say(f"   Ada's server started again in {again.start_server(240):.1f} s", t0)
        k2 = Kernel(again)
        kept = k2.run("print(open('kept.txt').read())")["stdout"].strip()
        say(f"   Ada's file: {kept!r}", t0)
        status, board = hub.api("/services/board/api/board")
        seats = {r["seat"]: r["cells"].get("accept", {}) for r in board["seats"]} if status == 200 else {}
        say(f"   the board after the restart: {json.dumps(seats)}", t0)
    finally:
        hub.close()
        say(f"removed; accounts left: {hub.accounts()}", t0)


def _status(session: Session) -> int:
    try:
        session.request("api/status")
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


if __name__ == "__main__":
    main()
