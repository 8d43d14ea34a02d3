"""Two real vLLM rank processes on this machine: ``python -m explainer.vllm_side.comm_pair --idents same|different
[--case post-40150|pre-40150|pre-40150-gate-only]`` (run in ``.venv-vllm``); prints one JSON object: each rank's report.

Each rank is its own ``python -m explainer.vllm_side.comm_pair --rank R --init tcp://127.0.0.1:PORT`` process
running ``comm_rank.rank_report`` (gloo on 127.0.0.1). ``VLLM_DIST_IDENT`` is what vLLM's multiproc executor gives
its workers (``vllm_dist_<uuid>``): one value for both ranks (one node), or one per rank (two nodes, each its
own executor). Both processes are bounded in time and ended by their pid; the /dev/shm entries they leave are
listed and removed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import uuid

SHM = "/dev/shm"
CASES = ("post-40150", "pre-40150", "pre-40150-gate-only", "bench", "bench-quick")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pair(idents: str, case: str, timeout: float = 600.0) -> dict:
    """Start both ranks, wait for both (bounded), return their reports and what was left in /dev/shm."""
    same = f"vllm_dist_{uuid.uuid4().hex}"
    ident = [same, same] if idents == "same" else [f"vllm_dist_{uuid.uuid4().hex}" for _ in range(2)]
    init = f"tcp://127.0.0.1:{free_port()}"
    before = set(os.listdir(SHM))
    procs = []
    for rank in range(2):
        env = dict(os.environ, VLLM_DIST_IDENT=ident[rank])
        procs.append(subprocess.Popen([sys.executable, "-m", "explainer.vllm_side.comm_pair", "--rank", str(rank),
                                       "--init", init, "--case", case], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + timeout
    reports = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()                                          # this rank, by its own pid
            out, err = p.communicate()
            reports.append({"rank": rank, "error": {"type": "TimeoutError", "message": f"rank {rank} did not finish "
                                                    f"within {timeout:.0f} s; ended by the launcher"}})
            continue
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        reports.append(json.loads(lines[-1]) if lines else
                       {"rank": rank, "error": {"type": "ProcessDied", "message": f"rank {rank} exited {p.returncode}"
                                                f" without a report: {' | '.join(err.splitlines()[-3:])}"}})
    left = sorted(set(os.listdir(SHM)) - before)
    for name in left:                                         # nothing left behind
        try:
            os.unlink(os.path.join(SHM, name))
        except OSError:
            pass
    return {"idents": ident, "case": case, "ranks": reports, "dev_shm_left_by_vllm": left}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explainer.vllm_side.comm_pair")
    ap.add_argument("--idents", choices=("same", "different"), default="same")
    ap.add_argument("--case", choices=CASES, default="post-40150")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--init")
    a = ap.parse_args(argv)
    if a.rank is None:
        print(json.dumps(run_pair(a.idents, a.case)), flush=True)
        return 0
    if a.case.startswith("bench"):                          # only rank processes load torch and vLLM
        from explainer.vllm_side.bench import bench_rank
        report = bench_rank(a.rank, a.init, quick=a.case == "bench-quick")
    else:
        from explainer.vllm_side.comm_rank import rank_report
        report = rank_report(a.rank, a.init, a.case)
    print(json.dumps(report), flush=True)
    os._exit(0)                                               # vLLM's groups hold threads; the report is out


if __name__ == "__main__":
    sys.exit(main())
