"""One rank of the real vLLM's own PP group, built the way a vLLM CPU worker builds it, then one tensor-dict hand-off.

``rank_report(rank, init_method, case)`` (run in ``.venv-vllm``): load vLLM's CPU kernels
(``current_platform.import_kernels()``, what a worker does at start: without it ``torch.ops._C.init_shm_manager``
is missing and the communicator falls back silently), then, inside ``set_current_vllm_config`` of a PP=2
``VllmConfig``, ``init_distributed_environment(backend="gloo")`` and ``initialize_model_parallel(1, 2)``; the PP
group is ``get_pp_group()``. The ident is ``VLLM_DIST_IDENT`` from this process's environment.

``case``: ``post-40150`` leaves vLLM's own gate; ``pre-40150-gate-only`` sets ``use_cpu_custom_send_recv`` to the
gate expression before PR #40150 (``current_platform.is_cpu() and hasattr(torch.ops._C, "init_shm_manager")``) on
the real ``GroupCoordinator`` (0.32.0's communicator then refuses in its own guard); ``pre-40150`` also gives the
communicator its tensor-dict methods without that guard, as they were before the PR (composed: two one-liners).
Rank 0 sends ``{hidden_states, residual}`` with ``send_tensor_dict``, rank 1
receives it. Everything raised is reported (type, message, where), never swallowed.

The report also names the kernel library vLLM loaded (``kernels.report``) and the inputs of
``CpuCommunicator.__init__``'s ``if`` as this rank saw them (``conditions_of``): vLLM logs one line for any failed
condition, and the caller names the one that really failed.
"""

from __future__ import annotations

import logging
import os
import time
import traceback

from types import SimpleNamespace

import torch
from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
from vllm.distributed import parallel_state
from vllm.distributed.device_communicators.cpu_communicator import _CPUSHMDistributed
from vllm.logger import configure_logging
from vllm.platforms import CpuArchEnum, current_platform

from explainer.vllm_side import kernels

PRE_40150_GATE = 'current_platform.is_cpu() and hasattr(torch.ops._C, "init_shm_manager")'


class LogLines(logging.Handler):
    """vLLM's log records under ``vllm.distributed``, as text."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def pp_dict() -> dict:
    """The toy's PP hand-off (``explainer.scenario.comm.pp_dict``): [2, 8, 64] fp32 hidden_states and residual."""
    g = torch.Generator().manual_seed(0)
    return {"hidden_states": torch.randn(2, 8, 64, generator=g), "residual": torch.randn(2, 8, 64, generator=g)}


def error_of(exc: BaseException) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    where = [f"vllm/{f.filename.rsplit('site-packages/vllm/', 1)[1]}:{f.lineno} {f.name}"
             for f in frames if "site-packages/vllm/" in f.filename][-4:]
    return {"type": type(exc).__name__, "message": str(exc), "where": where}


def build_pp_group(rank: int, init_method: str, world_size: int = 2, log_handler: logging.Handler | None = None):
    """vLLM's world and PP group for this rank (PP=2, TP=1), as its CPU worker builds them; ``log_handler`` is
    attached to ``vllm.distributed`` once vLLM's logging is configured (configuring removes earlier handlers)."""
    current_platform.import_kernels()
    config = VllmConfig(parallel_config=ParallelConfig(pipeline_parallel_size=world_size))
    configure_logging(config.logging_config)                 # as a worker process does (multiproc_executor)
    if log_handler is not None:
        logging.getLogger("vllm.distributed").addHandler(log_handler)
    with set_current_vllm_config(config):
        parallel_state.init_distributed_environment(world_size=world_size, rank=rank,
                                                    distributed_init_method=init_method, local_rank=0, backend="gloo")
        parallel_state.initialize_model_parallel(1, world_size)
    return parallel_state.get_pp_group()


def choice_of(pp) -> dict:
    comm = pp.device_communicator
    dist_module = getattr(comm, "dist_module", None)
    return {"communicator": type(comm).__name__ if comm is not None else None,
            "dist_module": getattr(dist_module, "__name__", type(dist_module).__name__),
            "dist_module_type": type(dist_module).__name__,
            "supports_tensor_dict": bool(getattr(comm, "supports_tensor_dict", False)),
            "use_cpu_custom_send_recv": bool(pp.use_cpu_custom_send_recv),
            "has_init_shm_manager": hasattr(torch.ops._C, "init_shm_manager")}


