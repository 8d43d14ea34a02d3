"""The rank program torchrun starts on each host for the real vLLM: ``torchrun ... -m explainer.vllm_side.hosts_rank
WORKDIR`` (``.venv-vllm``'s torchrun, started by ``explainer.distributed.hosts.launch`` with a ``NodeProgram``).

The host's launcher exported its ident as ``EXPLAINER_DIST_IDENT`` (a port, as vLLM 0.32.0's CPU worker derives
``VLLM_DIST_IDENT`` from a ``tcp://`` init method: its port); this program hands it to vLLM as ``VLLM_DIST_IDENT``,
builds vLLM's PP group over torchrun's world (``env://``: gloo on the host's ``eth0``) and hands the dict over
(``comm_rank.rank_report``). It writes the same files as ``explainer.distributed.hosts_rank``: ``rankR.pid``,
``rankR.facts.pkl`` (what the host looked like, vLLM's choice and log lines) and ``rankR.result.pkl``
(``("ok", report)``: a vLLM error is part of the report). Then it removes what vLLM left in this host's /dev/shm
and exits.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys

from explainer.distributed.hosts_node import die_with_parent
from explainer.distributed.hosts_rank import tcp_sockets_of_this_process
from explainer.vllm_side.comm_rank import rank_report, shm_group_name


def dump(obj, path: str) -> None:
    with open(path + ".tmp", "wb") as f:
        pickle.dump(obj, f)
    os.replace(path + ".tmp", path)               # the launcher never reads a half-written file


def main(workdir: str) -> None:
    die_with_parent()
    rank = int(os.environ["RANK"])
    with open(os.path.join(workdir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    code = 1
    try:
        with open(os.path.join(workdir, "spec.pkl"), "rb") as f:
            spec = pickle.load(f)
        _, args, _ = pickle.loads(spec["call"])      # (None, (case,), {}): nothing of the main venv to import
        os.environ["VLLM_DIST_IDENT"] = os.environ["EXPLAINER_DIST_IDENT"]
        before = set(os.listdir("/dev/shm"))
        report = rank_report(rank, "env://", *args)
        facts = {"rank": rank, "hostname": socket.gethostname(), "ident": os.environ["VLLM_DIST_IDENT"],
                 "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"), "master_addr": os.environ.get("MASTER_ADDR"),
                 "dev_shm": sorted(os.listdir("/dev/shm")), "tcp": tcp_sockets_of_this_process(),
                 "pp_group": report.get("choice") or {}, "shm_group_name": shm_group_name("pp:0", (0, 1)),
                 "log_lines": report.get("log_lines", []), "pid": os.getpid()}
        report["dev_shm_left_by_vllm"] = sorted(set(os.listdir("/dev/shm")) - before)
        for name in report["dev_shm_left_by_vllm"]:
            os.unlink(os.path.join("/dev/shm", name))
        dump(facts, os.path.join(workdir, f"rank{rank}.facts.pkl"))
        dump(("ok", report), os.path.join(workdir, f"rank{rank}.result.pkl"))
        code = 0
    except BaseException as exc:                  # noqa: BLE001 - reported to the launcher
        dump(("err", type(exc).__name__, str(exc), ""), os.path.join(workdir, f"rank{rank}.result.pkl"))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1])
