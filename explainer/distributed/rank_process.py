"""What runs inside one rank process that ``launch`` started: the rank's environment, the gloo world, the
function, its result through the pipe, and the clean-up on every way out.

Ranks never outlive the parent: each rank is its own process group, asks the kernel for SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``), and a watchdog thread exits when the parent's end of a control pipe
closes (unlinking the rank's shared-memory names first).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import traceback

import torch
import torch.distributed as dist

from explainer.distributed import phases
from explainer.distributed.device_communicators import shm
from explainer.distributed.device_communicators.shm_segments import OWNED_NAMES, unlink_name
from explainer.distributed.parallel_state import destroy_model_parallel, init_distributed_environment
from explainer.distributed.procs import die_with_parent


def _watch_parent(ctl) -> None:
    """Block on the parent's control pipe: any message or EOF (the parent died) ends this rank now."""
    try:
        ctl.recv()
    except BaseException:                                 # noqa: BLE001 - EOF: the parent is gone
        pass
    for name in list(OWNED_NAMES):                        # what a set-up in progress created
        unlink_name(name)
    os._exit(70)


def run_rank(fn, args, kwargs, env: dict, conn, ctl, num_threads: int) -> None:
    """The body of one rank process: its environment, the gloo world, ``fn``; the result goes to ``conn``."""
    code, msg = 1, None
    die_with_parent()
    threading.Thread(target=_watch_parent, args=(ctl,), daemon=True, name="explainer-parent-watchdog").start()
    try:
        for key in [k for k in os.environ if k.startswith("EXPLAINER_") and k not in env]:
            del os.environ[key]                           # a forkserver keeps the env it started with
        os.environ.update(env)
        phases.set_reporter(conn)
        torch.set_num_threads(num_threads)                # one core per rank: spinning peers need it
        _keep_freed_memory()
        init_distributed_environment()
        msg, code = ("ok", fn(*args, **kwargs)), 0
    except BaseException as exc:                          # noqa: BLE001 - reported to the parent
        msg = ("err", type(exc).__name__, str(exc), traceback.format_exc(), None)
    phases.set_reporter(None)
    try:
        if code == 0:
            conn.send(("phase", "shutdown"))
        conn.send(msg)
    except Exception as exc:                              # e.g. an unpicklable return value
        try:
            conn.send(("err", type(exc).__name__, f"could not return the rank's result: {exc}", "", None))
        except Exception:                                 # noqa: BLE001 - parent gone
            pass
        code = 1
    finally:
        conn.close()
        cleanup_rank()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _keep_freed_memory() -> None:
    """Keep freed activations in the heap (glibc ``mallopt``), so each received PP dict does not
    page-fault fresh memory in; vLLM's CPU docs get the same effect by preloading tcmalloc. Applies to
    every path a rank uses (shared memory and gloo alike)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)                        # M_MMAP_THRESHOLD: glibc's maximum, 32 MiB
        libc.mallopt(-1, 512 << 20)                       # M_TRIM_THRESHOLD
    except (OSError, AttributeError):                     # not glibc: nothing to tune
        pass


def cleanup_rank() -> None:
    """What a rank leaves behind, on its way out: its shared-memory channels, its groups, its process group
    (the same under torchrun on a host: ``hosts_rank``)."""
    try:
        shm.close_all()
        destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:                                     # noqa: BLE001 - best effort on the way out
        pass
