"""A learner's side of the hub, driven from a program (the hub's tests and ``bench --only hub``): sign in on the
login form, start the server, and run code in a kernel of that server as a notebook does.

``Session(base_url)`` keeps cookies like a browser: ``sign_in(name, code)`` posts the login form (with its
``_xsrf``), ``start_server()`` follows the hub's spawn and the server's OAuth redirects until JupyterLab answers.
``Session.with_token(base_url, name, token)`` skips both: every request carries an API token instead (what the
bench gets from the hub's REST API). ``Kernel(session)`` starts a kernel (``POST /user/NAME/api/kernels``) and
``run(code)`` sends an ``execute_request`` on its websocket (Jupyter's messaging protocol) and returns what the
cell printed, its error (ename, evalue) and the seconds it took; ``close()`` shuts the kernel down.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

XSRF = re.compile(r'name="_xsrf" value="([^"]+)"')


class SignInRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def login_error(html: str) -> str:
    found = re.search(r'class="login_error">(.*?)</p>', html, re.S)
    return re.sub(r"\s+", " ", found.group(1)).strip() if found else html[:200]


class Session:
    def __init__(self, base_url: str):
        self.base = base_url.rstrip("/") + "/"
        self.jar = http.cookiejar.CookieJar()
        handlers = [urllib.request.HTTPCookieProcessor(self.jar)]
        self.follow = urllib.request.build_opener(*handlers)
        self.stay = urllib.request.build_opener(*handlers, _NoRedirect)
        self.headers: dict[str, str] = {}
        self.name: str | None = None

    @classmethod
    def with_token(cls, base_url: str, name: str, token: str) -> Session:
        s = cls(base_url)
        s.name, s.headers = name, {"Authorization": f"token {token}"}
        return s

    def sign_in(self, name: str, code: str, timeout: float = 30.0) -> str:
        """Post the login form; returns where the hub sends the browser next, or ``SignInRefused``."""
        page = self.follow.open(self.base + "hub/login", timeout=timeout).read().decode()
        form = {"_xsrf": XSRF.search(page).group(1), "username": name, "password": code}
        try:
            answer = self.stay.open(self.base + "hub/login", urllib.parse.urlencode(form).encode(), timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code in (301, 302, 303):
                with self.follow.open(self.base + "hub/api/user", timeout=timeout) as resp:
                    self.name = json.loads(resp.read())["name"]      # the name as the hub keeps it
                return exc.headers.get("Location", "")
            raise SignInRefused(exc.code, login_error(exc.read().decode(errors="replace"))) from None
        raise SignInRefused(answer.status, "the hub answered the sign-in without a redirect")

    def url(self, path: str) -> str:
        return f"{self.base}user/{urllib.parse.quote(self.name, safe='')}/{path}"

    def start_server(self, timeout: float = 120.0) -> float:
        """Ask the hub for this learner's server and follow the redirects until JupyterLab answers; seconds."""
        t0 = time.monotonic()
        self.follow.open(self.base + "hub/spawn", timeout=timeout).read()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            try:
                with self.follow.open(self.url("api/status"), timeout=10) as resp:
                    if resp.status == 200:
                        return time.monotonic() - t0
            except urllib.error.HTTPError as exc:
                if exc.code == 403 and not self.headers:      # up: a browser's first visit signs in (OAuth)
                    self.follow.open(self.url("lab"), timeout=timeout).read()
                    continue
                if exc.code not in (404, 424, 502, 503):
                    raise
            time.sleep(0.5)
        raise TimeoutError(f"the server of {self.name!r} did not answer within {timeout:.0f} s")

    def xsrf(self) -> dict:
        token = next((c.value for c in self.jar if c.name == "_xsrf" and "/user/" in c.path), None)
        return {"X-XSRFToken": token} if token else {}

    def request(self, path: str, method: str = "GET", body: dict | None = None, timeout: float = 30.0):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **self.headers, **({} if self.headers else self.xsrf())}
        req = urllib.request.Request(self.url(path), data=data, method=method, headers=headers)
        with self.follow.open(req, timeout=timeout) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None

    def cookie_header(self) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.jar)


class Kernel:
    """One kernel of the learner's server, driven over its websocket as JupyterLab drives it."""

    def __init__(self, session: Session, timeout: float = 120.0):
        self.session, self.timeout = session, timeout
        self.id = session.request("api/kernels", "POST", {"name": "python3"})["id"]
        self.ws_url = session.url(f"api/kernels/{self.id}/channels").replace("http://", "ws://", 1)

    def run(self, code: str, timeout: float | None = None) -> dict:
        """Execute ``code``; returns {"stdout", "error": (ename, evalue) | None, "seconds"}."""
        return asyncio.run(self._run(code, timeout or self.timeout))

    async def _run(self, code: str, timeout: float) -> dict:
        headers = dict(self.session.headers)
        if not headers:
            headers["Cookie"] = self.session.cookie_header()
        ws = await websocket_connect(HTTPRequest(self.ws_url, headers=headers), max_message_size=64 << 20)
        msg_id = uuid.uuid4().hex
        msg = {"header": {"msg_id": msg_id, "username": "learner", "session": uuid.uuid4().hex, "msg_type":
                          "execute_request", "version": "5.3", "date": ""}, "parent_header": {}, "metadata": {},
               "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                           "allow_stdin": False, "stop_on_error": True}, "channel": "shell", "buffers": []}
        t0 = time.monotonic()
        ws.write_message(json.dumps(msg))
        out, error = [], None
        try:
            while True:
                raw = await asyncio.wait_for(ws.read_message(), timeout - (time.monotonic() - t0))
                if raw is None:
                    raise ConnectionError("the kernel's websocket closed")
                if isinstance(raw, bytes):
                    continue
                reply = json.loads(raw)
                kind, content = reply["header"]["msg_type"], reply["content"]
                if kind == "status" and content.get("execution_state") in ("restarting", "dead"):
                    error = ("KernelDied", f"the kernel is {content['execution_state']} (killed: out of memory?)")
                    break
                if reply.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                if kind == "stream":
                    out.append(content["text"])
                elif kind == "error":
                    error = (content["ename"], content["evalue"])
                elif kind == "status" and content["execution_state"] == "idle":
                    break
        finally:
            ws.close()
        return {"stdout": "".join(out), "error": error, "seconds": time.monotonic() - t0}

    def close(self) -> None:
        try:
            self.session.request(f"api/kernels/{self.id}", "DELETE")
        except (OSError, urllib.error.HTTPError):
            pass
