"""``CpuCommunicator``: shared memory when every rank of the group can use it, torch.distributed otherwise.

Mirrors vLLM ``vllm/distributed/device_communicators/cpu_communicator.py`` (post-#40150 at
``02bdead``). The backend starts as the ``torch.distributed`` module and becomes ``_CPUSHMDistributed``
only if all of these hold, evaluated in this order with Python's short-circuit ``and``:

  a. the CPU architecture is in the allow-list       (vLLM: X86, ARM, S390X)
  b. the shared-memory ops are built                 (vLLM: ``hasattr(torch.ops._C, "init_shm_manager")``)
  c. the group's unique name starts with tp or pp    (vLLM: ``unique_name.startswith(("tp", "pp"))``)
  d. every rank computed the same SHM group name     (vLLM: ``all_gather_object``; here a pickle-free byte gather)

``dist_module`` is duck-typed: only the SHM shim has ``send_tensor_dict``/``recv_tensor_dict``. Before
#40150 the communicator forwarded to it unconditionally, so after a fallback the call reached the
``torch.distributed`` module and raised ``AttributeError`` (issue #37933). #40150 added
``supports_tensor_dict`` and the ``NotImplementedError`` guards. Both forms are selectable by name.

Knobs (``CommConfig``, defaults from the environment): ``EXPLAINER_DIST_IDENT`` (vLLM's
``VLLM_DIST_IDENT``), ``EXPLAINER_SHM_OPS`` (0/1), ``EXPLAINER_CPU_ARCH`` (override the detected
architecture), ``EXPLAINER_SHM_ALLOW_ARM`` (0/1), ``EXPLAINER_COMM_TIMEOUT`` (seconds),
``EXPLAINER_SHM_CHUNK_BYTES``. ``CpuCommunicator`` before #40150 had no ``supports_tensor_dict``;
here it is set in both gate modes so a notebook can show it, and the pre-#40150 gate ignores it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import platform
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed

from explainer.distributed import phases
from explainer.distributed.device_communicators import shm
from explainer.distributed.errors import PeerTimeoutError
from explainer.errors import UsageError

logger = logging.getLogger(__name__)

GATES = ("pre-40150", "post-40150")
FALLBACK_LOG = ("CPU SHM communicator disabled for group %s: ranks do not share the same SHM group name, "
                "falling back to torch.distributed.")
NO_DICT_FASTPATH = "CpuCommunicator does not support tensor dict fastpath with torch.distributed backend."
ONLY_TENSORS = "CpuCommunicator only supports sending tensors."
VLLM_ARCH_ALLOW_LIST = ("X86", "ARM", "S390X")    # vLLM 02bdead; older: X86 only, then X86+ARM
MACHINE_TO_ARCH = {"x86_64": "X86", "amd64": "X86", "i686": "X86", "i386": "X86", "aarch64": "ARM",
                    "arm64": "ARM", "ppc64le": "POWERPC", "ppc64": "POWERPC", "s390x": "S390X",
                    "riscv64": "RISCV"}


MAX_TIMEOUT = 86400.0                    # one day: a comm timeout beyond that is a typo, not a wish
MAX_CHUNK_BYTES = 1 << 30
_IDENT_OK = re.compile(r"[A-Za-z0-9._:-]{1,100}")


def _env_flag(name: str, default: bool, value: str | None = None) -> bool:
    value = os.environ.get(name) if value is None else value
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name}={value!r}: accepted values are 1/0, true/false, yes/no, on/off")


def env_number(name: str, default: float, kind=float, minimum: float = 0) -> float:
    """A numeric environment variable; a bad value names the variable and the accepted range."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = kind(value)
    except (ValueError, OverflowError):
        number = None
    if number is None or not math.isfinite(number) or number <= minimum:
        raise UsageError(f"{name}={value!r}: accepted are finite {kind.__name__} values > {minimum}")
    return number


def env_timeout(value: str | None = None, name: str = "EXPLAINER_COMM_TIMEOUT", default: float = 30.0) -> float:
    """The comm timeout in seconds: one deadline for rendezvous, group set-up, name agreement, transfers."""
    value = os.environ.get(name) if value is None else value
    if value is None or value == "":
        return default
    try:
        secs = float(value)
    except ValueError:
        secs = float("nan")
    if not (math.isfinite(secs) and 0 < secs <= MAX_TIMEOUT):
        raise UsageError(f"{name}={value!r}: accepted are seconds > 0 (finite, <= {MAX_TIMEOUT:.0f})")
    return secs