# vLLM 0.32.0 CpuCommunicator.__init__'s architecture test (``0.32.0 cpu_communicator.py:36-39 CpuArchEnum.S390X``)
ALLOWED_ARCHES = (CpuArchEnum.X86, CpuArchEnum.ARM, CpuArchEnum.POWERPC, CpuArchEnum.S390X)


def shm_group_name(unique_name: str, ranks) -> str:
    """The SHM group name this rank computes: vLLM's own static ``_CPUSHMDistributed.make_group_name``."""
    return _CPUSHMDistributed.make_group_name(SimpleNamespace(unique_name=unique_name, ranks=list(ranks)))


def conditions_of(unique_name: str = "pp:0", ranks=(0, 1)) -> dict:
    """The three local inputs of ``CpuCommunicator.__init__``'s ``if``, evaluated here as it evaluates them, and
    this rank's SHM group name (the fourth, the name agreement, compares every rank's: the caller does that)."""
    arch = current_platform.get_cpu_architecture()
    return {"arch": arch.name, "arch_allowed": arch in ALLOWED_ARCHES,
            "shm_ops_built": hasattr(torch.ops._C, "init_shm_manager"),
            "group_kind_tp_pp": unique_name.startswith("tp") or unique_name.startswith("pp"),
            "shm_group_name": shm_group_name(unique_name, ranks)}


def restore_pre_40150_methods(comm) -> None:
    """The communicator's tensor-dict methods as before #40150, which added their ``supports_tensor_dict`` guard:
    the body was ``return self.dist_module.send_tensor_dict(tensor_dict, dst)`` (and ``recv_tensor_dict(src)``)."""
    comm.send_tensor_dict = lambda tensor_dict, dst: comm.dist_module.send_tensor_dict(tensor_dict, dst)
    comm.recv_tensor_dict = lambda src: comm.dist_module.recv_tensor_dict(src)


def exchange(pp, rank: int) -> dict:
    expected = pp_dict()
    if rank == 0:
        pp.send_tensor_dict(expected)
        return {"sent": sorted(expected)}
    got = pp.recv_tensor_dict()
    equal = got.keys() == expected.keys() and all(torch.equal(got[k], v) and got[k].dtype == v.dtype
                                                   for k, v in expected.items())
    return {"received": sorted(got), "received_equal": equal}


def rank_report(rank: int, init_method: str, case: str = "post-40150") -> dict:
    """Build vLLM's PP group on this rank, apply ``case``'s gate, hand the dict over; what happened, as JSON."""
    torch.set_num_threads(1)
    lines = LogLines()
    out = {"rank": rank, "case": case, "ident": os.environ.get("VLLM_DIST_IDENT"), "error": None,
           "error_phase": None, "choice": None, "vllm_gate_value": None}
    t0 = time.monotonic()
    phase = "initialize_model_parallel"
    try:
        pp = build_pp_group(rank, init_method, log_handler=lines)
        out["choice"] = choice_of(pp)
        out["kernels"] = kernels.report()
        out["conditions"] = conditions_of(pp.unique_name, pp.ranks)
        out["vllm_gate_value"] = out["choice"]["use_cpu_custom_send_recv"]
        if case in ("pre-40150", "pre-40150-gate-only"):
            pp.use_cpu_custom_send_recv = current_platform.is_cpu() and hasattr(torch.ops._C, "init_shm_manager")
            out["choice"]["use_cpu_custom_send_recv"] = bool(pp.use_cpu_custom_send_recv)
            out["gate_expression"] = PRE_40150_GATE
        if case == "pre-40150":
            restore_pre_40150_methods(pp.device_communicator)
        phase = "send_tensor_dict" if rank == 0 else "recv_tensor_dict"
        out.update(exchange(pp, rank))
    except Exception as exc:                                  # noqa: BLE001 - the story is the error
        out["error"], out["error_phase"] = error_of(exc), phase
    if out.get("kernels") is None:                            # the group failed while it was built (errno 2)
        out["kernels"], out["conditions"] = kernels.report(), conditions_of("pp:0", range(2))
    out["log_lines"] = [ln for ln in lines.lines if "SHM" in ln or "communicator" in ln.lower()]
    out["seconds"] = round(time.monotonic() - t0, 3)
    if rank == 0:
        time.sleep(1.0)                                       # the peer finishes (reading, or failing) before rank 0
        #                                                       leaves and its end of the gloo pair goes
    return out
