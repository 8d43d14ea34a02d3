"""The learners: each name taken on the hub, the Unix account behind it, and the home that account starts with.

A learner's name follows the room board's seat rules (``room.board.intake.seat_name``: NFKC, spaces collapsed,
1..64 printable characters, one script) and may not look like a name already taken (``seat_names.looks``); a
``/`` is refused too (JupyterHub's rule). The first who signs in with a name keeps it: the registry keeps the
SHA-256 of a key the hub gave that browser (a cookie), and a later sign-in with the name needs it.

Every name gets a Unix account ``<account_prefix><NNN>`` (``exl-001``, ...; the instructor ``<prefix>000``): no
login shell (``/usr/sbin/nologin``), its own group, a home ``<homes>/<account>`` made 0700 and owned by it,
holding a copy of the notebooks and the exercises (``make hub``'s ``notebooks/``, never the solutions). The
registry (``learners.json`` in the hub's state folder, 0600) maps names to accounts, so a restarted hub finds
every learner's account and files again. ``remove_all`` (``hub remove``, and every test's teardown) ends the
accounts' processes and removes the accounts and their homes: everything whose name has the prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from explainer.hub.state import State, write_private
from explainer.room import seat_names
from explainer.room.board import intake

NOLOGIN = next((p for p in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(p)), "/bin/false")
MAX_PREFIX = 12


class NameRefused(Exception):
    """A name the hub does not take, with the reason (shown on the login form)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Learner:
    name: str
    account: str
    claim: str | None            # sha256 of the browser's key; None: made by the hub's API (the bench, the admin)


def clean_name(typed: str) -> str:
    """The name as the hub keeps it (the board's seat rules, and no ``/``), or ``NameRefused``."""
    try:
        name = intake.seat_name(typed)
    except intake.Refused as exc:
        raise NameRefused(400, str(exc).replace("seat:", "name:", 1)) from None
    if "/" in name or set(name) == {"."}:
        raise NameRefused(400, "name: '/' and names made only of dots are not accepted")
    return name


def check_prefix(prefix: str) -> str:
    ok = 2 <= len(prefix) <= MAX_PREFIX and prefix[0].isascii() and prefix[0].islower() and all(
        ch.isascii() and (ch.islower() or ch.isdigit() or ch == "-") for ch in prefix)
    if not ok:
        raise ValueError(f"account prefix {prefix!r}: expected 2..{MAX_PREFIX} of a-z, 0-9, '-', starting with a letter")
    return prefix


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Learners:
    """The registry in ``state/learners.json``; accounts made with useradd (the hub runs as root)."""

    def __init__(self, state: State, account_prefix: str, homes: str, notebooks: str, instructor: str):
        self.state, self.prefix = state, check_prefix(account_prefix)
        self.homes, self.notebooks, self.instructor = Path(homes), Path(notebooks), instructor
        self.file = state.file("learners.json")
        try:
            data = json.loads(self.file.read_text())
        except FileNotFoundError:
            data = {"next": 1, "learners": {}}
        self.next = int(data["next"])
        self.by_name = {n: Learner(n, v["account"], v.get("claim")) for n, v in data["learners"].items()}
        self.by_look = {form: n for n in self.by_name for form in seat_names.looks(n)}

    def save(self) -> None:
        data = {"next": self.next, "learners": {n: {"account": v.account, "claim": v.claim}
                                                 for n, v in self.by_name.items()}}
        write_private(self.file, json.dumps(data, indent=1, ensure_ascii=False) + "\n")

    def find(self, name: str) -> Learner | None:
        """The learner whose name looks like ``name`` (a shared form of ``seat_names.looks``), if any."""
        taken = next((self.by_look[f] for f in sorted(seat_names.looks(name)) if f in self.by_look), None)
        return self.by_name.get(taken) if taken else None

    def owns(self, learner: Learner, key: str | None) -> bool:
        return bool(key and learner.claim and hmac.compare_digest(sha(key), learner.claim))

    def add(self, name: str, key: str | None) -> Learner:
        """A new learner ``name`` (``clean_name`` first); ``key``: the browser's key that keeps the name."""
        if self.find(name):
            raise NameRefused(409, f"name: {name!r} looks like a name already taken; choose another")
        account = f"{self.prefix}000" if name == self.instructor else f"{self.prefix}{self.next:03d}"
        if name != self.instructor:
            self.next += 1
        learner = Learner(name, account, sha(key) if key else None)
        self.by_name[name] = learner
        self.by_look.update({form: name for form in seat_names.looks(name)})
        self.save()
        return learner

    def account(self, name: str) -> str:
        learner = self.by_name.get(name)
        if learner is None:
            raise KeyError(f"no learner named {name!r} on this hub")
        return learner.account

    def ensure_account(self, name: str) -> pwd.struct_passwd:
        """The learner's Unix account, made (with its home and notebooks) if it does not exist yet."""
        account = self.account(name)
        try:
            return pwd.getpwnam(account)
        except KeyError:
            pass
        home = self.homes / account
        self.homes.mkdir(mode=0o711, parents=True, exist_ok=True)
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", NOLOGIN, "--user-group",
                        "--comment", "explainer hub learner", account], check=True, capture_output=True)
        user = pwd.getpwnam(account)
        make_home(home, self.notebooks, user)
        return user


