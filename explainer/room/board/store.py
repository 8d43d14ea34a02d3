"""The room's state in one SQLite file: the seats and their keys, each seat's latest verdict per exercise, the
room token, the instructor's key, a report count.

One row per seat (its name, what the name looks like, the hash of its seat key, the client that claimed it)
and one per (seat, exercise) (an upsert: the newest report by its own time wins, ``attempts`` counts them all),
so the file is bounded by ``MAX_SEATS`` x the exercises whatever the room posts. A seat belongs to whoever
claimed it first: the board gives that client a key (only its SHA-256 is kept) and refuses later reports for
the seat without it; a name that looks like a taken one (``seat_names.looks``) is refused; every client (an
address, the board's own machine too) claims at most ``seats_per_client`` seats. Only the instructor's folder
grading is not counted: it proves itself with the instructor's key (``instructor``), which ``room serve`` keeps
in the instructor's own settings file, never on a learner's screen.

The file is created 0600 (it holds the room token) and locked for as long as the board serves
(``fcntl.flock``): a second server on the same file refuses to start. A restart reads the file back: the same
token (the learners' joined rooms stay valid), the same seats and board. WAL journal, ``synchronous=NORMAL``:
a commit per report without an fsync per report (a power cut may lose the last reports, never the file); the WAL
is checkpointed every ~800 KiB and cut back to 1 MiB. The rows are also held in memory so a summary costs no query.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import secrets
import sqlite3
from collections import Counter
from dataclasses import dataclass

from explainer.room.board.intake import Refused
from explainer.room.seat_names import looks

MAX_SEATS = 500           # a room; beyond it a new seat is refused (409), known seats still post
HUB_KEY = "hub"            # a hub seat's key column: no SHA-256 equals it, so no seat key opens a hub seat
SEATS_PER_CLIENT = 3      # new seats one client (address) may claim, the board's own machine too

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS seats (
    seat TEXT PRIMARY KEY, skeleton TEXT NOT NULL UNIQUE, key_sha256 TEXT NOT NULL, client TEXT NOT NULL,
    joined REAL NOT NULL);
CREATE TABLE IF NOT EXISTS latest (
    seat TEXT NOT NULL, exercise TEXT NOT NULL, passed INTEGER NOT NULL, failure TEXT,
    time REAL NOT NULL, received REAL NOT NULL, attempts INTEGER NOT NULL,
    PRIMARY KEY (seat, exercise));
"""


@dataclass
class Cell:
    passed: bool
    failure: str | None
    time: float
    received: float
    attempts: int


class RoomFull(Refused):
    """A new seat beyond ``MAX_SEATS``."""

    def __init__(self):
        super().__init__(409, f"the room holds {MAX_SEATS} seats already")


class InUse(Exception):
    """Another board serves this file."""


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _skeleton_row(seat: str) -> str:
    """The ``skeleton`` column: what the name looks like, made unique by the name (the column predates
    ``seat_names.looks``; the forms are computed from the names when the file is read)."""
    return f"{min(looks(seat))}\0{seat}"


