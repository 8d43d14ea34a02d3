"""How a rank waits for its peer on the shared-memory channel: spin, then yield, then sleep.

vLLM's ``wait_for_one`` spins with ``_mm_pause()`` forever: right when every rank owns a core, wrong
when ranks share cores. The channel waits in three phases and bounds the whole wait:

1. **spin** (``spin_us``): poll the peer's counter. A hand-off normally lands while the peer is
   mid-copy, a few microseconds away, and a wake-up from sleep costs far more (~50 us on a VM).
2. **yield** (until ``yield_us``): poll between ``os.sched_yield()`` calls, so a peer waiting for our
   core can run. If one yield took longer than ``contended_us``, another task held the core for the
   rest of its time slice (the machine is oversubscribed): go to sleep at once, and **back off**: for
   the next ``backoff_ms`` this process's waits spin ``backoff_spin_us``, yield once, then sleep.
3. **sleep**: the caller sets a "waiting" flag in its control line and blocks on a doorbell the peer
   rings after publishing (``ShmGroup._wait``), polling every ``poll_ms`` for a lost wake-up and for
   a dead peer; the timeout error comes from there.

The trade-off. Every microsecond spent spinning is taken from whatever else wants that core, including
the peer on a 2-core machine; every sleep costs a wake-up (up to ~1 ms on a loaded VM); and a yield
while a busy task shares the core hands it the rest of its slice (~1 ms on the development machine's
kernel, 6.18 with the EEVDF scheduler). Without the back-off, every wait under load paid that slice.
Median one-way 4 KiB ``send_tensor_dict`` on the 2-core development machine, one or two runs each of
``python -m explainer bench --only comm`` (noisy: read the orders of magnitude)::

    regime                                  no back-off          back-off (default)
    quiet                                   8.8-10 us            9.5-9.7 us
    2 busy loops (--loaded)                 1,100-1,300 us       9.2-9.3 us     (1 MiB: 1.9-3.8x gloo -> 10-12x)
    6 busy loops (--loaded 6)               1,510 us             1,505 us
    both ranks on one core (taskset -c 0)   32 us                37 us

With two busy loops the back-off turns ~1 ms hand-offs into ~10 us ones: a peer that is running right
now answers within the 20 us spin, and the rest yield once and then sleep on the doorbell. (Spinning
20 us and sleeping without the yield measured 34-54 us.) Phase 2 still matters when the two ranks
share one core: yielding to the peer is short, so it never backs off there. No policy rescues a
machine with three or more runnable tasks per core: most waits then end on the doorbell and a wake-up
waits for the scheduler, for gloo too. An earlier sweep at load 12-17 found that spinning longer than a
few microseconds before phase 2 only delays the peer there. Re-measure with
``python -m explainer bench --only comm [--loaded [N]]``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class WaitPolicy:
    spin_us: float = 2.0           # phase 1: pure polling
    yield_us: float = 200.0        # phase 2 ends this long after the wait began (about one Python ping-pong turn)
    contended_us: float = 50.0     # a yield this slow means the cores are oversubscribed: go to sleep ...
    backoff_ms: float = 100.0      # ... and for this long wait as: spin, one yield, sleep; then phase 2 again
    backoff_spin_us: float = 20.0  # the spin while backing off: long enough for a peer that is running right now
    poll_ms: int = 2               # phase 3: doorbell poll period, bounds a lost wake-up

    def __post_init__(self):
        if not (0 <= self.spin_us <= self.yield_us and self.contended_us > 0 and self.backoff_ms >= 0
                and self.backoff_spin_us >= 0 and self.poll_ms >= 1):
            raise ValueError(f"{self}: accepted are 0 <= spin_us <= yield_us, contended_us > 0, backoff_ms >= 0, "
                             f"backoff_spin_us >= 0, poll_ms >= 1")


DEFAULT = WaitPolicy()
_yield_off_until = 0.0            # perf_counter time before which phase 2 is skipped (this process saw contention)


def spin_then_yield(ctrl, slot: int, target: int, policy: WaitPolicy = DEFAULT) -> bool:
    """Phases 1 and 2: True as soon as ``ctrl[slot] >= target``, False when it is time to sleep."""
    global _yield_off_until
    now = time.perf_counter()
    if now < _yield_off_until:                            # backing off: a longer spin, one yield, then sleep
        yield_from = give_up = now + policy.backoff_spin_us * 1e-6
    else:
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
            if after - now > contended:                   # another task held the core for a whole slice
                _yield_off_until = after + policy.backoff_ms * 1e-3
                return ctrl[slot] >= target
            now = after
    return ctrl[slot] >= target
