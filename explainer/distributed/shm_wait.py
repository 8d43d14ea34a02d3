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
the peer on a 2-core machine; every sleep costs a wake-up (up to ~1 ms on a loaded VM). Measured on
the 2-core development machine while other jobs kept its load average at 12-17, median one-way 4 KiB
ping-pong in us (raw floor / ``send_tensor_dict``), one run each (noisy: read the trends)::

    spin_us  yield_us  contended_us  as found       +2 busy loops
       0       200         50        5.1 / 18.7    35.4 / 19.8
       2       200         50        7.0 / 20.3     6.9 / 20.6    <- default
       5       200         50        9.2 / 23.0    45.3 / 110
      10       200         50       14.7 / 28.6    15.1 / 31.9
       5       500         50        9.4 / 22.9    10.0 / 34.8
       5       200         20        9.6 / 23.6    34.5 / 164
       5       200        200        9.6 / 22.8     908 / 999

On an oversubscribed machine a spinner mostly delays the peer it waits for, so yielding almost at once
wins; a short spin is kept for machines where each rank owns a core and the reply lands within
microseconds. Waiting too long before sleeping (``contended_us`` 200) pays the doorbell wake-up far
more often. No policy rescues a machine with ~7 runnable tasks per core: there the full bench with
``--loaded`` (load average 14) gave a 4 KiB one-way of 236 us for ``send_tensor_dict`` against a raw
floor of 694 us, most waits ending on the doorbell, and gloo at 4.2 ms. Re-measure with
``python -m explainer bench --only comm [--loaded]``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class WaitPolicy:
    spin_us: float = 2.0           # phase 1: pure polling
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
