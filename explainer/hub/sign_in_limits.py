"""How fast the hub's login form may be tried: token buckets per client address and for the whole room.

A wrong room code spends one of the address's ``WRONG_BURST`` tries, given back one per ``WRONG_EVERY`` seconds
(the whole room: ``ROOM_WRONG_BURST``, one per ``ROOM_WRONG_EVERY`` s); with none left, every sign-in from that
address is refused (429) until one comes back, the right code too, so guessing the code costs time: 8 characters
of a 27-letter alphabet are 2^38 codes. New names: ``NEW_BURST`` at once in the room, then one per
``NEW_EVERY`` s. The hub's own machine (loopback) is not counted among the addresses that took names.
"""

from __future__ import annotations

import time

WRONG_BURST, WRONG_EVERY = 5, 10.0          # wrong codes per address, then one try per WRONG_EVERY seconds
ROOM_WRONG_BURST, ROOM_WRONG_EVERY = 100, 1.0
NEW_BURST, NEW_EVERY = 40, 1.0               # new names at once in the room, then one per NEW_EVERY s
MAX_ADDRESSES = 10_000                       # buckets kept; the fullest are forgotten first
OWN_MACHINE = {"127.0.0.1", "::1"}


class Bucket:
    """Token buckets by key: ``burst`` at once, then one per ``every`` seconds."""

    def __init__(self, burst: int, every: float):
        self.burst, self.every, self.level = burst, every, {}

    def _now(self, key, now):
        level, then = self.level.get(key, (float(self.burst), now))
        return min(float(self.burst), level + (now - then) / self.every)

    def wait(self, key, now: float | None = None) -> float:
        """Seconds until ``key`` has a token again (0: it has one now)."""
        now = time.monotonic() if now is None else now
        level = self._now(key, now)
        return 0.0 if level >= 1.0 else (1.0 - level) * self.every

    def spend(self, key, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.level[key] = (self._now(key, now) - 1.0, now)
        if len(self.level) > MAX_ADDRESSES:
            for old in sorted(self.level, key=lambda k: -self._now(k, now))[:len(self.level) - MAX_ADDRESSES]:
                del self.level[old]


