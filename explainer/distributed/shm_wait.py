"""How a rank waits for its peer on the shared-memory channel: spin, then yield, then sleep.

vLLM's ``wait_for_one`` spins with ``_mm_pause()`` forever: right when every rank owns a core, wrong
when ranks share cores. The channel waits in three phases and bounds the whole wait:

1. **spin** (``spin_us``): poll the peer's counter. A hand-off normally lands while the peer is
   mid-copy, a few microseconds away, and a wake-up from sleep costs far more (~50 us on a VM).
2. **yield** (until ``yield_us``): poll between ``os.sched_yield()`` calls, so a peer waiting for our
   core can run. If one yield took longer than ``contended_us``, another task really wanted the core
   (the machine is oversubscribed): stop yielding at once. The scheduler favours woken sleepers over
   spinners, so a loaded machine is served best by sleeping early.
3. **sleep**: the caller sets a "waiting" flag in its control line and blocks on a doorbell the peer
   rings after publishing (``ShmGroup._wait``), polling every ``poll_ms`` for a lost wake-up and for
   a dead peer; the timeout error comes from there.

The trade-off. Every microsecond spent spinning is taken from whatever else wants that core, including
the peer on a 2-core machine; every sleep costs a wake-up. A pure spinner starves the peer (16 MiB
streams at ~5 GB/s instead of ~10 GB/s measured on 2 cores); blocking too early makes each small
hand-off pay a wake-up (4 KiB one-way ~80 us with a 50 us spin instead of ~20 us with 200 us). The
defaults come from ``python -m explainer bench --only comm`` with and without ``--loaded``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class WaitPolicy:
    spin_us: float = 5.0           # phase 1: pure polling
    yield_us: float = 200.0        # phase 2 ends this long after the wait began (about one Python ping-pong turn)
    contended_us: float = 50.0     # a yield this slow means the cores are oversubscribed: go to sleep
    poll_ms: int = 2               # phase 3: doorbell poll period, bounds a lost wake-up

    def __post_init__(self):
        if not (0 <= self.spin_us <= self.yield_us and self.contended_us > 0 and self.poll_ms >= 1):
            raise ValueError(f"{self}: accepted are 0 <= spin_us <= yield_us, contended_us > 0, poll_ms >= 1")


DEFAULT = WaitPolicy()


def spin_then_yield(ctrl, slot: int, target: int, policy: WaitPolicy = DEFAULT) -> bool:
    """Phases 1 and 2: True as soon as ``ctrl[slot] >= target``, False when it is time to sleep."""
    now = time.perf_counter()
    yield_from, give_up = now + policy.spin_us * 1e-6, now + policy.yield_us * 1e-6
    contended = policy.contended_us * 1e-6
    while now < give_up:
        for _ in range(16):                               # ~16 polls between clock reads
            if ctrl[slot] >= target:
                return True
        now = time.perf_counter()
        if now > yield_from:                              # phase 2: let a peer on our core run
            os.sched_yield()
            after = time.perf_counter()
            if after - now > contended:
                return ctrl[slot] >= target
            now = after
    return ctrl[slot] >= target
