"""Start real rank processes joined by torch.distributed (gloo) on 127.0.0.1, and never hang.

``launch(fn, world_size)`` starts one process per rank (a forkserver with torch preloaded, so a
launch costs ~0.2 s instead of a torch import per rank; ``spawn`` where forkserver is missing),
sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free
loopback port, plus ``env_per_rank``), runs ``init_process_group("gloo", "env://")`` (a TCP store)
and ``fn(*args)``, and returns one ``RankResult`` per rank.

One deadline for a rank's whole life (the comm timeout, ``EXPLAINER_COMM_TIMEOUT``): rendezvous,
group set-up and every transfer carry it as torch's ``timeout=``; each rank reports its phase
(``explainer.distributed.phases``) through its result pipe, and the parent watches every rank:

* a rank that dies without reporting is named (rank, pid, signal, phase) at once; its peers get
  ``grace`` seconds to report, then are ended, and every rank's result names the dead one;
* a stopped rank (``/proc/PID/stat`` state T, SIGSTOP) is ended after the comm timeout, or as soon as
  a peer has failed waiting for it;
* the whole launch is capped by ``timeout``.

Ranks never outlive the parent: each rank is its own process group, asks the kernel for SIGKILL
when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and a watchdog thread exits when the parent's end
of a control pipe closes (unlinking the rank's shared-memory names first). A stopped or killed
forkserver is restarted once, never waited on. Segments left by dead creators are swept at each
launch (their names carry the creator's pid).

The same rank functions run under torchrun, which provides those variables itself:
``torchrun --nproc-per-node 2 -m explainer.distributed.launch`` (or ``python -m
explainer.distributed.launch``, which launches itself) sends a tensor dict along a PP group.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

from explainer.distributed import phases
from explainer.distributed.device_communicators import shm
from explainer.distributed.procs import (_end, _stopped, die_with_parent, end_all, proc_state,  # noqa: F401
                                         signame, start, stop_helpers)

_PRELOAD = ["torch", "torch.distributed", "explainer.distributed.parallel_state"]


@dataclass
class RankResult:
    rank: int
    ok: bool
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    exitcode: int | None = None
    pid: int | None = None
    ended_by_launcher: bool = False
    seconds: float = 0.0
    phase: str = "start"                 # the last phase the rank reported
    reported_error: dict | None = None   # {type, message, phase}: an ok rank that reported a failure it returns
    phase_at: float = 0.0                # seconds after the launch started when the rank entered ``phase``
    culprit: bool = False                # the launcher found this rank dead or stopped: the others waited on it

    @property
    def error(self) -> dict | None:
        return None if self.ok else {"type": self.error_type, "message": self.error_message}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _context(start_method: str | None):
    method = start_method or os.environ.get("EXPLAINER_START_METHOD") or (
        "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    if method not in mp.get_all_start_methods():
        from explainer.errors import UsageError
        raise UsageError(f"EXPLAINER_START_METHOD={method!r}: accepted {', '.join(mp.get_all_start_methods())}")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _watch_parent(ctl) -> None:
    """Block on the parent's control pipe: any message or EOF (the parent died) ends this rank now."""
    try:
        ctl.recv()
    except BaseException:                                 # noqa: BLE001 - EOF: the parent is gone
        pass
    for name in list(shm._OWNED_NAMES):                   # what a set-up in progress created
        shm._unlink_name(name)
    os._exit(70)