def env_chunk_bytes(value: str | None = None, name: str = "EXPLAINER_SHM_CHUNK_BYTES") -> int:
    value = os.environ.get(name) if value is None else value
    if value is None or value == "":
        return shm.DEFAULT_CHUNK_BYTES
    try:
        n = int(value)
    except ValueError:
        n = -1
    if not (shm.MIN_CHUNK_BYTES <= n <= MAX_CHUNK_BYTES and n % 64 == 0):
        raise UsageError(f"{name}={value!r}: accepted are integers, multiples of 64, from {shm.MIN_CHUNK_BYTES} "
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
        import multiprocessing
        if method not in multiprocessing.get_all_start_methods():
            raise UsageError(f"EXPLAINER_START_METHOD={method!r}: accepted "
                             f"{', '.join(multiprocessing.get_all_start_methods())}")
    if env.get("EXPLAINER_FAULT_PHASE"):
        from explainer.distributed.phases import parse_fault
        try:
            parse_fault(env["EXPLAINER_FAULT_PHASE"])
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
    return os.path.isdir(shm.SHM_DIR) and MACHINE_TO_ARCH.get(platform.machine().lower()) == "X86"


def default_ident() -> str:
    """Per-node identity. vLLM uses the port of the node's own ``distributed_init_method``."""
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
        if self.gate not in GATES:
            raise ValueError(f"gate {self.gate!r}: accepted {', '.join(GATES)}")
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


@dataclass
class Condition:
    name: str
    expression: str                      # the vLLM expression it stands for
    value: bool | None                   # None: not evaluated (short-circuited)
    detail: str = ""


@dataclass
class BackendDecision:
    """Every condition of the backend choice with its value, so a notebook can draw the path taken."""
    unique_name: str
    rank_in_group: int
    global_ranks: list[int]
    conditions: list[Condition] = field(default_factory=list)
    backend: str = "torch.distributed"   # or "shm"
    supports_tensor_dict: bool = False
    group_name: str | None = None        # this rank's SHM group name (computed when a-c hold)
    names_seen: list[str] | None = None  # the all_gather_object result
    log_lines: list[str] = field(default_factory=list)
    gate: str = "post-40150"

    def path(self) -> str:
        marks = {True: "yes", False: "NO", None: "skipped"}
        steps = [f"{c.name}={marks[c.value]}" for c in self.conditions]
        return " -> ".join(steps + [self.backend])

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"path": self.path()}


class _CPUSHMDistributed:
    """The SHM shim standing in for ``torch.distributed`` (vLLM's class of the same name)."""

    def __init__(self, communicator: "CpuCommunicator"):
        self.communicator = communicator
        self.group_name = self.make_group_name(communicator)
        cfg, group = communicator.config, communicator.device_group
        ranks = communicator.ranks
        # vLLM also all-reduces torch.get_num_threads() (MIN) for its per-thread buffers; one thread here.
        phases.enter("shm-setup")                        # create, exchange names, join, barrier
        self.channel = _setup_bounded("shm-setup", cfg.timeout, shm.ShmGroup,
            self.group_name, communicator.rank_in_group, communicator.world_size,
            exchange=lambda name: _all_gather_str(name, group),
            barrier=lambda: torch.distributed.barrier(group=group),
            chunk_bytes=cfg.chunk_bytes, timeout=cfg.timeout, unlink_after_join=cfg.unlink_after_join,
            peer_labels=[f"group rank {i} (global rank {r})" for i, r in enumerate(ranks)])

    @staticmethod
    def make_group_name(communicator: "CpuCommunicator") -> str:
        ranks = "-".join(str(r) for r in communicator.ranks)
        return f"{communicator.config.ident}-{communicator.unique_name}-[{ranks}]-cpushm"

    def all_reduce(self, tensor, op=torch.distributed.ReduceOp.SUM, group=None):
        # vLLM: torch.ops._C.shm_allreduce; the toy keeps collectives on gloo (PP needs only p2p).
        return torch.distributed.all_reduce(tensor, op=op, group=self.communicator.device_group)

    def send_tensor_dict(self, tensor_dict: dict, dst: int) -> None:
        try:
            self.channel.send(tensor_dict.items(), dst)   # checks every value before anything is sent
        except shm.ShmPayloadError:
            for key, value in tensor_dict.items():        # vLLM's message when a value is not a tensor
                if not isinstance(value, torch.Tensor):
                    raise shm.ShmPayloadError(f"{ONLY_TENSORS} Key {key!r} holds a {type(value).__name__}; "
                                              f"accepted: contiguous CPU torch.Tensor values only.") from None
            raise

    def recv_tensor_dict(self, src: int) -> dict:
        return self.channel.recv(src)

    def close(self) -> None:
        self.channel.close()


_TORCH_COMM_FAILURE = re.compile(r"gloo|[Tt]imed out|[Tt]imeout|Connection|[Cc]losed|reset by peer|[Ss]ocket|[Ss]tore")


def _setup_bounded(phase: str, secs: float, fn, *args, **kwargs):
    """One set-up step under the comm timeout: torch's timeout or a peer's disappearance becomes our
    ``PeerTimeoutError`` naming this rank and the phase (the launcher adds which peer failed)."""
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, TimeoutError, ConnectionError) as exc:
        text = (str(exc).splitlines() or [""])[0][:300]
        if isinstance(exc, (shm.ShmPayloadError, shm.ShmCapacityError, PeerTimeoutError)) or not (
                type(exc).__module__.startswith("torch") or _TORCH_COMM_FAILURE.search(str(exc))):
            raise                                         # e.g. "open shm in SHMManager failed" is the story
        raise PeerTimeoutError(f"rank {os.environ.get('RANK', '?')} (pid {os.getpid()}) in phase {phase}: a peer "
                               f"did not complete it within the comm timeout {secs:g}s or left "
                               f"({type(exc).__name__}: {text})") from exc


