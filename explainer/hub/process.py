"""A room hub run as its own process, the way an instructor runs it (the hub's tests and ``bench --only hub``):
``python -m explainer hub serve`` with folders and an account prefix of its own, its one line read, stopped with
Ctrl-C (SIGINT) and, at the end, ``hub remove --yes``. Every process it starts is found by that prefix and
that state folder, so one hub's clean-up never touches another's.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from explainer.hub import accounts

START_TIMEOUT = 180.0


class HubProcess:
    """``start()`` again after ``stop()`` restarts it on the same folders and port."""

    def __init__(self, prefix: str, account_prefix: str, extra: list[str] = (), pythonpath: str | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="explainer-hub-"))
        os.chmod(self.root, 0o711)                          # the learners traverse it to their homes
        self.state, self.homes = self.root / "state", self.root / "homes"
        self.account_prefix = accounts.check_prefix(account_prefix)
        self.args = ["--state", str(self.state), "--homes", str(self.homes), "--prefix", str(prefix),
                     "--account-prefix", account_prefix, *extra]
        self.pythonpath, self.proc, self.port = pythonpath, None, 0
        self.log = self.root / "serve.log"

    def command(self, *words: str) -> list[str]:
        return [sys.executable, "-m", "explainer", "hub", *words]

    def env(self) -> dict:
        return {**os.environ, **({"PYTHONPATH": self.pythonpath} if self.pythonpath else {})}

    def start(self) -> float:
        """Start and wait for the one line; returns the seconds it took."""
        t0 = time.monotonic()
        self.out = open(self.log, "a")
        self.proc = subprocess.Popen(self.command("serve", "--port", str(self.port), *self.args), env=self.env(),
                                     stdout=subprocess.PIPE, stderr=self.out, text=True, start_new_session=True)
        line = self.proc.stdout.readline()                 # printed once the hub answers (or nothing: it failed)
        if not line.startswith("hub: http://"):
            self.proc.wait(30)
            self.out.close()
            hub_log = self.state / "hub.log"
            raise RuntimeError(f"hub serve did not start: {self.log.read_text()[-1500:]}"
                               + (hub_log.read_text()[-2500:] if hub_log.exists() else ""))
        self.line = line.strip()
        self.url = line.split()[1]
        self.code = line.split("room code: ")[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1].strip("/"))
        return time.monotonic() - t0

    def secret(self, name: str) -> str:
        return (self.state / name).read_text().strip()

    def api(self, path: str, method: str = "GET", body=None, timeout: float = 60.0):
        """The hub's REST API (or a service's, for a path under ``/services/``) as its admin service."""
        url = self.url + (path.lstrip("/") if path.startswith("/services/") else f"hub/api/{path}")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"token {self.secret('admin-token')}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def stop(self) -> int | None:
        """Ctrl-C, as the instructor stops it; its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()
        finally:
            self.out.close()

    def accounts(self) -> list[str]:
        return [u.pw_name for u in pwd.getpwall() if u.pw_name.startswith(self.account_prefix)]

    def remove(self) -> subprocess.CompletedProcess:
        return subprocess.run(self.command("remove", "--yes", *self.args[:2]), env=self.env(), capture_output=True,
                              text=True, timeout=120)

    def close(self) -> None:
        """Every exit path: stopped, its accounts and homes removed, its folder gone."""
        try:
            self.stop()
        finally:
            try:
                self.remove()
            finally:
                accounts.remove_all(self.account_prefix, str(self.homes))
                shutil.rmtree(self.root, ignore_errors=True)