TRUST_STORE = ".local/share/jupyter/nbsignatures.db"     # in the home: the learner's own notebook signatures


def trust_store(home: str | Path) -> Path:
    """The learner's own signature store (JupyterLab writes to it whenever it opens a notebook, so the venv's,
    read-only for the learner, cannot serve): the spawner points the learner's server at it."""
    return Path(home) / TRUST_STORE


def make_home(home: Path, notebooks: Path, user: pwd.struct_passwd) -> None:
    """``home`` 0700, the learner's own, with a copy of ``notebooks`` (an existing home is kept as it is) and of
    the venv's signature store, which trusts them (``make hub`` signed the same files: the venv beside them)."""
    if not home.exists():
        home.mkdir(mode=0o700)
        if notebooks.is_dir():
            shutil.copytree(notebooks, home / "notebooks", symlinks=False)
        signed = notebooks.parent / "venv" / "share" / "jupyter" / "explainer-trust" / "nbsignatures.db"
        if signed.is_file():
            trust_store(home).parent.mkdir(parents=True)
            shutil.copyfile(signed, trust_store(home))
        for root, dirs, files in os.walk(home):
            for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                os.lchown(name, user.pw_uid, user.pw_gid)
    os.chown(home, user.pw_uid, user.pw_gid)
    os.chmod(home, 0o700)


def accounts_with(prefix: str) -> list[pwd.struct_passwd]:
    check_prefix(prefix)
    return sorted((u for u in pwd.getpwall() if u.pw_name.startswith(prefix)), key=lambda u: u.pw_name)


def processes_of(uids: set[int]) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid in uids:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def end_processes(uids: set[int], wait: float = 5.0) -> int:
    """SIGTERM then SIGKILL every process of these accounts; returns how many there were."""
    pids = processes_of(uids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_of(uids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while processes_of(uids) and time.monotonic() < deadline:
            time.sleep(0.1)
    return len(pids)


def remove_account(account: str, homes: str | None) -> None:
    """End the account's processes, remove it, its group and (when it lies in ``homes``) its home."""
    try:
        user = pwd.getpwnam(account)
    except KeyError:
        return
    end_processes({user.pw_uid})
    subprocess.run(["userdel", account], capture_output=True)
    home = Path(user.pw_dir)
    if homes and home.parent == Path(homes) and home.name == account:
        shutil.rmtree(home, ignore_errors=True)


def remove_all(prefix: str, homes: str | None = None) -> list[str]:
    """Every account named ``prefix*``: its processes ended, the account, its group and its home removed."""
    users = accounts_with(prefix)
    end_processes({u.pw_uid for u in users})
    for u in users:
        remove_account(u.pw_name, homes)
    return [u.pw_name for u in users]
