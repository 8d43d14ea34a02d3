"""``CommConfig``: the knobs of the CPU communicator, with the ``EXPLAINER_*`` environment variables they default
from (vLLM reads its own, such as ``VLLM_DIST_IDENT``, in ``vllm/envs.py``).

``EXPLAINER_DIST_IDENT`` (vLLM's ``VLLM_DIST_IDENT``), ``EXPLAINER_SHM_OPS`` (0/1), ``EXPLAINER_CPU_ARCH`` (override
the detected architecture), ``EXPLAINER_SHM_ALLOW_ARM`` (0/1), ``EXPLAINER_COMM_TIMEOUT`` (seconds),
``EXPLAINER_SHM_CHUNK_BYTES``. ``validate_env`` checks every one of them in the parent, before any rank starts.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import platform
import re
import socket
from dataclasses import dataclass

from explainer.distributed import phases
from explainer.distributed.device_communicators.shm import DEFAULT_CHUNK_BYTES, MIN_CHUNK_BYTES
from explainer.distributed.device_communicators.shm_segments import SHM_DIR
from explainer.errors import UsageError
from explainer.vocab import COMM_GATES

VLLM_ARCH_ALLOW_LIST = ("X86", "ARM", "S390X")    # vLLM 02bdead; older: X86 only, then X86+ARM
MACHINE_TO_ARCH = {"x86_64": "X86", "amd64": "X86", "i686": "X86", "i386": "X86", "aarch64": "ARM",
                    "arm64": "ARM", "ppc64le": "POWERPC", "ppc64": "POWERPC", "s390x": "S390X",
                    "riscv64": "RISCV"}


MAX_TIMEOUT = 86400.0                    # one day: a comm timeout beyond that is a typo, not a wish
MAX_CHUNK_BYTES = 1 << 30
_IDENT_OK = re.compile(r"[A-Za-z0-9._:-]{1,100}")


def _env_text(name: str, value: str | None = None) -> str | None:
    """The variable's text (``value`` when given), None when it is unset or empty."""
    value = os.environ.get(name) if value is None else value
    return None if value is None or value == "" else value


def _parsed(kind, text: str):
    """``kind(text)``, or None when the text is not such a number."""
    try:
        return kind(text)
    except (ValueError, OverflowError):
        return None


def _env_flag(name: str, default: bool, value: str | None = None) -> bool:
    value = _env_text(name, value)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name}={value!r}: accepted values are 1/0, true/false, yes/no, on/off")


def env_timeout(value: str | None = None, name: str = "EXPLAINER_COMM_TIMEOUT", default: float = 30.0) -> float:
    """The comm timeout in seconds: one deadline for rendezvous, group set-up, name agreement, transfers."""
    value = _env_text(name, value)
    if value is None:
        return default
    secs = _parsed(float, value)
    if secs is None or not (math.isfinite(secs) and 0 < secs <= MAX_TIMEOUT):
        raise UsageError(f"{name}={value!r}: accepted are seconds > 0 (finite, <= {MAX_TIMEOUT:.0f})")
    return secs


def env_chunk_bytes(value: str | None = None, name: str = "EXPLAINER_SHM_CHUNK_BYTES") -> int:
    value = _env_text(name, value)
    if value is None:
        return DEFAULT_CHUNK_BYTES
    n = _parsed(int, value)
    if n is None or not (MIN_CHUNK_BYTES <= n <= MAX_CHUNK_BYTES and n % 64 == 0):
        raise UsageError(f"{name}={value!r}: accepted are integers, multiples of 64, from {MIN_CHUNK_BYTES} "
                         f"to {MAX_CHUNK_BYTES}")
    return n