def _child(fn, args, kwargs, env: dict, conn, ctl, num_threads: int) -> None:
    code, msg = 1, None
    die_with_parent()
    threading.Thread(target=_watch_parent, args=(ctl,), daemon=True, name="explainer-parent-watchdog").start()
    try:
        for key in [k for k in os.environ if k.startswith("EXPLAINER_") and k not in env]:
            del os.environ[key]                           # a forkserver keeps the env it started with
        os.environ.update(env)
        phases.set_reporter(conn)
        import torch

        from explainer.distributed.parallel_state import init_distributed_environment
        torch.set_num_threads(num_threads)                # one core per rank: spinning peers need it
        _keep_freed_memory()
        init_distributed_environment()
        msg, code = ("ok", fn(*args, **kwargs)), 0
    except BaseException as exc:                          # noqa: BLE001 - reported to the parent
        msg = ("err", type(exc).__name__, str(exc), traceback.format_exc(), None)
    phases.set_reporter(None)
    try:
        if code == 0:
            conn.send(("phase", "shutdown"))
        conn.send(msg)
    except Exception as exc:                              # e.g. an unpicklable return value
        try:
            conn.send(("err", type(exc).__name__, f"could not return the rank's result: {exc}", "", None))
        except Exception:                                 # noqa: BLE001 - parent gone
            pass
        code = 1
    finally:
        conn.close()
        _cleanup()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _keep_freed_memory() -> None:
    """Keep freed activations in the heap (glibc ``mallopt``), so each received PP dict does not
    page-fault fresh memory in; vLLM's CPU docs get the same effect by preloading tcmalloc. Applies to
    every path a rank uses (shared memory and gloo alike)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)                        # M_MMAP_THRESHOLD: glibc's maximum, 32 MiB
        libc.mallopt(-1, 512 << 20)                       # M_TRIM_THRESHOLD
    except (OSError, AttributeError):                     # not glibc: nothing to tune
        pass


def _cleanup() -> None:
    try:
        from explainer.distributed import parallel_state
        from explainer.distributed.device_communicators import shm
        shm.close_all()
        parallel_state.destroy_model_parallel()
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:                                     # noqa: BLE001 - best effort on the way out
        pass


def _comm_timeout(env: dict) -> float:
    from explainer.distributed.device_communicators.cpu_communicator import env_timeout
    return env_timeout(env.get("EXPLAINER_COMM_TIMEOUT"))


def launch(fn: Callable[..., Any], world_size: int, *, args: tuple = (), kwargs: dict | None = None,
           env_per_rank: list[dict] | dict[int, dict] | None = None, timeout: float = 60.0,
           grace: float = 1.0, start_method: str | None = None, num_threads: int = 1,
           master_port: int | None = None) -> list[RankResult]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` real rank processes; results by rank."""
    from explainer.distributed.device_communicators.cpu_communicator import validate_env
    from explainer.errors import UsageError
    if not isinstance(world_size, int) or world_size < 1:
        raise UsageError(f"world_size {world_size}: accepted are integers >= 1")
    if not timeout > 0:
        raise UsageError(f"timeout {timeout}: accepted are seconds > 0")
    ctx = _context(start_method)
    port = master_port or free_port()
    base = {k: v for k, v in os.environ.items() if k.startswith("EXPLAINER_")}
    envs = []
    for rank in range(world_size):
        extra = (env_per_rank or {}).get(rank, {}) if isinstance(env_per_rank, dict) else (
            env_per_rank[rank] if env_per_rank else {})
        envs.append({**base, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **{k: str(v) for k, v in extra.items()}})
        validate_env(envs[-1])                            # bad values: UsageError before any process
    comm_timeout = max(_comm_timeout(e) for e in envs)
    shm.sweep_stale_segments()                            # what a killed group left behind
    procs, conns, ctls, t0 = [], [], [], time.monotonic()
    try:
        for rank in range(world_size):
            recv_end, send_end = ctx.Pipe(duplex=False)
            ctl_r, ctl_w = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(fn, args, kwargs or {}, envs[rank], send_end, ctl_r, num_threads),
                               name=f"explainer-rank{rank}", daemon=True)
            procs.append(proc)
            conns.append(recv_end)
            ctls.append(ctl_w)
            try:
                start(proc, ctx, bound=max(120.0, comm_timeout + 10.0))   # torch import on a busy host
            finally:
                send_end.close()
                ctl_r.close()
        return _collect(procs, conns, t0, timeout, grace, comm_timeout)
    finally:
        for c in ctls:                                    # the watchdogs of ranks still alive fire now
            c.close()
        end_all(procs)                                   # whatever happened, no child outlives us
        for proc in procs:
            if proc.pid and proc.exitcode not in (0, None):
                shm.sweep_segments_of(proc.pid)           # killed or crashed: sweep what it may have left
        for c in conns:
            c.close()


