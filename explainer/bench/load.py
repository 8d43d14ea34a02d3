"""``bench --loaded``: busy-loop processes that compete for the cores while the benchmarks run.

Each is a separate Python process spinning on the clock, bounded by its own deadline (so it ends even
if this process dies first) and ended by pid when the context exits.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

MAX_PROCS = 64
ACTIVE: list[int] = []             # pids of the busy loops running now (benchmarks label their rows)
_SPIN = "import time\nend = time.monotonic() + {secs}\nwhile time.monotonic() < end:\n    pass\n"


def default_procs() -> int:
    return os.cpu_count() or 1


@contextlib.contextmanager
def busy_load(procs: int, max_seconds: float = 900.0):
    """Run ``procs`` busy loops (each at most ``max_seconds``) for the duration of the ``with`` block."""
    if not 1 <= procs <= MAX_PROCS:
        raise ValueError(f"{procs} load processes: accepted 1..{MAX_PROCS}")
    started: list[subprocess.Popen] = []
    try:
        for _ in range(procs):
            started.append(subprocess.Popen([sys.executable, "-c", _SPIN.format(secs=float(max_seconds))],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        ACTIVE[:] = [p.pid for p in started]
        yield list(ACTIVE)
    finally:
        ACTIVE.clear()
        for p in started:
            p.kill()                                      # by pid, only the processes started here
        for p in started:
            p.wait(10)
