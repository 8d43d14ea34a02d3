"""``GroupCoordinator``: vLLM's process-group wrapper with the generic and the custom tensor-dict paths.

Mirrors vLLM ``vllm/distributed/parallel_state.py`` (0.32.0; the gate of ``0c175ae`` selectable). Each group has a
``cpu_group`` (gloo) and a ``device_group`` (on CPU also gloo), and a ``CpuCommunicator`` when it has
more than one rank. The tensor-dict paths, generic (``isend``/``irecv`` with pending sends, as in 0.32.0) and
custom (``use_cpu_custom_send_recv``: the whole dict to ``device_communicator``), are ``tensor_dict_path.py``.

The flag is computed by one of two gates, chosen by name:
``"pre-40150"``  -> ``is_cpu() and hasattr(torch.ops._C, "init_shm_manager")`` (a build property);
``"post-40150"`` -> ``is_cpu() and device_communicator and getattr(device_communicator, "supports_tensor_dict", False)``.
``gate_fn=f`` replaces both with ``f(device_communicator) -> bool`` (the workshop's ``tensor-dict-gate``).

Metadata encoding (``tensor_metadata.py``): tagged JSON instead of vLLM's pickle, so a peer can never make the
receiver execute code. Every call is bounded: gloo timeouts and dead peers
surface as ``TimeoutError`` naming the peer. The TP all-gather slicing of vLLM is not modelled.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections import deque

import torch
import torch.distributed as dist

from explainer.distributed.device_communicators.comm_config import CommConfig, env_timeout
from explainer.distributed.device_communicators.cpu_communicator import CpuCommunicator, setup_bounded
from explainer.distributed.device_communicators.shm_header import DTYPES
from explainer.distributed.device_communicators.shm import PeerGoneError
from explainer.distributed.errors import BroadcastMismatchError
from explainer.distributed.tensor_dict_path import TensorDictPaths
from explainer.errors import UsageError

_NAME_COUNTS: dict[str, int] = {}
_BCAST_DIMS = 8


def _get_unique_name(name: str) -> str:
    """vLLM: ``pp`` -> ``pp:0``, ``pp:1``, ... per process."""
    n = _NAME_COUNTS.get(name, 0)
    _NAME_COUNTS[name] = n + 1
    return f"{name}:{n}"


class GroupCoordinator(TensorDictPaths):
    """vLLM's ``GroupCoordinator`` for CPU: ranks, cpu/device groups, communicator, tensor-dict paths."""

    def __init__(self, group_ranks: list[list[int]], local_rank: int = 0,
                 torch_distributed_backend: str = "gloo", use_device_communicator: bool = True,
                 group_name: str | None = None, *, gate: str | None = None,
                 config: CommConfig | None = None, gate_fn=None):
        config = config or CommConfig()
        if gate is not None:
            config = dataclasses.replace(config, gate=gate)
        self.config = config.resolved()
        self.gate = self.config.gate
        self.unique_name = _get_unique_name(group_name or "anonymous")
        self.rank, self.local_rank = dist.get_rank(), local_rank
        timeout = datetime.timedelta(seconds=self.config.timeout)
        self.device_group = self.cpu_group = None
        self.pending_isends: deque[tuple[list, list[torch.Tensor]]] = deque()
        for ranks in group_ranks:                         # every rank creates every group, same order
            device_group = setup_bounded("group-setup", self.config.timeout, dist.new_group, ranks,
                                          backend=torch_distributed_backend, timeout=timeout)
            cpu_group = setup_bounded("group-setup", self.config.timeout, dist.new_group, ranks,
                                       backend="gloo", timeout=timeout)
            if self.rank in ranks:
                self.ranks = list(ranks)
                self.world_size, self.rank_in_group = len(ranks), ranks.index(self.rank)
                self.device_group, self.cpu_group = device_group, cpu_group
        if self.cpu_group is None:
            raise ValueError(f"global rank {self.rank} is in none of the groups {group_ranks}")
        self.device = torch.device("cpu")
        self.device_communicator = None
        if use_device_communicator and self.world_size > 1:
            self.device_communicator = CpuCommunicator(self.cpu_group, self.device, self.device_group,
                                                       self.unique_name, config=self.config)
        self.gate_fn = gate_fn                            # a caller's own gate (the workshop's exercise)
        self.gate_inputs, self.use_cpu_custom_send_recv = self._gate()

    def _gate(self) -> tuple[dict, bool]:
        is_cpu = True                                     # current_platform.is_cpu()
        comm = self.device_communicator
        if self.gate_fn is not None:                      # use_cpu_custom_send_recv(device_communicator) -> bool
            return {"gate_fn": getattr(self.gate_fn, "__name__", "gate_fn")}, bool(self.gate_fn(comm))
        if self.gate == "pre-40150":
            built = bool(self.config.shm_ops_built)       # hasattr(torch.ops._C, "init_shm_manager")
            return {"is_cpu": is_cpu, "shm_ops_built": built}, is_cpu and built
        supports = getattr(comm, "supports_tensor_dict", False)
        return ({"is_cpu": is_cpu, "device_communicator": comm is not None, "supports_tensor_dict": supports},
                bool(is_cpu and comm and supports))

    # --- ranks -------------------------------------------------------------------------------
    @property
    def first_rank(self) -> int:
        return self.ranks[0]

    @property
    def last_rank(self) -> int:
        return self.ranks[-1]

    @property
    def is_first_rank(self) -> bool:
        return self.rank == self.first_rank

    @property
    def is_last_rank(self) -> bool:
        return self.rank == self.last_rank

    @property
    def next_rank(self) -> int:
        return self.ranks[(self.rank_in_group + 1) % self.world_size]

    @property
    def prev_rank(self) -> int:
        return self.ranks[(self.rank_in_group - 1) % self.world_size]

    def _peer(self, r: int) -> str:
        return f"group rank {r} (global rank {self.ranks[r]}) of {self.unique_name}"

    def bounded(self, what: str, peer: int | None, fn, *args, **kwargs):
        """Run one gloo call; its timeout or a dead peer becomes a TimeoutError naming the peer."""
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:
            who = self._peer(peer) if peer is not None else f"a peer of {self.unique_name}"
            text = str(exc)
            if "Timed out" in text or "timed out" in text:
                raise TimeoutError(f"{what}: {who} did not answer within {self.config.timeout:.1f}s "
                                   f"(gloo: {text.splitlines()[0][:200]})") from exc
            if "Connection" in text or "closed" in text or "reset" in text:
                raise PeerGoneError(f"{what}: {who} is gone (gloo: {text.splitlines()[0][:200]})") from exc
            raise

    def transfer_peer(self, r: int | None, step: int) -> int:
        """The group rank one tensor dict goes to or comes from (default: the next / previous rank), checked."""
        if r is None:
            r = (self.rank_in_group + step) % self.world_size
        elif type(r) is not int or not 0 <= r < self.world_size or r == self.rank_in_group:
            self._check_peer(r)
        return r

    def _check_peer(self, r: int) -> None:
        if not isinstance(r, int) or not 0 <= r < self.world_size or r == self.rank_in_group:
            raise UsageError(f"peer {r!r}: accepted are group ranks 0..{self.world_size - 1} "
                             f"other than this rank {self.rank_in_group}")

    # --- broadcast / barrier / destroy ----------------------------------------------------------
    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """In place on receivers, which pre-allocate dtype and shape; a mismatch raises on every rank."""
        if self.world_size == 1:
            return tensor
        if not isinstance(src, int) or not 0 <= src < self.world_size:
            raise UsageError(f"src {src!r}: accepted are group ranks 0..{self.world_size - 1}")
        if tensor.device.type != "cpu" or not tensor.is_contiguous() or tensor.dim() > _BCAST_DIMS:
            raise ValueError(f"broadcast accepts contiguous CPU tensors of <= {_BCAST_DIMS} dims; "
                             f"got device {tensor.device}, contiguous={tensor.is_contiguous()}, dim={tensor.dim()}")
        codes = {dt: i for i, dt in enumerate(DTYPES)}
        spec = torch.full((2 + _BCAST_DIMS,), -1, dtype=torch.long)
        spec[0], spec[1] = codes.get(tensor.dtype, -2), tensor.dim()
        spec[2:2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.long)
        theirs = spec.clone()
        self.bounded("broadcast", src, dist.broadcast, theirs, src=self.ranks[src], group=self.cpu_group)
        ok = torch.tensor([int(torch.equal(theirs, spec))], dtype=torch.long)
        oks = [torch.zeros(1, dtype=torch.long) for _ in range(self.world_size)]
        self.bounded("broadcast", None, dist.all_gather, oks, ok, group=self.cpu_group)
        bad = [i for i, o in enumerate(oks) if not o.item()]
        if bad:
            want_dt = DTYPES[int(theirs[0])] if 0 <= int(theirs[0]) < len(DTYPES) else "unsupported"
            want = f"{want_dt} {list(theirs[2:2 + int(theirs[1])].tolist())}"
            raise BroadcastMismatchError(f"broadcast from group rank {src}: it sends {want}, but group rank(s) {bad} "
                             f"pre-allocated a different dtype/shape (this rank has {tensor.dtype} "
                             f"{list(tensor.shape)}); receivers must match exactly")
        self.bounded("broadcast", src, dist.broadcast, tensor, src=self.ranks[src], group=self.device_group)
        return tensor

    def make_sibling_device_group(self, group_desc: str) -> "GroupCoordinator":
        """The same ranks over new process groups (no communicator): vLLM's ``make_sibling_device_group``, e.g. the
        ``pp_broadcast`` group the back-channel uses so it never queues behind the stage-to-stage sends. Every
        rank of the world calls it, in the same order."""
        return GroupCoordinator([self.ranks], self.local_rank, use_device_communicator=False, group_name=group_desc,
                                config=self.config)

    def barrier(self) -> None:
        self.bounded("barrier", None, dist.barrier, group=self.cpu_group)

    def destroy(self) -> None:
        if self.device_communicator is not None:
            self.device_communicator.destroy()
            self.device_communicator = None
        for g in {id(self.device_group): self.device_group, id(self.cpu_group): self.cpu_group}.values():
            if g is not None and dist.is_initialized():
                try:
                    dist.destroy_process_group(g)
                except (RuntimeError, ValueError):
                    pass
        self.device_group = self.cpu_group = None


