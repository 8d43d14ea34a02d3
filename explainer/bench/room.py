"""The room board under load: reports per second held, and how long until a board sees a report.

The real command (``python -m explainer room serve --port 0``, its own process, the product's limits) on
loopback; ``WORKERS`` threads post through the learners' own client function (``room.client.post``: one
connection per report, as a learner's check sends it) for ``SECONDS``, round-robin over ``SEATS`` seats (a
big room: each seat stays within its rate limit). A reader on ``/api/events`` (the stream the board page
reads) stamps when each report's sequence number first appears. Figures: accepted reports per second, the
p95 of (event seen - post sent), the server's peak resident memory and the database file's size.
Goal: at least 100 reports per second held and p95 under 1 s (a room of 30 posts a few per second).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from explainer.bench import Row
from explainer.room import client

SEATS, WORKERS = 300, 6
GOAL_RPS, GOAL_P95 = 100.0, 1.0


def _start(db: Path):
    proc = subprocess.Popen([sys.executable, "-m", "explainer", "room", "serve", "--port", "0", "--db", str(db),
                             "--seats-per-client", str(SEATS)],        # one machine plays the whole room
                            env={**os.environ, "XDG_CONFIG_HOME": str(db.parent / "config")},   # not the user's
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()                       # "room board: URL" (the server prints it when bound)
    if not line.startswith("room board: "):
        proc.kill()
        raise RuntimeError(f"the room server did not start: {line!r}")
    return proc, line.split(": ", 1)[1].strip()


def _events(url: str, seen: dict, stop: threading.Event) -> None:
    base, _, token = url.partition("/?token=")
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", f"/api/events?token={token}")
    resp = conn.getresponse()
    while not stop.is_set():
        line = resp.fp.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            seen.setdefault(json.loads(line[6:])["seq"], time.perf_counter())     # first seen (a new seat pushes too)
    conn.close()


def _worker(url: str, k: int, until: float, sent: list, refused: list, limited: list) -> None:
    post_url, keys = client.report_url(url), {}           # worker k posts for the seats = k (mod WORKERS)
    i = k
    while time.perf_counter() < until:
        seat = f"s{i % SEATS}"
        body = client.payload("accept", i % 3 == 0, None if i % 3 == 0 else "distinct values", seat=seat,
                              key=keys.get(seat))
        t0 = time.perf_counter()
        out = client.post(post_url, body, timeout=5.0)
        if out.get("status") == 200:
            keys[seat] = out["answer"]["seat_key"] or keys.get(seat)      # a seat's first report claims it
            sent.append((out["answer"]["seq"], t0))
        elif out.get("status") == 429:             # the seat's rate limit doing its job (a fast machine)
            limited.append(i)
        else:
            refused.append(out.get("status"))
        i += WORKERS


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _latency_p95(sent: list, seen: dict) -> float:
    times = sorted(seen.items())
    lat, j = [], 0
    for seq, t0 in sorted(sent):
        while j < len(times) and times[j][0] < seq:
            j += 1
        if j < len(times):
            lat.append(times[j][1] - t0)
    lat.sort()
    return lat[int(0.95 * (len(lat) - 1))] if lat else float("inf")


def run(quick: bool = False) -> list[Row]:
    seconds = 2.0 if quick else 6.0
    with tempfile.TemporaryDirectory(prefix="explainer-bench-room-") as tmp:
        db = Path(tmp) / "room.sqlite3"
        proc, url = _start(db)
        try:
            seen, sent, refused, limited, stop = {}, [], [], [], threading.Event()
            reader = threading.Thread(target=_events, args=(url, seen, stop), daemon=True)
            reader.start()
            until = time.perf_counter() + seconds
            workers = [threading.Thread(target=_worker, args=(url, k, until, sent, refused, limited)) for k in range(WORKERS)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            time.sleep(0.5)                                 # the last push
            stop.set()
            rss = _peak_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
        db_kib = sum(p.stat().st_size for p in Path(tmp).glob("room.sqlite3*")) / 1024
    rps, p95 = len(sent) / seconds, _latency_p95(sent, seen)
    held = f"({len(refused)} refused, {len(limited)} over a seat's rate; server "
    return [Row("room", f"reports/s held, {SEATS} seats, {WORKERS} posting threads {held}"
                        f"peak RSS {rss:.0f} MiB, db {db_kib:.0f} KiB)", rps, None, "rep/s", None,
                f">= {GOAL_RPS:g}/s", rps >= GOAL_RPS and not refused),
            Row("room", f"p95 post -> the board's event stream shows it ({len(sent)} reports)", p95, None, "s", None,
                f"< {GOAL_P95:g} s", p95 < GOAL_P95)]
