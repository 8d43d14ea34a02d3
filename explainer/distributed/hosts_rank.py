"""The rank program torchrun starts on each host: ``torchrun ... -m explainer.distributed.hosts_rank WORKDIR``.

Reads ``WORKDIR/spec.pkl`` (the function and its arguments, written by ``hosts.launch``), joins the
gloo world from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gloo binds to
``GLOO_SOCKET_IFNAME``), runs the function, and writes ``rankR.result.pkl`` plus ``rankR.facts.pkl``:
what this host looked like to the rank (hostname, ident, addresses, its /dev/shm, its TCP sockets, the
communicator's choice and log lines). Then it exits with ``os._exit`` after closing its groups.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import subprocess
import sys
import traceback

import torch

from explainer.distributed.hosts_node import die_with_parent
from explainer.distributed.rank_process import cleanup_rank   # segments, groups, process group: the same on a host
from explainer.distributed.parallel_state import get_pp_group, init_distributed_environment


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def _dump(obj, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f)
    os.replace(tmp, path)                         # the launcher never reads a half-written file


def tcp_sockets_of_this_process() -> list[dict]:
    """This process's TCP sockets from /proc/net/tcp (this host's namespace), matched by socket inode."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    states = {"01": "ESTABLISHED", "0A": "LISTEN"}
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[9] in inodes and cols[3] in states:
                out.append({"local": _addr(cols[1]), "remote": _addr(cols[2]), "state": states[cols[3]]})
    return out


def _addr(hexaddr: str) -> str:
    ip, port = hexaddr.split(":")
    if len(ip) == 8:
        host = socket.inet_ntop(socket.AF_INET, bytes.fromhex(ip)[::-1])
    else:
        raw = bytes.fromhex(ip)
        host = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return f"{host.removeprefix('::ffff:')}:{int(port, 16)}"     # IPv4 on a dual-stack socket


def _addresses() -> list[str]:
    try:
        out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [f"{c[1]} {c[3]}" for c in (ln.split() for ln in out.splitlines()) if len(c) > 3]


def _pp_choice() -> dict:
    """What the PP group of this rank chose, if the function built one (read before it is destroyed)."""
    try:
        pp = get_pp_group()
    except RuntimeError:                          # the function built no PP group
        return {}
    if pp.device_communicator is None:
        return {}
    d = pp.device_communicator.decision
    return {"backend": d.backend, "path": d.path(), "gate": pp.gate,
            "use_cpu_custom_send_recv": pp.use_cpu_custom_send_recv, "group_name": d.group_name,
            "names_seen": d.names_seen}


def main(workdir: str) -> None:
    die_with_parent()
    rank = int(os.environ["RANK"])
    with open(os.path.join(workdir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    lines = _Lines()
    logging.getLogger("explainer").addHandler(lines)
    logging.getLogger("explainer").setLevel(logging.INFO)
    code, msg, facts = 1, None, {}
    try:
        with open(os.path.join(workdir, "spec.pkl"), "rb") as f:
            spec = pickle.load(f)
        for p in reversed(spec["sys_path"]):      # as multiprocessing's spawn: the parent's import path
            if p not in sys.path:
                sys.path.insert(0, p)
        torch.set_num_threads(spec["num_threads"])
        init_distributed_environment()
        try:
            fn, args, kwargs = pickle.loads(spec["call"])
            msg, code = ("ok", fn(*args, **kwargs)), 0
        finally:
            facts = {"rank": rank, "hostname": socket.gethostname(), "ident": os.environ.get("EXPLAINER_DIST_IDENT"),
                     "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"), "master_addr": os.environ.get("MASTER_ADDR"),
                     "addresses": _addresses(), "dev_shm": sorted(os.listdir("/dev/shm")),
                     "tcp": tcp_sockets_of_this_process(), "pp_group": _pp_choice(), "pid": os.getpid()}
    except BaseException as exc:                  # noqa: BLE001 - reported to the launcher
        msg = ("err", type(exc).__name__, str(exc), traceback.format_exc())
    facts["log_lines"] = list(lines.lines)
    try:
        _dump(facts, os.path.join(workdir, f"rank{rank}.facts.pkl"))
        try:
            _dump(msg, os.path.join(workdir, f"rank{rank}.result.pkl"))
        except Exception as exc:                  # noqa: BLE001 - e.g. an unpicklable return value
            _dump(("err", type(exc).__name__, f"could not return the rank's result: {exc}", ""),
                  os.path.join(workdir, f"rank{rank}.result.pkl"))
            code = 1
    finally:
        cleanup_rank()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)




if __name__ == "__main__":
    main(sys.argv[1])
