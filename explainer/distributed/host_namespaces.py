"""The hosts themselves: two network namespaces joined by a veth pair, created and removed by pid-named steps.

Used by ``explainer.distributed.hosts`` (the launcher). Each host: a network namespace whose only links
are ``lo`` and ``eth0`` (one end of the veth pair, on the private /30 ``10.213.15.0/30``; IPv6 off, no
other route). Every step runs ``ip`` with a timeout and raises ``HostStepError(step, why)`` when it fails;
``create_hosts`` removes what it made before raising. ``destroy_hosts`` ends every process inside the
namespaces by pid (SIGTERM, then SIGKILL), then deletes the namespaces, which removes the veth ends.
Namespace names and the launcher's work folder (``/tmp/explainer-hosts-<pid>-*``) carry the launcher's pid,
so ``sweep_stale`` can remove what a SIGKILLed launcher left.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from explainer.distributed.procs import pid_alive
from explainer.errors import UsageError

SUBNET = "10.213.15.0/30"
ADDRESSES = ("10.213.15.1", "10.213.15.2")
PREFIX_LEN = 30
IFNAME = "eth0"                      # each host's end of the veth pair, as on a real machine
MASTER_PORT = 29500                  # torchrun's default; free by construction in a fresh namespace
NS_PREFIX = "explainer-"             # namespace names: explainer-<launcher pid>-<run>-host<k>
WORKDIR_PREFIX = "explainer-hosts-"  # the launcher's work folder in the temp dir: explainer-hosts-<pid>-<random>
STEP_TIMEOUT = 10.0
SHM_SIZE = "256m"
_RUNS = itertools.count()
_CAP_SYS_ADMIN, _CAP_NET_ADMIN = 21, 12


class HostsUnavailable(UsageError):
    """This machine or user cannot create hosts (one line: why)."""


class HostStepError(RuntimeError):
    """A set-up or teardown step failed: ``step`` says which, the message says why."""

    def __init__(self, step: str, why: str):
        super().__init__(f"host step '{step}' failed: {why}")
        self.step, self.why = step, why


def unavailable_reason() -> str | None:
    """None when hosts can be created here, else one line saying why not."""
    if not sys.platform.startswith("linux"):
        return f"--backend hosts needs Linux network and mount namespaces; this is {sys.platform}"
    caps = _effective_caps()
    missing = [n for n, bit in (("CAP_SYS_ADMIN", _CAP_SYS_ADMIN), ("CAP_NET_ADMIN", _CAP_NET_ADMIN))
               if caps is not None and not caps >> bit & 1]
    if missing:
        who = "not root" if os.geteuid() != 0 else "root without them"
        return f"--backend hosts needs {' and '.join(missing)} to create namespaces ({who}); run as root"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            pkg = "iproute2" if tool == "ip" else "util-linux"
            return f"--backend hosts needs the '{tool}' command (Debian package {pkg}); it is not on PATH"
    if torchrun_command() is None:
        return "--backend hosts needs torchrun (torch.distributed.run); it is not importable"
    try:
        probe = subprocess.run(["unshare", "--net", "--mount", "--uts", "true"], capture_output=True,
                               text=True, timeout=STEP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"--backend hosts: probing namespaces failed ({exc})"
    if probe.returncode != 0:
        return f"--backend hosts: this kernel refuses new namespaces ({last_line(probe.stderr)})"
    return None


def check_available() -> None:
    reason = unavailable_reason()
    if reason:
        raise HostsUnavailable(reason)


def _effective_caps() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return None


def torchrun_command() -> list[str] | None:
    script = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "torch.distributed.run"] if importlib.util.find_spec("torch.distributed.run") else None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no message"


@dataclass
class Host:
    index: int
    netns: str
    address: str
    hostname: str
    ifname: str = IFNAME
    proc: subprocess.Popen | None = None
    log_path: str = ""


def _run_step(step: str, argv: list[str], timeout: float = STEP_TIMEOUT) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HostStepError(step, f"'{' '.join(argv)}' did not finish within {timeout:.0f}s") from None
    except OSError as exc:
        raise HostStepError(step, f"'{argv[0]}' could not start: {exc}") from None
    if out.returncode != 0:
        raise HostStepError(step, f"'{' '.join(argv)}' exited {out.returncode}: {last_line(out.stderr)}")
    return out.stdout


def our_namespaces(pid: int | None = None) -> list[str]:
    """Network namespaces created by explainer launchers (of ``pid`` if given)."""
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=STEP_TIMEOUT).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    want = f"{NS_PREFIX}{pid}-" if pid is not None else NS_PREFIX
    return [n for n in names if n.startswith(want)]


def sweep_stale() -> list[str]:
    """Delete namespaces whose launcher pid is gone (it was SIGKILLed before its teardown ran), and that
    launcher's work folder; returns the namespaces."""
    swept = []
    for ns in our_namespaces():
        m = re.match(rf"{NS_PREFIX}(\d+)-", ns)
        if m and not pid_alive(int(m.group(1))):
            _kill_netns_pids(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=STEP_TIMEOUT)
            swept.append(ns)
    tmp, uid = tempfile.gettempdir(), os.getuid()
    for name in os.listdir(tmp):
        m = re.fullmatch(rf"{WORKDIR_PREFIX}(\d+)-[A-Za-z0-9_]+", name)
        path = os.path.join(tmp, name)
        if m and not pid_alive(int(m.group(1))) and os.path.isdir(path) and not os.path.islink(path) \
                and os.lstat(path).st_uid == uid:
            shutil.rmtree(path, ignore_errors=True)
    return swept


