"""One host's launcher: runs inside the host's namespaces, then becomes that host's ``torchrun``.

Started by ``explainer.distributed.hosts`` as
``ip netns exec NS unshare --mount --uts --propagation private -- python -m explainer.distributed.hosts_node ...``.
In order: mount a private tmpfs on ``/dev/shm`` (this host's segments only) and leave a marker file
there (``host0-marker``: the other host must never see it), set the hostname, pick
this node's own port and export it as ``EXPLAINER_DIST_IDENT``, then exec ``torchrun`` for this node.
That mirrors vLLM, where each node's executor picks its own ``distributed_init_method`` and the CPU worker derives
``VLLM_DIST_IDENT`` from it. In 0.32.0's multiproc executor that method is a ``vllm_dist_<uuid>`` file; a ``tcp://``
port in older versions, and here. Nothing here is told the ident: it comes from this host's own network
namespace, so two hosts pick theirs independently.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def get_open_port() -> int:
    """vLLM ``get_open_port``: let this host's kernel pick a free port on its loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """If the launcher dies (even by SIGKILL), this process gets SIGKILL too (kept across exec)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explainer.distributed.hosts_node")
    ap.add_argument("--node-rank", type=int, required=True)
    ap.add_argument("--nnodes", type=int, required=True)
    ap.add_argument("--hostname", required=True)
    ap.add_argument("--master-addr", required=True)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--shm-size", default="256m")
    ap.add_argument("--rank-module", default="explainer.distributed.hosts_rank")
    ap.add_argument("--ident", default=None, help="one ident for every host (one shared init method); default: "
                                                   "this host picks its own port")
    ap.add_argument("--torchrun", required=True, help="torchrun's path, or - for python -m torch.distributed.run")
    a = ap.parse_args(argv)
    die_with_parent()
    step = "mount a private tmpfs on /dev/shm"
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.shm_size},mode=1777", "tmpfs", "/dev/shm"],
                       check=True, capture_output=True, text=True, timeout=10)
        step = "mark this host's /dev/shm"                   # the peer host must never see this file
        with open(f"/dev/shm/{a.hostname}-marker", "w") as f:
            f.write(f"written by {a.hostname}'s launcher\n")
        step = "set the hostname"
        socket.sethostname(a.hostname)
        step = "give the host its own /etc/hosts (both hosts by name, as a cluster's hosts file)"
        subprocess.run(["mount", "--bind", os.path.join(a.workdir, "etc-hosts"), "/etc/hosts"],
                       check=True, capture_output=True, text=True, timeout=10)
        step = "give the host an empty /etc/resolv.conf (no name server outside the two hosts)"
        subprocess.run(["mount", "--bind", os.path.join(a.workdir, "resolv.conf"), "/etc/resolv.conf"],
                       check=True, capture_output=True, text=True, timeout=10)
    except subprocess.CalledProcessError as exc:
        why = " ".join(exc.stderr.split())                  # one line: the launcher reports the last one
        print(f"host step '{step}' failed on {a.hostname}: {why}", file=sys.stderr, flush=True)
        return 3
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"host step '{step}' failed on {a.hostname}: {exc}", file=sys.stderr, flush=True)
        return 3
    ident = a.ident or str(get_open_port())
    os.environ["EXPLAINER_DIST_IDENT"] = ident
    whose = "the shared init method's port" if a.ident else "this node's port"
    print(f"{a.hostname}: /dev/shm is a private tmpfs; {whose} (its vLLM ident) is {ident}", flush=True)
    cmd = ([a.torchrun] if a.torchrun != "-" else [sys.executable, "-m", "torch.distributed.run"]) + [
        "--nnodes", str(a.nnodes), "--nproc-per-node", "1", "--node-rank", str(a.node_rank),
        "--master-addr", a.master_addr, "--master-port", str(a.master_port), "--rdzv-backend", "static",
        "--max-restarts", "0", "--monitor-interval", "0.2",
        "-m", a.rank_module, a.workdir]
    os.execv(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
