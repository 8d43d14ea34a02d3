"""Watching and ending rank processes by pid, and a forkserver that cannot hang a launch.

* ``proc_state(pid)``: the state letter of ``/proc/PID/stat`` (T = stopped, Z = zombie, None = gone);
* ``end_all(procs)``: SIGTERM to every rank's process group at once (SIGKILL to a stopped one), one
  shared wait, then SIGKILL;
* ``start(proc, ctx, bound)``: ``Process.start()`` with a watcher that kills a stopped forkserver (or
  one that has not forked within ``bound`` seconds) and one retry with a fresh forkserver;
* ``die_with_parent()``: run in each rank: its own process group and ``prctl(PR_SET_PDEATHSIG, SIGKILL)``;
* ``stop_helpers()``: the CLI's interrupt path ends the forkserver and the resource tracker.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from multiprocessing import forkserver, resource_tracker

from explainer.distributed.errors import LaunchError

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: SIGKILL this rank when the process that forked it dies; own process group (a terminal's
    Ctrl-C reaches the CLI only, which ends the ranks itself)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):                    # not Linux/glibc: the watchdog pipe still applies
        pass


def proc_state(pid: int | None) -> str | None:
    """The state letter of ``/proc/PID/stat`` (R, S, D, T stopped, t traced, Z zombie), None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (``/proc``; ``kill(pid, 0)`` where /proc is unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


def is_stopped(pid: int | None) -> bool:
    return proc_state(pid) in ("T", "t")


def end_process(proc, wait_s: float = 0.5) -> None:
    """End one child and its process group by pid: SIGTERM (SIGKILL at once if it is stopped), then SIGKILL."""
    if proc.pid is None or proc.exitcode is not None:
        return
    if not is_stopped(proc.pid):
        _signal_group(proc.pid, signal.SIGTERM)
        proc.join(wait_s)
    if proc.exitcode is None:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.join(2.0)


def end_all(procs, wait_s: float = 0.5) -> None:
    """End every child at once: SIGTERM to all (SIGKILL to stopped ones), one shared wait, then SIGKILL."""
    live = [p for p in procs if p.pid is not None and p.exitcode is None]
    for p in live:
        _signal_group(p.pid, signal.SIGKILL if is_stopped(p.pid) else signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for p in live:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in live:
        if p.exitcode is None:
            _signal_group(p.pid, signal.SIGKILL)
    for p in live:
        p.join(2.0)


def _signal_group(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:                        # the rank leads its own group
            os.killpg(pid, sig)
            return
    except OSError:
        pass
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _forkserver():
    return forkserver._forkserver


def _kill_forkserver(reason: str) -> int | None:
    """SIGKILL our forkserver (stopped or wedged) so the next start makes a fresh one."""
    fs = _forkserver()
    pid = fs._forkserver_pid
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        for _ in range(100):                              # until it is a zombie; ensure_running reaps it
            if proc_state(pid) in (None, "Z"):
                break
            time.sleep(0.01)
    return pid


def start(proc, ctx, bound: float) -> None:
    """``proc.start()`` that a stopped or killed forkserver cannot hang or crash: a watcher kills a
    forkserver that is stopped, or that has not forked within ``bound`` seconds; one retry."""
    if ctx.get_start_method() != "forkserver":
        proc.start()
        return
    for attempt in (1, 2):
        if is_stopped(_forkserver()._forkserver_pid):
            _kill_forkserver("stopped")
        done = threading.Event()

        def watch():
            t0, stopped_since = time.monotonic(), None
            while not done.wait(0.1):
                pid = _forkserver()._forkserver_pid
                stopped_since = (stopped_since or time.monotonic()) if is_stopped(pid) else None
                if (stopped_since and time.monotonic() - stopped_since > 0.5) or time.monotonic() - t0 > bound:
                    _kill_forkserver("wedged")
                    return
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            proc.start()
            return
        except (EOFError, ConnectionError, OSError) as exc:
            if attempt == 2:
                raise LaunchError(f"could not start a rank process: the forkserver was stopped or killed "
                                  f"({type(exc).__name__}: {exc})") from exc
            _kill_forkserver("failed")                    # make sure it is dead (a zombie) before the retry
            proc._popen = None                            # let Process.start() run again
        finally:
            done.set()
            watcher.join()


def stop_helpers() -> None:
    """End this process's forkserver and resource tracker (the CLI calls this when interrupted)."""
    fs = _forkserver()
    if fs._forkserver_pid:
        _kill_forkserver("interrupted")
        try:
            fs._stop()
        except OSError:
            pass
    rt = resource_tracker._resource_tracker
    if getattr(rt, "_pid", None):
        try:
            os.kill(rt._pid, signal.SIGKILL)
            rt._stop()
        except (OSError, ChildProcessError):
            pass


def signame(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"
