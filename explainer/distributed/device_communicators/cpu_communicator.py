"""``CpuCommunicator``: shared memory when every rank of the group can use it, torch.distributed otherwise.

Mirrors vLLM ``vllm/distributed/device_communicators/cpu_communicator.py`` (post-#40150 at
``02bdead``). The backend starts as the ``torch.distributed`` module and becomes ``_CPUSHMDistributed``
only if all of these hold, evaluated in this order with Python's short-circuit ``and``:

  a. the CPU architecture is in the allow-list       (vLLM: X86, ARM, S390X)
  b. the shared-memory ops are built                 (vLLM: ``hasattr(torch.ops._C, "init_shm_manager")``)
  c. the group's unique name starts with tp or pp    (vLLM: ``unique_name.startswith(("tp", "pp"))``)
  d. every rank computed the same SHM group name     (vLLM: ``all_gather_object``; here a pickle-free byte gather)

vLLM's ``elif`` logs its fallback line ("ranks do not share the same SHM group name") for *any* failed condition
of a tp/pp group: on a build without the shm ops (vLLM's ``_C_AVX2``) or an architecture off the list, too.
``BackendDecision.fallback_cause`` names the condition that really failed, and ``really_failed`` says it in words.

``dist_module`` is duck-typed: only the SHM shim has ``send_tensor_dict``/``recv_tensor_dict``. Before
#40150 the communicator forwarded to it unconditionally, so after a fallback the call reached the
``torch.distributed`` module and raised ``AttributeError`` (issue #37933). #40150 added
``supports_tensor_dict`` and the ``NotImplementedError`` guards. Both forms are selectable by name.

Knobs: ``CommConfig`` (``comm_config.py``), with defaults from the ``EXPLAINER_*`` environment variables.
``CpuCommunicator`` before #40150 had no ``supports_tensor_dict``;
here it is set in both gate modes so a notebook can show it, and the pre-#40150 gate ignores it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from dataclasses import dataclass, field

import torch
import torch.distributed

from explainer.distributed import phases
from explainer.distributed.device_communicators import shm
from explainer.distributed.device_communicators.comm_config import CommConfig
from explainer.distributed.device_communicators.shm_conditions import CONDITIONS, fallback_cause, really_failed
from explainer.distributed.errors import PeerTimeoutError

logger = logging.getLogger(__name__)

FALLBACK_LOG = ("CPU SHM communicator disabled for group %s: ranks do not share the same SHM group name, "
                "falling back to torch.distributed.")
NO_DICT_FASTPATH = "CpuCommunicator does not support tensor dict fastpath with torch.distributed backend."
ONLY_TENSORS = "CpuCommunicator only supports sending tensors."


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
    fallback_cause: str | None = None    # the condition that really failed (vLLM's log line names the names)
    really_failed: str | None = None     # the same in words

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
        self.channel = setup_bounded("shm-setup", cfg.timeout, shm.ShmGroup,
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


def setup_bounded(phase: str, secs: float, fn, *args, at: str = "", **kwargs):
    """One set-up step under the comm timeout, and the rank's phase from now on (``phases.enter``): torch's timeout
    or a peer's disappearance becomes our ``PeerTimeoutError`` naming this rank and the phase (``at``: where,
    e.g. the rendezvous address; the launcher adds which peer failed)."""
    phases.enter(phase)
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, TimeoutError, ConnectionError) as exc:
        text = (str(exc).splitlines() or [""])[0][:300]
        if isinstance(exc, (shm.ShmPayloadError, shm.ShmCapacityError, PeerTimeoutError)) or not (
                type(exc).__module__.startswith("torch") or _TORCH_COMM_FAILURE.search(str(exc))):
            raise                                         # e.g. "open shm in SHMManager failed" is the story
        raise PeerTimeoutError(f"rank {os.environ.get('RANK', '?')} (pid {os.getpid()}) in phase {phase}"
                               f"{' at ' + at if at else ''}: a peer "
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
        tests = {  # condition (CONDITIONS, vLLM's order) -> (its test here, what it saw)
            "arch_allowed": (lambda: cfg.cpu_arch in allowed, lambda: f"{cfg.cpu_arch} in {{{', '.join(allowed)}}}"),
            "shm_ops_built": (lambda: bool(cfg.shm_ops_built), lambda: f"shm_ops_built={cfg.shm_ops_built}"),
            "group_kind_tp_pp": (lambda: unique_name.startswith(("tp", "pp")), lambda: f"unique_name={unique_name!r}"),
            "names_agree": (self._all_group_ranks_share_shm_group_name, lambda: f"names={d.names_seen}"),
        }
        take_shm = True
        for name, expr, _ in CONDITIONS:                 # short-circuit exactly like vLLM's `and`
            test, detail = tests[name]
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
        evaluated = {c.name: c.value for c in d.conditions}
        d.fallback_cause, d.really_failed = fallback_cause(evaluated), really_failed(evaluated)
        # Added by #40150: the single source of truth parallel_state asks.
        self.supports_tensor_dict = isinstance(self.dist_module, _CPUSHMDistributed)
        d.supports_tensor_dict = self.supports_tensor_dict

    def _all_group_ranks_share_shm_group_name(self) -> bool:
        """Collective: safe because conditions a-c are equal on every rank of the group."""
        self.decision.group_name = local = _CPUSHMDistributed.make_group_name(self)
        # vLLM: all_gather_object (pickle); here the same gather as length-prefixed bytes, never unpickled
        names = setup_bounded("name-agreement", self.config.timeout, _all_gather_str, local, self.device_group)
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