def netns_pids(ns: str) -> list[int]:
    try:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=STEP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def _kill_netns_pids(ns: str, term_wait: float = 3.0) -> list[int]:
    """End every process inside our namespace by pid: SIGTERM, then SIGKILL; return survivors."""
    for sig, wait_s in ((signal.SIGTERM, term_wait), (signal.SIGKILL, 5.0)):
        pids = netns_pids(ns)
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and netns_pids(ns):
            time.sleep(0.05)
    return netns_pids(ns)


def create_hosts(n: int = 2) -> list[Host]:
    """Namespaces, veth, addresses; on a failing step, what was made is removed before raising."""
    if n != 2:
        raise UsageError(f"hosts {n}: accepted is 2 (one veth pair)")
    sweep_stale()
    run = next(_RUNS)
    hosts = [Host(k, f"{NS_PREFIX}{os.getpid()}-{run}-host{k}", ADDRESSES[k], f"host{k}") for k in range(n)]
    try:
        for h in hosts:
            _run_step(f"create network namespace {h.netns}", ["ip", "netns", "add", h.netns])
        _run_step("create the veth link host0:eth0 <-> host1:eth0",
                  ["ip", "link", "add", IFNAME, "netns", hosts[0].netns, "type", "veth",
                   "peer", IFNAME, "netns", hosts[1].netns])
        for h in hosts:
            ex = ["ip", "netns", "exec", h.netns]
            _run_step(f"switch IPv6 off on {h.hostname}",
                      ex + ["sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && "
                                        "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"])
            _run_step(f"address {h.address}/{PREFIX_LEN} on {h.hostname}:{IFNAME}",
                      ["ip", "-n", h.netns, "addr", "add", f"{h.address}/{PREFIX_LEN}", "dev", IFNAME])
            _run_step(f"bring up lo on {h.hostname}", ["ip", "-n", h.netns, "link", "set", "lo", "up"])
            _run_step(f"bring up {IFNAME} on {h.hostname}", ["ip", "-n", h.netns, "link", "set", IFNAME, "up"])
    except BaseException:
        destroy_hosts(hosts, raise_errors=False)
        raise
    return hosts


def destroy_hosts(hosts: list[Host], raise_errors: bool = True) -> list[str]:
    """End every process in the hosts by pid, then delete the namespaces (which removes the veth)."""
    problems = []
    for h in hosts:
        if h.proc is not None and h.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                h.proc.terminate()
    for h in hosts:
        if h.netns not in our_namespaces():
            continue
        survivors = _kill_netns_pids(h.netns)
        if survivors:
            problems.append(f"end the processes of {h.hostname}: pids {survivors} survived SIGKILL")
            continue
        try:
            _run_step(f"delete network namespace {h.netns}", ["ip", "netns", "del", h.netns])
        except HostStepError as exc:
            problems.append(str(exc))
    for h in hosts:
        if h.proc is not None:
            try:
                h.proc.wait(STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                h.proc.kill()
                problems.append(f"host step 'wait for {h.hostname}'s launcher' failed: pid {h.proc.pid} ignored SIGTERM")
    if problems and raise_errors:
        raise HostStepError("teardown", "; ".join(problems))
    return problems