def _collect(procs, conns, t0: float, timeout: float, grace: float, comm_timeout: float) -> list[RankResult]:
    n = len(procs)
    results: dict[int, RankResult] = {}
    phase = ["start"] * n
    phase_at = [0.0] * n
    stopped_since: list[float | None] = [None] * n
    culprit: tuple[int, str, str] | None = None           # (rank, error type for peers, description)
    pending, failed_at, first_failed = set(range(n)), None, None
    early: dict[int, dict] = {}

    def finish(r: int, res: RankResult) -> None:
        nonlocal failed_at, first_failed
        res.phase, res.phase_at = phase[r], phase_at[r]
        results[r] = res
        pending.discard(r)
        if not res.ok and failed_at is None:
            failed_at, first_failed = time.monotonic(), r

    while pending:
        now = time.monotonic()
        if now >= t0 + timeout:
            break
        ready = set(wait([conns[r] for r in pending] + [procs[r].sentinel for r in pending], 0.1))
        for r in sorted(pending):
            msg = None
            try:
                while conns[r].poll():
                    m = conns[r].recv()
                    if m[0] == "phase":
                        phase[r], phase_at[r] = m[1], time.monotonic() - t0
                    elif m[0] == "failed":                # the rank returns its failure as a record
                        early[r] = {"type": m[1], "message": m[2], "phase": m[3]}
                        if failed_at is None:
                            failed_at, first_failed = time.monotonic(), r
                    else:
                        msg = m
                        break
            except (EOFError, OSError):
                pass
            if msg is not None:
                res = RankResult(r, msg[0] == "ok", pid=procs[r].pid, seconds=time.monotonic() - t0)
                if msg[0] == "ok":
                    res.value, res.reported_error = msg[1], early.get(r)
                else:
                    res.error_type, res.error_message, res.traceback, res.value = msg[1], msg[2], msg[3], msg[4]
                finish(r, res)
            elif procs[r].sentinel in ready or not procs[r].is_alive():
                procs[r].join(0.5)
                how = signame(procs[r].exitcode)
                desc = f"rank {r} (pid {procs[r].pid}) {how} in phase {phase[r]}"
                if culprit is None:
                    culprit = (r, "PeerGoneError", desc)
                finish(r, RankResult(r, False, pid=procs[r].pid, error_type="ProcessDied",
                                     error_message=f"{desc}, before reporting", seconds=time.monotonic() - t0))
        now = time.monotonic()
        for r in sorted(pending):                         # a stopped rank: the comm timeout, or a failed peer
            stopped_since[r] = (stopped_since[r] or now) if _stopped(procs[r].pid) else None
            if stopped_since[r] is not None and (now - stopped_since[r] >= comm_timeout or failed_at is not None):
                desc = (f"rank {r} (pid {procs[r].pid}) was stopped (process state T, e.g. SIGSTOP) in phase "
                        f"{phase[r]} for {now - stopped_since[r]:.1f}s")
                if culprit is None:
                    culprit = (r, "PeerTimeoutError", desc)
                _end(procs[r])
                finish(r, RankResult(r, False, pid=procs[r].pid, error_type="PeerTimeoutError", ended_by_launcher=True,
                                     error_message=f"{desc}; ended by the launcher", seconds=time.monotonic() - t0))
        if failed_at is not None and time.monotonic() >= failed_at + grace:
            break
    for r in sorted(pending):                             # overran, or still running after a peer failed
        _end(procs[r])
        why = (f"was still running {grace:.1f}s after rank {first_failed} failed" if first_failed is not None
               else f"did not finish within {timeout:.1f}s")
        results[r] = RankResult(r, False, error_type="TimeoutError", pid=procs[r].pid, ended_by_launcher=True,
                                error_message=f"rank {r} (pid {procs[r].pid}) {why} in phase {phase[r]}; "
                                              f"ended by the launcher", seconds=time.monotonic() - t0, phase=phase[r],
                                phase_at=phase_at[r])
    if culprit is not None:                               # every other failed rank names the peer that caused it
        c, kind, desc = culprit
        results[c].culprit = True
        for r, res in results.items():
            if r != c and not res.ok:
                own = f"{res.error_type}: {(res.error_message or '').splitlines()[0][:300]}" if res.error_message else ""
                res.error_type = kind
                res.error_message = (f"peer {desc}; rank {r} (pid {res.pid}) was in phase {res.phase}"
                                     + (f" ({own})" if own else ""))
    for r, proc in enumerate(procs):                      # let finished ranks exit (they unlink shm)
        proc.join(max(0.5, grace))
        _end(proc)
        results[r].exitcode = proc.exitcode
        if proc.exitcode != 0:                            # killed or crashed: sweep what it may have left
            shm.sweep_segments_of(proc.pid)
    return [results[r] for r in range(n)]


def values(results: list[RankResult]) -> list[Any]:
    """The ranks' return values, or a RuntimeError summarising every failed rank."""
    bad = [r for r in results if not r.ok]
    if bad:
        lines = [f"rank {r.rank}: {r.error_type}: {r.error_message}" for r in bad]
        tb = next((r.traceback for r in bad if r.traceback), "")
        raise RuntimeError("rank(s) failed:\n" + "\n".join(lines) + (f"\n--- first traceback ---\n{tb}" if tb else ""))
    return [r.value for r in results]


def demo_rank(gate: str = "post-40150") -> dict:
    """Each PP rank receives from the previous one and sends to the next (runs under torchrun too)."""
    import torch

    from explainer.distributed.parallel_state import destroy_model_parallel, initialize_pp_group
    pp = initialize_pp_group(gate=gate)
    try:
        decision = pp.device_communicator.decision if pp.device_communicator else None
        got = None if pp.is_first_rank else pp.recv_tensor_dict()
        if not pp.is_last_rank:
            pp.send_tensor_dict({"hidden_states": torch.full((2, 4), float(pp.rank_in_group)),
                                 "residual": torch.zeros(2, 4)})
        return {"rank": pp.rank_in_group, "path": decision.path() if decision else "single rank",
                "custom_path": pp.use_cpu_custom_send_recv,
                "received": None if got is None else {k: list(v.shape) for k, v in got.items()}}
    finally:
        destroy_model_parallel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explainer.distributed.launch", description=demo_rank.__doc__)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--gate", default="post-40150")
    ap.add_argument("--nodes", type=int, default=1, help="simulated nodes (different EXPLAINER_DIST_IDENT)")
    a = ap.parse_args(argv)
    if "RANK" in os.environ and "MASTER_PORT" in os.environ:   # under torchrun
        from explainer.distributed.parallel_state import init_distributed_environment
        init_distributed_environment()
        print(demo_rank(a.gate), flush=True)
        return 0
    idents = [free_port() for _ in range(a.nodes)]
    env = [{"EXPLAINER_DIST_IDENT": idents[r * a.nodes // a.world_size]} for r in range(a.world_size)]
    for res in launch(demo_rank, a.world_size, args=(a.gate,), env_per_rank=env, timeout=60):
        print(f"rank {res.rank}: " + (str(res.value) if res.ok else f"{res.error_type}: {res.error_message}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
