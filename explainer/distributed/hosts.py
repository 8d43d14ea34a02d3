"""Two real hosts on one Linux machine, each running its own ``torchrun`` (``--backend hosts``).

A host here is what a second machine would be to vLLM, built from kernel namespaces (needs root, or
CAP_SYS_ADMIN + CAP_NET_ADMIN):

* its own network namespace (``ip netns add``) whose only links are ``lo`` and ``eth0``, one end of a
  veth pair joining the two hosts on a private /30 (``10.213.15.1`` and ``10.213.15.2``, which exist
  only inside these namespaces; there is no route anywhere else, and IPv6 is switched off);
* its own mount namespace with a private tmpfs on ``/dev/shm`` (``unshare --mount``), so the hosts
  cannot open each other's shared-memory segments, and its own hostname (``unshare --uts``);
* its own launcher: ``python -m explainer.distributed.hosts_node`` picks the node's own port (as each vLLM
  node's executor picks its own ``distributed_init_method``: in 0.32.0 a ``vllm_dist_<uuid>`` file, a port in
  older versions and here), exports it as ``EXPLAINER_DIST_IDENT`` (vLLM: ``VLLM_DIST_IDENT``) and execs
  ``torchrun --nnodes N --nproc-per-node 1 --node-rank k --master-addr 10.213.15.1 --rdzv-backend static``
  running ``explainer.distributed.hosts_rank``. gloo talks over ``eth0`` (``GLOO_SOCKET_IFNAME``).

``launch(fn, args=...)`` mirrors ``explainer.distributed.launch.launch``: it returns one
``RankResult`` per rank. Every set-up and teardown step has a timeout, and a failing step raises
``HostStepError`` naming the step and the reason. Teardown (ranks and agents by pid, namespaces,
links, the temp dir; the private ``/dev/shm`` goes with its mount namespace) runs on success, error,
a killed rank, SIGTERM and Ctrl-C; namespaces left by a launcher that was SIGKILLed are swept by the
next run (their names carry the launcher's pid).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from explainer.distributed.host_namespaces import (  # noqa: F401 - re-exported: the hosts API in one place
    ADDRESSES, IFNAME, MASTER_PORT, NS_PREFIX, SHM_SIZE, STEP_TIMEOUT, SUBNET, WORKDIR_PREFIX, Host, HostStepError,
    HostsUnavailable, check_available, create_hosts, destroy_hosts, last_line, netns_pids, our_namespaces,
    sweep_stale, torchrun_command, unavailable_reason)
from explainer.distributed.rank_watch import RankResult


@dataclass
class HostsRun:
    """What a launch did on the hosts (the ranks' own results are the ``RankResult`` list)."""
    hosts: list[Host]
    workdir: str
    commands: list[list[str]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    logs: dict[int, str] = field(default_factory=dict)
    facts: dict[int, dict] = field(default_factory=dict)   # per rank: hostname, ident, addresses, sockets
    seconds: float = 0.0


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """A SIGTERM to the launcher runs the same teardown as Ctrl-C (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def launch(fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None, *, timeout: float = 90.0,
           grace: float = 3.0, num_threads: int = 1, comm_timeout: float = 20.0,
           record: HostsRun | None = None, node: NodeProgram | None = None) -> list[RankResult]:
    """Run ``fn(*args, **kwargs)`` on rank 0 (host0) and rank 1 (host1) under torchrun; results by rank.

    ``node`` changes what each host runs (another interpreter and rank module, one ident for both hosts)."""
    if timeout <= 0:
        raise ValueError(f"timeout {timeout}: accepted are seconds > 0")
    check_available()
    t0 = time.monotonic()
    workdir = tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-")   # swept by pid if we are SIGKILLed
    hosts: list[Host] = []
    try:
        with _sigterm_as_interrupt():
            with open(os.path.join(workdir, "spec.pkl"), "wb") as f:
                pickle.dump({"sys_path": list(sys.path), "num_threads": num_threads,   # the call: unpickled
                             "call": pickle.dumps((fn, args, kwargs or {}))}, f)      # after sys.path is set
            hosts = create_hosts(2)
            with open(os.path.join(workdir, "etc-hosts"), "w") as f:
                f.write("127.0.0.1 localhost\n" + "".join(f"{h.address} {h.hostname}\n" for h in hosts))
            with open(os.path.join(workdir, "resolv.conf"), "w") as f:
                f.write("# the hosts resolve names from /etc/hosts only\n")
            run = record if record is not None else HostsRun(hosts, workdir)
            run.hosts, run.workdir = hosts, workdir
            run.steps.append(f"created {', '.join(h.netns for h in hosts)}; veth {IFNAME}<->{IFNAME} on {SUBNET}")
            for h in hosts:
                _start_host(h, len(hosts), workdir, comm_timeout, run, node or NodeProgram())
            results = _collect(hosts, workdir, t0, timeout, grace)
            for r in results:
                run.facts[r.rank] = _read_facts(workdir, r.rank)
            run.logs = {h.index: _read(h.log_path) for h in hosts}
            return results
    finally:
        try:
            destroy_hosts(hosts)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            if record is not None:
                record.seconds = time.monotonic() - t0


@dataclass
class NodeProgram:
    """What each host runs: the interpreter (its ``-m torch.distributed.run`` when not this one), the rank module
    torchrun starts, the ident (None: each host's launcher picks its own; a value: one for every host, as one
    shared init method gives), and extra environment variables."""
    python: str = sys.executable
    rank_module: str = "explainer.distributed.hosts_rank"
    ident: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def _start_host(h: Host, nnodes: int, workdir: str, comm_timeout: float, run: HostsRun, prog: NodeProgram) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("EXPLAINER_DIST_IDENT", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(GLOO_SOCKET_IFNAME=h.ifname, OMP_NUM_THREADS="1", EXPLAINER_COMM_TIMEOUT=str(comm_timeout),
               PYTHONUNBUFFERED="1", TMPDIR=workdir)   # torchrun's torchelastic_* logs go where teardown removes them
    env.update(prog.env)
    own = prog.python == sys.executable
    node = [prog.python, "-m", "explainer.distributed.hosts_node", "--node-rank", str(h.index),
            "--nnodes", str(nnodes), "--hostname", h.hostname, "--master-addr", ADDRESSES[0],
            "--master-port", str(MASTER_PORT), "--workdir", workdir, "--shm-size", SHM_SIZE,
            "--rank-module", prog.rank_module, *(["--ident", prog.ident] if prog.ident else []),
            "--torchrun", (torchrun_command() or ["-"])[0] if own and len(torchrun_command() or []) == 1 else "-"]
    argv = ["ip", "netns", "exec", h.netns, "unshare", "--mount", "--uts", "--propagation", "private", "--"] + node
    run.commands.append(argv)
    h.log_path = os.path.join(workdir, f"host{h.index}.log")
    with open(h.log_path, "wb") as log:
        try:
            h.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, start_new_session=True)
        except OSError as exc:
            raise HostStepError(f"start torchrun on {h.hostname}", str(exc)) from None


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _read_facts(workdir: str, rank: int) -> dict:
    try:
        with open(os.path.join(workdir, f"rank{rank}.facts.pkl"), "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return {}


def _collect(hosts: list[Host], workdir: str, t0: float, timeout: float, grace: float) -> list[RankResult]:
    """Wait for each rank's result file; a host whose torchrun exits without one lost its rank."""
    results: dict[int, RankResult] = {}
    pending, failed_at, first_failed = {h.index for h in hosts}, None, None
    while pending:
        now = time.monotonic()
        limit = t0 + timeout if failed_at is None else min(t0 + timeout, failed_at + grace)
        if now >= limit:
            break
        for r in sorted(pending):
            res = _result_of(workdir, r, hosts[r], now - t0)
            if res is None:
                continue
            results[r] = res
            pending.discard(r)
            if not res.ok and failed_at is None:
                failed_at, first_failed = time.monotonic(), r
        time.sleep(0.05)
    for r in sorted(pending):
        why = (f"still running {grace:.1f}s after rank {first_failed} failed" if first_failed is not None
               else f"did not finish within {timeout:.1f}s")
        pid = _pid_of(workdir, r)
        results[r] = RankResult(r, False, error_type="TimeoutError", pid=pid, ended_by_launcher=True,
                                error_message=f"rank {r} on host{r} (pid {pid}) {why}; ended by the launcher",
                                seconds=time.monotonic() - t0)
    for h in hosts:                                   # finished ranks exit, then their torchrun
        if h.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                h.proc.wait(min(1.0, grace))     # torchrun exits once its rank did
    for r, res in results.items():
        if res.exitcode is None and res.error_type not in ("ProcessDied", "TimeoutError"):
            res.exitcode = 0 if res.ok else 1         # it reported: hosts_rank then exits 0 (ok) or 1
        elif res.exitcode is None and res.error_type == "ProcessDied":
            res.exitcode = _exitcode_from_log(hosts[r].log_path)
    return [results[r] for r in range(len(hosts))]


def _pid_of(workdir: str, rank: int) -> int | None:
    text = _read(os.path.join(workdir, f"rank{rank}.pid")).strip()
    return int(text) if text.isdigit() else None


def _result_of(workdir: str, r: int, host: Host, elapsed: float) -> RankResult | None:
    path = os.path.join(workdir, f"rank{r}.result.pkl")
    if os.path.exists(path):
        try:
            with open(path, "rb") as f:
                msg = pickle.load(f)
        except (EOFError, pickle.UnpicklingError):
            msg = None                                # still being written (renamed into place when done)
        if msg is not None:
            res = RankResult(r, msg[0] == "ok", pid=_pid_of(workdir, r), seconds=elapsed)
            if res.ok:
                res.value = msg[1]
            else:
                res.error_type, res.error_message, res.traceback = msg[1], msg[2], msg[3]
            return res
    pid = _pid_of(workdir, r)
    rank_gone = pid is not None and not _pid_running(pid)
    host_gone = host.proc is not None and host.proc.poll() is not None
    if host_gone and pid is None and not os.path.exists(path):    # the host's launcher failed before torchrun ran
        return RankResult(r, False, seconds=elapsed, error_type="HostStepError",
                          error_message=f"host{r}'s launcher exited {host.proc.returncode} before its rank started: "
                                        f"{last_line(_read(host.log_path))}")
    if (rank_gone or host_gone) and not os.path.exists(path):     # died without reporting
        return RankResult(r, False, pid=pid, exitcode=_exitcode_from_log(host.log_path), seconds=elapsed,
                          error_type="ProcessDied",
                          error_message=f"rank {r} on host{r} (pid {pid}) exited before reporting"
                                        + (f" (torchrun on host{r} exited {host.proc.returncode})" if host_gone else ""))
    return None


def _pid_running(pid: int) -> bool:
    """Alive and not a zombie (a dead rank stays a zombie until its torchrun reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _exitcode_from_log(log_path: str) -> int | None:
    """torchrun's failure summary names the worker's exit code ("exitcode  : -9 (pid: ...)")."""
    m = re.search(r"exitcode\s*:\s*(-?\d+)", _read(log_path))
    return int(m.group(1)) if m else None


def describe(run: HostsRun) -> dict:
    """A JSON-able account of a hosts run: each host, what its rank saw there, the launcher's log lines."""
    hosts = []
    for h in run.hosts:
        facts = run.facts.get(h.index, {})
        hosts.append({
            "host": h.hostname, "netns": h.netns, "address": h.address, "ifname": h.ifname, "subnet": SUBNET,
            "rank": h.index, "ident": facts.get("ident"), "addresses": facts.get("addresses", []),
            "dev_shm": facts.get("dev_shm"), "gloo_ifname": facts.get("gloo_ifname"),
            "master_addr": facts.get("master_addr"), "tcp": facts.get("tcp", []),
            "pp_group": facts.get("pp_group", {}), "log_lines": facts.get("log_lines", []),
            "launcher_log": [ln for ln in run.logs.get(h.index, "").splitlines() if ln.strip()][-40:],
            "torchrun": ("torchrun --nnodes 2 --nproc-per-node 1 --node-rank "
                         f"{h.index} --master-addr {ADDRESSES[0]} --master-port {MASTER_PORT} "
                         "--rdzv-backend static -m explainer.distributed.hosts_rank WORKDIR"),
        })
    peers = {f"{a}" for a in ADDRESSES}
    seen = {s[k].rsplit(":", 1)[0] for h in hosts for s in h["tcp"]              # a listener has no remote
            for k in (("local",) if s["state"] == "LISTEN" else ("local", "remote"))}
    return {"subnet": SUBNET, "master_addr": ADDRESSES[0], "master_port": MASTER_PORT, "hosts": hosts,
            "tcp_addresses_seen": sorted(seen), "only_private_addresses": seen <= peers,
            "seconds": round(run.seconds, 2)}