def validate_env(env=None) -> None:
    """Every EXPLAINER_ variable a rank reads, checked in the parent before any process starts
    (a bad value raises ``UsageError`` naming the variable and the accepted range)."""
    env = os.environ if env is None else env
    env_timeout(env.get("EXPLAINER_COMM_TIMEOUT") or "")
    env_chunk_bytes(env.get("EXPLAINER_SHM_CHUNK_BYTES") or "")
    for flag in ("EXPLAINER_SHM_OPS", "EXPLAINER_SHM_ALLOW_ARM"):
        _env_flag(flag, True, env.get(flag) or "")
    ident = env.get("EXPLAINER_DIST_IDENT")
    if ident and not _IDENT_OK.fullmatch(ident):
        raise UsageError(f"EXPLAINER_DIST_IDENT={ident!r}: accepted are 1..100 characters of A-Z a-z 0-9 . _ : -")
    arch = env.get("EXPLAINER_CPU_ARCH")
    if arch and not re.fullmatch(r"[A-Za-z0-9_]{1,20}", arch):
        raise UsageError(f"EXPLAINER_CPU_ARCH={arch!r}: accepted are names like X86, ARM, POWERPC, S390X")
    method = env.get("EXPLAINER_START_METHOD")
    if method:
        if method not in multiprocessing.get_all_start_methods():
            raise UsageError(f"EXPLAINER_START_METHOD={method!r}: accepted "
                             f"{', '.join(multiprocessing.get_all_start_methods())}")
    if env.get("EXPLAINER_FAULT_PHASE"):
        try:
            phases.parse_fault(env["EXPLAINER_FAULT_PHASE"])
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def get_cpu_architecture() -> str:
    """vLLM's ``CpuArchEnum`` name for this machine (``EXPLAINER_CPU_ARCH`` overrides it)."""
    forced = os.environ.get("EXPLAINER_CPU_ARCH")
    if forced:
        return forced.upper()
    return MACHINE_TO_ARCH.get(platform.machine().lower(), "UNKNOWN")


def shm_ops_available() -> bool:
    """The toy's ``hasattr(torch.ops._C, "init_shm_manager")``: /dev/shm exists and the host is x86-64,
    whose store order (TSO) the Python channel relies on; elsewhere it is "not built" (fall back)."""
    return os.path.isdir(SHM_DIR) and MACHINE_TO_ARCH.get(platform.machine().lower()) == "X86"


def default_ident() -> str:
    """The toy's per-node identity (vLLM's ``VLLM_DIST_IDENT``): a port. vLLM 0.32.0's CPU worker takes it from the
    node's own ``distributed_init_method``: the file name of a ``file://`` method (the multiproc executor's
    ``vllm_dist_<uuid>``), else the port of a ``tcp://`` one."""
    if os.environ.get("EXPLAINER_DIST_IDENT"):
        return os.environ["EXPLAINER_DIST_IDENT"]
    return f"{socket.gethostname()}:{os.environ.get('MASTER_PORT', '0')}"


@dataclass
class CommConfig:
    ident: str | None = None             # None: EXPLAINER_DIST_IDENT, else hostname:MASTER_PORT
    shm_ops_built: bool | None = None    # None: EXPLAINER_SHM_OPS, else shm_ops_available()
    cpu_arch: str | None = None          # None: detected (or EXPLAINER_CPU_ARCH)
    arch_allow_list: tuple[str, ...] = VLLM_ARCH_ALLOW_LIST
    allow_arm: bool | None = None        # the ARM entry of the allow-list; None: EXPLAINER_SHM_ALLOW_ARM, else on
    gate: str = "post-40150"
    timeout: float | None = None         # None: EXPLAINER_COMM_TIMEOUT, else 30 s
    chunk_bytes: int | None = None
    unlink_after_join: bool = True

    def resolved(self) -> "CommConfig":
        """A copy with every ``None`` filled from the environment, validated."""
        if self.gate not in COMM_GATES:
            raise ValueError(f"gate {self.gate!r}: accepted {', '.join(COMM_GATES)}")
        timeout = self.timeout if self.timeout is not None else env_timeout()
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
            raise UsageError(f"timeout {timeout}: accepted are seconds > 0 (finite, <= {MAX_TIMEOUT:.0f})")
        chunk = self.chunk_bytes or env_chunk_bytes()
        return dataclasses.replace(
            self, ident=self.ident if self.ident is not None else default_ident(),
            shm_ops_built=(self.shm_ops_built if self.shm_ops_built is not None
                           else _env_flag("EXPLAINER_SHM_OPS", shm_ops_available())),
            cpu_arch=(self.cpu_arch or get_cpu_architecture()).upper(),
            allow_arm=self.allow_arm if self.allow_arm is not None else _env_flag("EXPLAINER_SHM_ALLOW_ARM", True),
            timeout=timeout, chunk_bytes=chunk)

    def allowed_arches(self) -> tuple[str, ...]:
        return tuple(a for a in self.arch_allow_list if a != "ARM" or self.allow_arm is not False)
