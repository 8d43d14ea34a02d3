"""What one learner's server (JupyterLab, its kernels, their checks) may use: memory and processes.

Where the machine lets the hub make control groups, each learner gets one, and everything their server starts
stays in it: ``memory`` bytes in all (past it the kernel's OOM killer ends a process of that learner, the
largest: usually the kernel that ate the memory) and ``processes`` tasks. cgroup v2 (``memory.max``,
``pids.max``) where its memory and pids controllers can be used, else cgroup v1's memory and pids hierarchies
(``memory.limit_in_bytes``, ``pids.max``), else none. Always, as resource limits of the server process
(inherited by everything it starts): ``RLIMIT_NPROC`` = ``processes`` (Linux counts it per account, so it is per
learner: a fork bomb stops there) and, without a memory cgroup, ``RLIMIT_AS`` = ``memory`` per process (weaker:
one process each). ``describe()`` says which, and ``hub serve`` prints it.

The groups live in ``explainer-hub-<account prefix>/<account>`` under the hub's own group in each hierarchy;
the spawner puts the server's process in it before it becomes the learner (``attach`` in ``preexec``), and the
hub removes them when it stops.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

MOUNTS = "/proc/self/mounts"


def _own_group(hierarchy: str) -> str:
    """This process's cgroup path in a v1 hierarchy (``memory``) or v2 (``""``), from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers.split(",") == ([hierarchy] if hierarchy else [""]):
            return path.lstrip("/")
    return ""


def _mounts() -> list[tuple[str, str, str]]:
    out = []
    for line in Path(MOUNTS).read_text().splitlines():
        parts = line.split()
        out.append((parts[1], parts[2], parts[3]))           # mount point, type, options
    return out


def _writable_dir(base: Path, name: str) -> Path | None:
    path = base / name
    try:
        path.mkdir(exist_ok=True)
        return path
    except OSError:
        return None


def group_for(account_prefix: str) -> str:
    """The hub's control group (in each hierarchy): one per account prefix, so two hubs never share one."""
    return f"explainer-hub-{account_prefix.rstrip('-')}"


class Limits:
    def __init__(self, memory: int, processes: int, group: str):
        self.memory, self.processes, self.group = memory, processes, group
        self.kind, self.bases = "rlimits", {}
        for finder in (self._v2, self._v1):
            if finder():
                break

    def _v2(self) -> bool:
        for point, kind, _ in _mounts():
            if kind != "cgroup2":
                continue
            root = Path(point) / _own_group("")
            try:
                have = set((root / "cgroup.controllers").read_text().split())
                if not {"memory", "pids"} <= have:
                    return False
                (root / "cgroup.subtree_control").write_text("+memory +pids")
            except OSError:
                return False
            base = _writable_dir(root, self.group)
            if base is None:
                return False
            try:
                (base / "cgroup.subtree_control").write_text("+memory +pids")
            except OSError:
                return False
            self.kind, self.bases = "cgroup v2", {"": base}
            return True
        return False

    def _v1(self) -> bool:
        bases = {}
        for point, kind, options in _mounts():
            for controller in ("memory", "pids"):
                if kind == "cgroup" and controller in options.split(","):
                    base = _writable_dir(Path(point) / _own_group(controller), self.group)
                    if base is not None:
                        bases[controller] = base
        if set(bases) != {"memory", "pids"}:
            return False
        self.kind, self.bases = "cgroup v1", bases
        return True

    def describe(self) -> str:
        mem = f"{self.memory / (1 << 30):.3g} GiB"
        if self.kind == "rlimits":
            return (f"resource limits (no writable cgroup here): {mem} of address space per process, "
                    f"{self.processes} processes per learner")
        return f"{self.kind}: {mem} of memory and {self.processes} processes per learner"

    def prepare(self, account: str) -> list[Path]:
        """The learner's groups, made and limited; returns the ``cgroup.procs`` files ``attach`` writes."""
        procs = []
        for controller, base in self.bases.items():
            group = base / account
            group.mkdir(exist_ok=True)
            if controller == "":
                (group / "memory.max").write_text(str(self.memory))
                (group / "memory.swap.max").write_text("0") if (group / "memory.swap.max").exists() else None
                (group / "pids.max").write_text(str(self.processes))
            elif controller == "memory":
                (group / "memory.limit_in_bytes").write_text(str(self.memory))
            else:
                (group / "pids.max").write_text(str(self.processes))
            procs.append(group / "cgroup.procs")
        return procs

    def preexec(self, procs: list[Path]):
        """What the server's process does before it becomes the learner: join the groups, set the rlimits."""
        memory, processes, with_memory_group = self.memory, self.processes, self.kind != "rlimits"

        def apply():
            for path in procs:
                with open(path, "w") as f:
                    f.write("0")                          # "0": the writing process itself
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
            if not with_memory_group:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        return apply

    def usage(self, account: str, peak: bool = False) -> int | None:
        """The learner's memory in use now (``peak``: the most since the group was made), in bytes, where a memory
        group counts it."""
        names = (("", "memory.peak"), ("memory", "memory.max_usage_in_bytes")) if peak else (
            ("", "memory.current"), ("memory", "memory.usage_in_bytes"))
        for controller, name in names:
            if controller in self.bases:
                try:
                    return int((self.bases[controller] / account / name).read_text())
                except (OSError, ValueError):
                    return None
        return None

    def remove(self) -> None:
        """Remove every learner's group and the hub's (those still holding a process stay)."""
        for base in self.bases.values():
            for group in [p for p in base.iterdir() if p.is_dir()] + [base]:
                try:
                    os.rmdir(group)
                except OSError:
                    pass
