"""``hub serve``: start the room's JupyterHub, say where it is and the room code, stop it with nothing left running.

The hub runs as its own process (``jupyterhub -f STATE/jupyterhub_config.py`` from ``make hub``'s venv, in a
session of its own, its log in ``STATE/hub.log``); it starts the proxy, the board and the idle culler, and the
learners' servers as they sign in. ``serve`` waits until the hub's REST API answers through the proxy and the
board answers, then calls ``on_ready(url, room_code)`` and waits. On Ctrl-C (or SIGTERM) the hub is asked to
stop (SIGTERM: it stops the servers, the services and the proxy), then whatever still runs of it is ended: every
process that carries this hub's ``EXPLAINER_HUB_STATE`` and every process of the learners' accounts; the
learners' control groups are removed. Kept: the state folder (room code, names, the hub's and the board's
databases) and the learners' accounts and homes: a restart on the same folder is the same room.
``hub remove`` (``remove``) ends all that at the end of a workshop.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from explainer.hub import accounts
from explainer.hub.limits import Limits, group_for
from explainer.hub.state import Settings, State, write_private

START_TIMEOUT = 90.0          # seconds for the hub, its proxy and the board to answer
STOP_TIMEOUT = 30.0
CONFIG = "from explainer.hub.config import configure\n\nconfigure(c)  # noqa: F821 - JupyterHub's config object\n"


class HubError(Exception):
    """Why the hub could not start, in one line."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def preflight(settings: Settings) -> None:
    if os.geteuid() != 0:
        raise HubError("the hub makes a Unix account per learner and runs their servers as them: run it as root "
                       "(sudo), after `sudo make hub`")
    hub = settings.venv / "bin" / "jupyterhub"
    proxy = Path(settings.prefix) / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
    for path in (hub, proxy, Path(settings.prefix) / "notebooks"):
        if not path.exists():
            raise HubError(f"{path} is missing: set the hub up first with `sudo make hub` "
                           f"(HUB_PREFIX={settings.prefix})")


def api(settings: Settings, token: str, path: str, method: str = "GET", body: dict | None = None,
        timeout: float = 10.0):
    """The hub's REST API through the proxy, as the ``explainer-admin`` service; returns (status, JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{settings.port}/hub/api/{path}", data=data, method=method,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True                       # it answered (the board says 401 without a sign-in)
    except OSError:
        return False


def wait_ready(proc: subprocess.Popen, settings: Settings, token: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-12:]
            raise HubError(f"the hub stopped at start-up (exit {proc.returncode}); the end of {log}:\n  "
                           + "\n  ".join(tail))
        try:
            ok = api(settings, token, "", timeout=2)[0] == 200
        except OSError:
            ok = False
        if ok and _answers(f"http://127.0.0.1:{settings.board_port}/services/board/api/summary"):
            return
        time.sleep(0.3)
    raise HubError(f"the hub did not answer within {START_TIMEOUT:.0f} s (see {log})")


def hub_processes(state: State) -> list[int]:
    """Processes started by this hub: they carry its EXPLAINER_HUB_STATE (the hub, its proxy, its services)."""
    mark = f"EXPLAINER_HUB_STATE={state.path}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in env:
                out.append(int(entry))
    return out


def stop(proc: subprocess.Popen | None, state: State, settings: Settings) -> int:
    """Stop the hub and everything it started; returns how many processes had to be ended by force."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    forced = 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = hub_processes(state)
        forced = max(forced, len(left))
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while hub_processes(state) and time.monotonic() < deadline:
            time.sleep(0.1)
    learners = {u.pw_uid for u in accounts.accounts_with(settings.account_prefix)}
    forced += accounts.end_processes(learners)
    Limits(settings.memory, settings.processes, group_for(settings.account_prefix)).remove()
    return forced


def serve(state_dir: str, settings: Settings, on_ready) -> None:
    """Start the hub, ``on_ready(url, room_code, limits)``, serve until KeyboardInterrupt, stop it all."""
    preflight(settings)
    state = State(state_dir)
    for name in ("hub_port", "proxy_api_port", "board_port"):
        setattr(settings, name, getattr(settings, name) or free_port())
    settings.port = settings.port or free_port()
    state.save_settings(settings)
    write_private(state.file("jupyterhub_config.py"), CONFIG)
    code, token = state.room_code(), state.admin_token()
    state.instructor_code()
    log = state.file("hub.log")
    env = {"EXPLAINER_HUB_STATE": str(state.path), "PATH": f"{settings.venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": os.environ.get("LANG", "C.UTF-8"), "HOME": "/root"}
    proc = None
    try:
        with open(log, "a") as out:
            os.fchmod(out.fileno(), 0o600)
            proc = subprocess.Popen([str(settings.venv / "bin" / "jupyterhub"), "-f",
                                     str(state.file("jupyterhub_config.py"))], cwd=state.path, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        wait_ready(proc, settings, token, log)
        limits = next((line.split("limits per learner: ", 1)[1] for line in log.read_text().splitlines()[::-1]
                       if "limits per learner: " in line), "?")
        on_ready(code, limits)
        while proc.poll() is None:
            time.sleep(0.5)
        raise HubError(f"the hub stopped by itself (exit {proc.returncode}); see {log}")
    finally:
        stop(proc, state, settings)