def _all_gather_str(value: str, group) -> list[str]:
    """All-gather a short string as fixed-size uint8 tensors (no pickle)."""
    data = value.encode()
    if len(data) > 1024:
        raise ValueError(f"string of {len(data)} bytes: accepted up to 1024")
    buf = torch.zeros(1026, dtype=torch.uint8)             # 2-byte length, then the bytes
    buf[:2 + len(data)] = torch.frombuffer(bytearray(len(data).to_bytes(2, "little") + data), dtype=torch.uint8)
    outs = [torch.zeros_like(buf) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(outs, buf, group=group)
    return [(b := o.numpy().tobytes())[2:2 + int.from_bytes(b[:2], "little")].decode() for o in outs]


class CpuCommunicator:
    """vLLM's ``CpuCommunicator(cpu_group, device, device_group, unique_name)`` plus a ``config``."""

    def __init__(self, cpu_group, device=None, device_group=None, unique_name: str = "", *,
                 config: CommConfig | None = None):
        self.config = cfg = (config or CommConfig()).resolved()
        self.cpu_group, self.device_group = cpu_group, device_group or cpu_group
        self.device = device or torch.device("cpu")
        self.unique_name = unique_name
        self.rank = torch.distributed.get_rank()
        self.ranks = torch.distributed.get_process_group_ranks(cpu_group)
        self.world_size, self.rank_in_group = len(self.ranks), self.ranks.index(self.rank)
        self.gate = cfg.gate
        self.dist_module = torch.distributed
        d = self.decision = BackendDecision(unique_name, self.rank_in_group, list(self.ranks), gate=cfg.gate)
        allowed = cfg.allowed_arches()
        checks = [
            ("arch_allowed", "get_cpu_architecture() in allow_list", lambda: cfg.cpu_arch in allowed,
             lambda: f"{cfg.cpu_arch} in {{{', '.join(allowed)}}}"),
            ("shm_ops_built", 'hasattr(torch.ops._C, "init_shm_manager")', lambda: bool(cfg.shm_ops_built),
             lambda: f"shm_ops_built={cfg.shm_ops_built}"),
            ("group_kind_tp_pp", 'unique_name.startswith(("tp", "pp"))',
             lambda: unique_name.startswith(("tp", "pp")), lambda: f"unique_name={unique_name!r}"),
            ("names_agree", "len(set(all_gather_object(make_group_name()))) == 1",
             self._all_group_ranks_share_shm_group_name, lambda: f"names={d.names_seen}"),
        ]
        take_shm = True
        for name, expr, test, detail in checks:          # short-circuit exactly like vLLM's `and`
            if not take_shm:
                d.conditions.append(Condition(name, expr, None, "not evaluated"))
                continue
            value = bool(test())
            d.conditions.append(Condition(name, expr, value, detail()))
            take_shm = value
        if take_shm:
            self.dist_module = _CPUSHMDistributed(self)
            d.backend = "shm"
        elif unique_name.startswith(("tp", "pp")):        # vLLM's elif checks only the prefix
            logger.info(FALLBACK_LOG, unique_name)
            d.log_lines.append("INFO " + FALLBACK_LOG % unique_name)
        # Added by #40150: the single source of truth parallel_state asks.
        self.supports_tensor_dict = isinstance(self.dist_module, _CPUSHMDistributed)
        d.supports_tensor_dict = self.supports_tensor_dict

    def _all_group_ranks_share_shm_group_name(self) -> bool:
        """Collective: safe because conditions a-c are equal on every rank of the group."""
        self.decision.group_name = local = _CPUSHMDistributed.make_group_name(self)
        # vLLM: all_gather_object (pickle); here the same gather as length-prefixed bytes, never unpickled
        phases.enter("name-agreement")
        names = _setup_bounded("name-agreement", self.config.timeout, _all_gather_str, local, self.device_group)
        self.decision.names_seen = list(names)
        return len(set(names)) == 1

    @property
    def backend(self) -> str:
        return self.decision.backend

    def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
        self.dist_module.all_reduce(input_, group=self.device_group)
        return input_

    def send_tensor_dict(self, tensor_dict: dict, dst: int) -> None:
        if self.gate == "post-40150" and not self.supports_tensor_dict:
            raise NotImplementedError(NO_DICT_FASTPATH)
        # pre-#40150 forwarded unconditionally: with the fallback this is the torch.distributed
        # module, which has no such attribute -> the real AttributeError of issue #37933.
        return self.dist_module.send_tensor_dict(tensor_dict, dst)

    def recv_tensor_dict(self, src: int) -> dict:
        if self.gate == "post-40150" and not self.supports_tensor_dict:
            raise NotImplementedError(NO_DICT_FASTPATH)
        return self.dist_module.recv_tensor_dict(src)

    def destroy(self) -> None:
        if isinstance(self.dist_module, _CPUSHMDistributed):
            self.dist_module.close()
