"""The room's state in one SQLite file: each seat's latest verdict per exercise, the room token, a report count.

One row per (seat, exercise) (an upsert: the latest report wins, ``attempts`` counts them), so the file is
bounded by ``MAX_SEATS`` x the exercises whatever the room posts. A restart reads the file back: the same
token (the learners' ``EXPLAINER_ROOM`` stays valid) and the same board. WAL journal, ``synchronous=NORMAL``:
a commit per report without an fsync per report (a power cut may lose the last reports, never the file); the
WAL is checkpointed every ~800 KiB and cut back to 1 MiB, so the files stay under ~1.5 MiB for a full room.
The rows are also held in memory (at most ``MAX_SEATS`` x exercises small tuples) so the summary costs no query.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections import Counter
from dataclasses import dataclass

MAX_SEATS = 500           # a room; beyond it a new seat's report is refused (409), known seats still post

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
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


class RoomFull(Exception):
    """A new seat beyond ``MAX_SEATS``."""


class Store:
    def __init__(self, path: str, exercises: list[str]):
        self.exercises = list(exercises)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA wal_autocheckpoint=200")          # pages (~800 KiB) between checkpoints
        self.db.execute(f"PRAGMA journal_size_limit={1 << 20}")   # the WAL file cut back to 1 MiB after one
        self.db.executescript(SCHEMA)
        self.token = self._meta("token") or self._set_meta("token", secrets.token_urlsafe(16))
        self.seq = int(self._meta("reports") or 0)
        self.cells: dict[tuple[str, str], Cell] = {}
        for seat, ex, passed, failure, t, received, attempts in self.db.execute(
                "SELECT seat, exercise, passed, failure, time, received, attempts FROM latest"):
            self.cells[(seat, ex)] = Cell(bool(passed), failure, t, received, attempts)
        self.seats = {seat for seat, _ in self.cells}

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> str:
        self.db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, value))
        return value

    def add(self, report: dict, received: float) -> int:
        """Store one validated report; returns its sequence number (1, 2, ...). Raises RoomFull."""
        seat, ex = report["seat"], report["exercise"]
        if seat not in self.seats and len(self.seats) >= MAX_SEATS:
            raise RoomFull(f"the room holds {MAX_SEATS} seats already")
        old = self.cells.get((seat, ex))
        cell = Cell(report["passed"], report["failure"], report["time"], received, (old.attempts if old else 0) + 1)
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
        self.cells[(seat, ex)] = cell
        self.seats.add(seat)
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
        """What the page draws: the summary, the report count and one row per seat (latest report first)."""
        rows = {}
        for (seat, ex), c in self.cells.items():
            row = rows.setdefault(seat, {"seat": seat, "last": 0.0, "cells": {}})
            row["cells"][ex] = {"passed": c.passed, "failure": c.failure, "attempts": c.attempts}
            row["last"] = max(row["last"], c.received)
        return {"seq": self.seq, "summary": self.summary(),
                "seats": sorted(rows.values(), key=lambda r: r["seat"].lower())}

    def close(self) -> None:
        self.db.close()
