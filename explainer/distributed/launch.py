"""Start real rank processes joined by torch.distributed (gloo) on 127.0.0.1, and never hang.

``launch(fn, world_size)`` starts one process per rank (a forkserver with torch preloaded, so a
launch costs ~0.2 s instead of a torch import per rank; ``spawn`` where forkserver is missing),
sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free
loopback port, plus ``env_per_rank``), runs ``init_process_group("gloo", "env://")`` (a TCP store)
and ``fn(*args)``, and returns one ``RankResult`` per rank. A rank that overruns ``timeout``, or
is still running ``grace`` seconds after another rank failed, is ended by pid (SIGTERM, then
SIGKILL) and reported as a ``TimeoutError``. Children exit with ``os._exit`` after closing their
shared-memory channels and process groups.

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
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

from explainer.distributed import shm

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
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _child(fn, args, kwargs, env: dict, conn, num_threads: int) -> None:
    code, msg = 1, None
    try:
        for key in [k for k in os.environ if k.startswith("EXPLAINER_") and k not in env]:
            del os.environ[key]                           # a forkserver keeps the env it started with
        os.environ.update(env)
        import torch

        from explainer.distributed.parallel_state import init_distributed_environment
        torch.set_num_threads(num_threads)                # one core per rank: spinning peers need it
        _keep_freed_memory()
        init_distributed_environment()
        msg, code = ("ok", fn(*args, **kwargs)), 0
    except BaseException as exc:                          # noqa: BLE001 - reported to the parent
        msg = ("err", type(exc).__name__, str(exc), traceback.format_exc())
    try:
        conn.send(msg)
    except Exception as exc:                              # e.g. an unpicklable return value
        conn.send(("err", type(exc).__name__, f"could not return the rank's result: {exc}", ""))
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
        from explainer.distributed import parallel_state, shm
        shm.close_all()
        parallel_state.destroy_model_parallel()
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:                                     # noqa: BLE001 - best effort on the way out
        pass


def _end(proc, wait_s: float = 1.0) -> None:
    """End one child by its pid: SIGTERM, then SIGKILL."""
    if proc.is_alive():
        proc.terminate()
        proc.join(wait_s)
    if proc.is_alive():
        proc.kill()
        proc.join(wait_s)


def launch(fn: Callable[..., Any], world_size: int, *, args: tuple = (), kwargs: dict | None = None,
           env_per_rank: list[dict] | dict[int, dict] | None = None, timeout: float = 60.0,
           grace: float = 3.0, start_method: str | None = None, num_threads: int = 1,
           master_port: int | None = None) -> list[RankResult]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` real rank processes; results by rank."""
    if world_size < 1:
        raise ValueError(f"world_size {world_size}: accepted are integers >= 1")
    if timeout <= 0:
        raise ValueError(f"timeout {timeout}: accepted are seconds > 0")
    ctx = _context(start_method)
    port = master_port or free_port()
    base = {k: v for k, v in os.environ.items() if k.startswith("EXPLAINER_")}
    procs, conns, t0 = [], [], time.monotonic()
    try:
        for rank in range(world_size):
            extra = (env_per_rank or {}).get(rank, {}) if isinstance(env_per_rank, dict) else (
                env_per_rank[rank] if env_per_rank else {})
            env = {**base, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   **{k: str(v) for k, v in extra.items()}}
            recv_end, send_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(fn, args, kwargs or {}, env, send_end, num_threads),
                               name=f"explainer-rank{rank}", daemon=True)
            proc.start()
            send_end.close()
            procs.append(proc)
            conns.append(recv_end)
        return _collect(procs, conns, t0, timeout, grace)
    finally:
        for proc in procs:                                # whatever happened, no child outlives us
            _end(proc)
        for c in conns:
            c.close()


def _collect(procs, conns, t0: float, timeout: float, grace: float) -> list[RankResult]:
    results: dict[int, RankResult] = {}
    pending, failed_at, first_failed = set(range(len(procs))), None, None
    while pending:
        now = time.monotonic()
        limit = t0 + timeout if failed_at is None else min(t0 + timeout, failed_at + grace)
        if now >= limit:
            break
        ready = set(wait([conns[r] for r in pending] + [procs[r].sentinel for r in pending], limit - now))
        for r in sorted(pending):
            if conns[r] not in ready and procs[r].sentinel not in ready:
                continue
            try:
                msg = conns[r].recv() if conns[r].poll() else None
            except EOFError:
                msg = None
            if msg is None and procs[r].is_alive():
                continue
            res = RankResult(r, False, pid=procs[r].pid, seconds=time.monotonic() - t0)
            if msg is None:
                procs[r].join(1.0)
                res.error_type, res.error_message = "ProcessDied", (
                    f"rank {r} (pid {procs[r].pid}) exited with code {procs[r].exitcode} before reporting")
            elif msg[0] == "ok":
                res.ok, res.value = True, msg[1]
            else:
                res.error_type, res.error_message, res.traceback = msg[1], msg[2], msg[3]
            results[r] = res
            pending.discard(r)
            if not res.ok and failed_at is None:
                failed_at, first_failed = time.monotonic(), r
    for r in sorted(pending):                             # overran: end it by pid
        _end(procs[r])
        why = (f"still running {grace:.1f}s after rank {first_failed} failed" if first_failed is not None
               else f"did not finish within {timeout:.1f}s")
        results[r] = RankResult(r, False, error_type="TimeoutError", pid=procs[r].pid, ended_by_launcher=True,
                                error_message=f"rank {r} (pid {procs[r].pid}) {why}; ended by the launcher",
                                seconds=time.monotonic() - t0)
    for r, proc in enumerate(procs):                      # let finished ranks exit (they unlink shm)
        proc.join(max(0.5, grace))
        _end(proc)
        results[r].exitcode = proc.exitcode
        if proc.exitcode != 0:                            # killed or crashed: sweep what it may have left
            shm.sweep_segments_of(proc.pid)
    return [results[r] for r in range(len(procs))]


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
