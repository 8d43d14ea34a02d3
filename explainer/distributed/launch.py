"""Start real rank processes joined by torch.distributed (gloo) on 127.0.0.1, and never hang.

``launch(fn, world_size)`` starts one process per rank (a forkserver with torch preloaded, so a
launch costs ~0.2 s instead of a torch import per rank; ``spawn`` where forkserver is missing),
sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free
loopback port, plus ``env_per_rank``), runs ``init_process_group("gloo", "env://")`` (a TCP store)
and ``fn(*args)``, and returns one ``RankResult`` per rank.

One deadline for a rank's whole life (the comm timeout, ``EXPLAINER_COMM_TIMEOUT``): rendezvous,
group set-up and every transfer carry it as torch's ``timeout=``; each rank reports its phase
(``explainer.distributed.phases``) through its result pipe, and the parent watches every rank (``rank_watch``):

* a rank that dies without reporting is named (rank, pid, signal, phase) at once; its peers get
  ``grace`` seconds to report, then are ended, and every rank's result names the dead one;
* a stopped rank (``/proc/PID/stat`` state T, SIGSTOP) is ended after the comm timeout, or as soon as
  a peer has failed waiting for it;
* the whole launch is capped by ``timeout``.

Ranks never outlive the parent (``rank_process``): each rank is its own process group, asks the kernel for SIGKILL
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
import time
from typing import Any, Callable

import torch

from explainer.distributed.device_communicators import shm
from explainer.distributed.device_communicators.comm_config import env_timeout, validate_env
from explainer.distributed.parallel_state import destroy_model_parallel, init_distributed_environment, initialize_pp_group
from explainer.distributed.procs import end_all, start
from explainer.distributed.rank_process import run_rank
from explainer.distributed.rank_watch import RankResult, collect
from explainer.errors import UsageError

_PRELOAD = ["torch", "torch.distributed", "explainer.distributed.parallel_state"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n different free ports, one per simulated node's launcher (its ident). All sockets stay bound until every
    port is picked: ``free_port()`` twice in a row may hand out the same port, and two nodes with one ident agree on
    their SHM group name (shared memory chosen across "nodes")."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _context(start_method: str | None):
    method = start_method or os.environ.get("EXPLAINER_START_METHOD") or (
        "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    if method not in mp.get_all_start_methods():
        raise UsageError(f"EXPLAINER_START_METHOD={method!r}: accepted {', '.join(mp.get_all_start_methods())}")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _comm_timeout(env: dict) -> float:
    return env_timeout(env.get("EXPLAINER_COMM_TIMEOUT"))


def launch(fn: Callable[..., Any], world_size: int, *, args: tuple = (), kwargs: dict | None = None,
           env_per_rank: list[dict] | dict[int, dict] | None = None, timeout: float = 60.0,
           grace: float = 1.0, start_method: str | None = None, num_threads: int = 1,
           master_port: int | None = None) -> list[RankResult]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` real rank processes; results by rank."""
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
            proc = ctx.Process(target=run_rank, args=(fn, args, kwargs or {}, envs[rank], send_end, ctl_r, num_threads),
                               name=f"explainer-rank{rank}", daemon=True)
            procs.append(proc)
            conns.append(recv_end)
            ctls.append(ctl_w)
            try:
                start(proc, ctx, bound=max(120.0, comm_timeout + 10.0))   # torch import on a busy host
            finally:
                send_end.close()
                ctl_r.close()
        return collect(procs, conns, t0, timeout, grace, comm_timeout)
    finally:
        for c in ctls:                                    # the watchdogs of ranks still alive fire now
            c.close()
        end_all(procs)                                   # whatever happened, no child outlives us
        for proc in procs:
            if proc.pid and proc.exitcode not in (0, None):
                shm.sweep_segments_of(proc.pid)           # killed or crashed: sweep what it may have left
        for c in conns:
            c.close()


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
        init_distributed_environment()
        print(demo_rank(a.gate), flush=True)
        return 0
    idents = free_ports(a.nodes)
    env = [{"EXPLAINER_DIST_IDENT": idents[r * a.nodes // a.world_size]} for r in range(a.world_size)]
    for res in launch(demo_rank, a.world_size, args=(a.gate,), env_per_rank=env, timeout=60):
        print(f"rank {res.rank}: " + (str(res.value) if res.ok else f"{res.error_type}: {res.error_message}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
