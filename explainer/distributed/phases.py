"""The phases of a rank's life, reported to the launcher so a fault can be named (rank, pid, phase).

``enter(phase)`` is called at each transition: ``rendezvous`` (``init_process_group``), ``group-setup``
(``new_group``), ``name-agreement`` (the SHM group-name gather, vLLM's ``all_gather_object``),
``shm-setup`` (segments created, names exchanged, peers mapped), ``first-transfer`` and
``steady-state`` (the first and second tensor dict of a group), ``shutdown``. Under ``launch()`` each
transition goes through the rank's result pipe, so the parent knows where every rank is.

Test hook: ``EXPLAINER_FAULT_PHASE=RANK:PHASE[:ACTION]`` makes that rank, on entering that phase,
``wait`` (default: print ``explainer-fault: rank R (pid P) paused at PHASE`` to stderr and sleep until
signalled), ``STOP`` (SIGSTOP itself) or ``KILL`` (SIGKILL itself). Used by the fault-matrix test.
"""

from __future__ import annotations

import os
import signal
import sys
import time

PHASES = ("start", "rendezvous", "group-setup", "name-agreement", "shm-setup", "first-transfer",
          "steady-state", "shutdown")
FAULT_ACTIONS = ("wait", "STOP", "KILL")
_state: dict = {"phase": "start", "conn": None}


def set_reporter(conn) -> None:
    """The pipe to the launcher (``None``: not under ``launch()``, e.g. torchrun or a notebook)."""
    _state["conn"] = conn


def current() -> str:
    return _state["phase"]


def enter(phase: str) -> None:
    """The rank is in ``phase`` from now on (entering the phase it is in changes nothing)."""
    if phase == _state["phase"]:
        return
    _state["phase"] = phase
    conn = _state["conn"]
    if conn is not None:
        try:
            conn.send(("phase", phase))
        except (OSError, ValueError):                    # parent gone: its watchdog ends us
            pass
    spec = os.environ.get("EXPLAINER_FAULT_PHASE")
    if spec:
        _fault(spec, phase)


def report_failure(exc: BaseException) -> None:
    """Tell the launcher this rank failed although its function goes on to return a record of the failure
    (the comm scenarios do): the launcher starts the peers' grace at once and keeps the error."""
    conn = _state["conn"]
    if conn is not None:
        try:
            conn.send(("failed", type(exc).__name__, str(exc), _state["phase"]))
        except (OSError, ValueError):
            pass


def parse_fault(spec: str) -> tuple[int, str, str]:
    parts = spec.split(":")
    ok = len(parts) in (2, 3) and parts[0].isdigit() and parts[1] in PHASES
    action = parts[2] if len(parts) == 3 else "wait"
    if not ok or action not in FAULT_ACTIONS:
        raise ValueError(f"EXPLAINER_FAULT_PHASE={spec!r}: accepted RANK:PHASE[:ACTION] with PHASE one of "
                         f"{', '.join(PHASES)} and ACTION one of {', '.join(FAULT_ACTIONS)}")
    return int(parts[0]), parts[1], action


def _fault(spec: str, phase: str) -> None:
    rank, at, action = parse_fault(spec)
    if at != phase or str(rank) != os.environ.get("RANK"):
        return
    print(f"explainer-fault: rank {rank} (pid {os.getpid()}) paused at {phase} ({action})", file=sys.stderr, flush=True)
    if action == "KILL":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "STOP":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        while True:                                      # until the test or the launcher signals us
            time.sleep(0.05)