_PP: GroupCoordinator | None = None


def init_distributed_environment(timeout: float | None = None) -> None:
    """``init_process_group("gloo")`` from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun's env)."""
    if dist.is_initialized():
        return
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(f"environment lacks {', '.join(missing)}; run under torchrun or explainer's launch()")
    secs = timeout if timeout is not None else env_timeout()
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"   # TCPStore there, then the world's group
    setup_bounded("rendezvous", secs, dist.init_process_group, "gloo", init_method="env://",
                  timeout=datetime.timedelta(seconds=secs), at=where)


def initialize_pp_group(pp_size: int | None = None, *, gate: str | None = None,
                        config: CommConfig | None = None) -> GroupCoordinator:
    """vLLM's ``initialize_model_parallel`` for PP only: consecutive ranks form each PP group."""
    global _PP
    world = dist.get_world_size()
    pp_size = world if pp_size is None else pp_size
    if pp_size < 1 or world % pp_size:
        raise ValueError(f"pp_size {pp_size}: accepted are divisors of the world size {world}")
    groups = [list(range(i, i + pp_size)) for i in range(0, world, pp_size)]
    _PP = GroupCoordinator(groups, int(os.environ.get("LOCAL_RANK", 0)), group_name="pp", gate=gate, config=config)
    return _PP


def get_pp_group() -> GroupCoordinator:
    if _PP is None:
        raise RuntimeError("pipeline model parallel group is not initialized")
    return _PP


def destroy_model_parallel() -> None:
    global _PP
    if _PP is not None:
        _PP.destroy()
    _PP = None