def _private_file(path: str) -> int:
    """Open (create) ``path`` 0600 and lock it for this process; ``InUse`` if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InUse(f"another room board already serves {path}; stop it (Ctrl-C) or give another --db") from None
    os.fchmod(fd, 0o600)                                  # a file made by an older version, or another umask
    return fd


class Store:
    def __init__(self, path: str, exercises: list[str], seats_per_client: int = SEATS_PER_CLIENT):
        self.exercises, self.seats_per_client = list(exercises), seats_per_client
        self.lock = _private_file(path)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA wal_autocheckpoint=200")          # pages (~800 KiB) between checkpoints
        self.db.execute(f"PRAGMA journal_size_limit={1 << 20}")   # the WAL file cut back to 1 MiB after one
        self.db.executescript(SCHEMA)
        self.token = self._meta("token") or self._set_meta("token", secrets.token_urlsafe(16))
        self.instructor = self._meta("instructor") or self._set_meta("instructor", secrets.token_urlsafe(24))
        self.seq = int(self._meta("reports") or 0)
        self.cells: dict[tuple[str, str], Cell] = {}
        for seat, ex, passed, failure, t, received, attempts in self.db.execute(
                "SELECT seat, exercise, passed, failure, time, received, attempts FROM latest"):
            self.cells[(seat, ex)] = Cell(bool(passed), failure, t, received, attempts)
        for seat in {seat for seat, _ in self.cells}:        # a file of an older board: its seats, unclaimed
            self.db.execute("INSERT OR IGNORE INTO seats VALUES (?, ?, '', '', 0)", (seat, _skeleton_row(seat)))
        self.seats = {seat: (skel, key, client) for seat, skel, key, client in self.db.execute(
            "SELECT seat, skeleton, key_sha256, client FROM seats")}
        self.version = self.seq                           # changes with every report and every new seat (pushes)
        self.looks = {form: seat for seat in sorted(self.seats, reverse=True) for form in looks(seat)}
        self.claimed_by = Counter(client for _, _, client in self.seats.values())

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> str:
        self.db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, value))
        return value

    def claim(self, seat: str, key: str | None, client: str, now: float, counted: bool = True) -> str | None:
        """The seat for this client: a new key when it claims the seat now, None when its key matches.
        ``Refused``: 403 someone else's seat, 409 a look-alike name or a full room, 429 too many new seats.
        ``counted=False``: the instructor's folder grading (proved by the instructor's key), not capped."""
        if seat in self.seats and self.seats[seat][1]:
            if not (key and hmac.compare_digest(_sha(key), self.seats[seat][1])):
                raise Refused(403, f"seat {seat!r} belongs to another learner (the seat key is missing or wrong); "
                                   f"join with another name")
            return None
        if seat in self.seats:                            # a seat an older board kept, without a key: claim it
            new = secrets.token_urlsafe(24)
            self.db.execute("UPDATE seats SET key_sha256 = ?, client = ? WHERE seat = ?", (_sha(new), client, seat))
            self.seats[seat] = (self.seats[seat][0], _sha(new), client)
            return new
        skel = self._check_new(seat)
        if counted and self.claimed_by[client] >= self.seats_per_client:
            raise Refused(429, f"this client has claimed {self.seats_per_client} seats already; one per learner")
        new = secrets.token_urlsafe(24)
        self._insert(seat, skel, _sha(new), client, now)
        self.claimed_by[client] += counted
        return new

    def hub_seat(self, seat: str, now: float) -> None:
        """A hub's board: the seat of the learner the hub vouched for (no key: the hub's token is the proof),
        made on its first report. ``Refused`` 409 for a look-alike of another seat, or a full room."""
        if seat not in self.seats:
            self._insert(seat, self._check_new(seat), HUB_KEY, "hub", now)

    def _check_new(self, seat: str) -> str:
        """A new seat's ``skeleton`` column; ``Refused`` 409 when it looks like a seat's (``seat_names.looks``),
        ``RoomFull`` when the room is full."""
        taken = next((self.looks[form] for form in sorted(looks(seat)) if form in self.looks), None)
        if taken is not None:
            raise Refused(409, f"seat {seat!r} looks like the seat {taken!r}; choose another name")
        if len(self.seats) >= MAX_SEATS:
            raise RoomFull()
        return _skeleton_row(seat)

    def _insert(self, seat: str, skel: str, key_sha: str, client: str, now: float) -> None:
        self.db.execute("INSERT INTO seats VALUES (?, ?, ?, ?, ?)", (seat, skel, key_sha, client, now))
        self.seats[seat] = (skel, key_sha, client)
        self.looks.update({form: seat for form in looks(seat)})
        self.version += 1                                 # the board shows the new seat

    def add(self, report: dict, received: float) -> int:
        """Store one validated report of a claimed seat; returns its sequence number (1, 2, ...). The verdict
        shown is the newest by the report's own time (a check's report that arrives late does not replace a
        newer one); ``attempts`` counts every report."""
        seat, ex = report["seat"], report["exercise"]
        old = self.cells.get((seat, ex))
        attempts = (old.attempts if old else 0) + 1
        if old is not None and report["time"] < old.time:
            cell = Cell(old.passed, old.failure, old.time, old.received, attempts)
        else:
            cell = Cell(report["passed"], report["failure"], report["time"], received, attempts)
        self.db.execute("BEGIN")
        try:
            self.db.execute(
                "INSERT INTO latest VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(seat, exercise) DO UPDATE SET "
                "passed = excluded.passed, failure = excluded.failure, time = excluded.time, "
                "received = excluded.received, attempts = excluded.attempts",
                (seat, ex, int(cell.passed), cell.failure, cell.time, cell.received, cell.attempts))
            self._set_meta("reports", str(self.seq + 1))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.seq += 1
        self.version += 1
        self.cells[(seat, ex)] = cell
        return self.seq

    def summary(self) -> dict:
        """``{"seats": N, "exercises": {ID: {"passed", "tried", "top_failure": {"check", "count"} | None}}}``."""
        out = {}
        for ex in self.exercises:
            mine = [c for (_, e), c in self.cells.items() if e == ex]
            failures = Counter(c.failure or "?" for c in mine if not c.passed)
            top = min(failures.items(), key=lambda kv: (-kv[1], kv[0]), default=None)
            out[ex] = {"passed": sum(c.passed for c in mine), "tried": len(mine),
                       "top_failure": {"check": top[0], "count": top[1]} if top else None}
        return {"seats": len(self.seats), "exercises": out}

    def board(self) -> dict:
        """What the page draws: the summary, the report count and one row per seat (joined seats too)."""
        rows = {seat: {"seat": seat, "last": 0.0, "cells": {}} for seat in self.seats}
        for (seat, ex), c in self.cells.items():
            row = rows.setdefault(seat, {"seat": seat, "last": 0.0, "cells": {}})
            row["cells"][ex] = {"passed": c.passed, "failure": c.failure, "attempts": c.attempts}
            row["last"] = max(row["last"], c.received)
        return {"seq": self.seq, "version": self.version, "summary": self.summary(),
                "seats": sorted(rows.values(), key=lambda r: r["seat"].lower())}

    def close(self) -> None:
        self.db.close()
        os.close(self.lock)
