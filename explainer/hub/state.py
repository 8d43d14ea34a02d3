"""The hub's own folder: what a restart keeps, readable by root only.

``STATE`` (default ``/var/lib/explainer-hub``, 0700) holds the room code and the instructor's code, the settings
``hub serve`` started with (``settings.json``, read by JupyterHub's config), the learners' names and accounts
(``learners.json``), JupyterHub's database and cookie secret, the room board's database, the token of the hub's
own admin service (``hub serve`` and the bench use it) and the hub's log. A hub restarted on the same folder
keeps the room code, every learner's name and account (their homes are elsewhere, see ``accounts``) and the
board's history.

A room code is 8 letters and digits from an alphabet without look-alikes (no 0/O, 1/I/L, 5/S, U/V), shown as
``ABCD-EFGH``; typed in any case, with or without the dash or spaces.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_STATE = "/var/lib/explainer-hub"
DEFAULT_PREFIX = "/opt/explainer-hub"          # make hub's HUB_PREFIX: venv/, proxy/, notebooks/
DEFAULT_HOMES = "/home/explainer-hub"
CODE_ALPHABET = "ABCDEFGHJKMNPQRTWXYZ2346789"
INSTRUCTOR = "instructor"


@dataclass
class Settings:
    """How ``hub serve`` started the hub (``settings.json``); the config JupyterHub loads reads it back."""
    prefix: str = DEFAULT_PREFIX                # the venv, the proxy and the notebooks (make hub)
    homes: str = DEFAULT_HOMES                  # the learners' homes (0711: nobody lists it)
    account_prefix: str = "exl-"                # every learner's Unix account starts with it
    listen: str = "127.0.0.1"
    port: int = 8000
    hub_port: int = 0                           # the hub's own API (loopback), and the proxy's API
    proxy_api_port: int = 0
    board_port: int = 0
    memory: int = 2 << 30                       # bytes per learner (cgroup), or per process (RLIMIT_AS)
    processes: int = 256                        # per learner: RLIMIT_NPROC counts the account's threads
    cull_after: int = 3600                      # seconds idle before the culler stops a server
    max_learners: int = 60
    names_per_address: int = 3                  # new names one client address may take (this machine: any)
    instructor: str = INSTRUCTOR
    extra: dict = field(default_factory=dict)

    @property
    def venv(self) -> Path:
        return Path(self.prefix) / "venv"


class State:
    """The folder ``path`` (made 0700 if missing)."""

    def __init__(self, path: str | os.PathLike = DEFAULT_STATE):
        self.path = Path(path)
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)

    def file(self, name: str) -> Path:
        return self.path / name

    def secret(self, name: str, make) -> str:
        """The secret kept in ``name`` (0600), made by ``make()`` the first time."""
        path = self.file(name)
        try:
            value = path.read_text().strip()
            if value:
                return value
        except FileNotFoundError:
            pass
        value = make()
        write_private(path, value + "\n")
        return value

    def room_code(self) -> str:
        return self.secret("room-code", new_code)

    def instructor_code(self) -> str:
        return self.secret("instructor-code", new_code)

    def admin_token(self) -> str:
        return self.secret("admin-token", lambda: secrets.token_hex(32))

    def save_settings(self, settings: Settings) -> None:
        write_private(self.file("settings.json"), json.dumps(asdict(settings), indent=1) + "\n")

    def settings(self) -> Settings:
        return Settings(**json.loads(self.file("settings.json").read_text()))


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole, 0600 (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def new_code() -> str:
    code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
    return f"{code[:4]}-{code[4:]}"


def same_code(typed: str, code: str) -> bool:
    """``typed`` is ``code``, in any case, with or without the dash and spaces (compared in constant time)."""
    clean = "".join(str(typed).split()).replace("-", "").upper()
    return hmac.compare_digest(clean.encode(), code.replace("-", "").encode())
