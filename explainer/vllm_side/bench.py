"""The real vLLM's own PP channel under this package's benchmark harness (run in ``.venv-vllm``, one process per rank).

``bench_rank`` builds two of vLLM's own ``GroupCoordinator`` PP groups over two processes: one on its C++ shared
memory (both ranks share ``VLLM_DIST_IDENT``: ``_CPUSHMDistributed``, ``csrc/cpu/shm.cpp``) and one on the generic
path (the ident changed per rank before the second group is built, so the names disagree and vLLM falls back to
torch.distributed). Then it runs ``explainer.bench.comm``'s own ``pingpong`` and ``stream`` on each, in
interleaved rounds, the same dicts and sizes as the toy's bench: one harness for both.

On a build without the shared-memory ops (``_C_AVX2``: an AVX2-only CPU) the first group falls back too; then only
the generic path is measured and the report says why (``no_shm``), with the kernel library.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
from vllm.distributed.parallel_state import GroupCoordinator

from explainer.bench.comm import SIZES, bench_dict, n_for, pingpong, stream
from explainer.vllm_side import kernels
from explainer.vllm_side.comm_rank import build_pp_group, choice_of


def generic_group(rank: int):
    """A second vLLM PP group whose ranks disagree on the SHM group name: vLLM's fallback (generic) path."""
    os.environ["VLLM_DIST_IDENT"] = f"{os.environ['VLLM_DIST_IDENT']}-rank{rank}"
    with set_current_vllm_config(VllmConfig(parallel_config=ParallelConfig(pipeline_parallel_size=2))):
        return GroupCoordinator([[0, 1]], 0, "gloo", True, group_name="pp")


def sized_counts(groups: dict, dicts: dict, budget: float) -> dict:
    counts = {}
    for path, g in groups.items():                       # warm up and size each measurement once
        pingpong(g, dicts[SIZES[0]], 5)
        t = time.perf_counter()
        pingpong(g, dicts[SIZES[0]], 5)
        counts[("lat", path)] = n_for(g, (time.perf_counter() - t) / 5, budget, 10, 2000)
        for s in SIZES:
            g.barrier()
            t = time.perf_counter()
            stream(g, dicts[s], 2)
            counts[(s, path)] = n_for(g, (time.perf_counter() - t) / 3, budget, 4, 5000)
    return counts


def bench_rank(rank: int, init_method: str, quick: bool) -> dict:
    """Latency (rank 0) and steady-state stream times (rank 1), seconds, per path and round."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    first = build_pp_group(rank, init_method)
    out: dict = {"rank": rank, "kernels": kernels.report()}
    if first.use_cpu_custom_send_recv:
        groups = {"shm": first, "generic": generic_group(rank)}
    else:                                                # no shm ops in this build: the one group is generic
        groups = {"generic": first}
        out["no_shm"] = "the names agree, but this build has no shared-memory ops: vLLM stayed on torch.distributed"
    out["choice"] = {k: choice_of(g) for k, g in groups.items()}
    if any(choice_of(g)["use_cpu_custom_send_recv"] != (path == "shm") for path, g in groups.items()):
        out["error"] = {"type": "UnexpectedPath", "message": f"the groups took other paths: {out['choice']}"}
        return out
    rounds, budget = (2, 0.05) if quick else (5, 0.12)
    dicts = {s: bench_dict(s) for s in SIZES}
    counts = sized_counts(groups, dicts, budget)
    for _ in range(rounds):                              # interleaved, so both paths see the same load
        for path, g in groups.items():
            g.barrier()
            out.setdefault(f"latency/{path}", []).append(pingpong(g, dicts[SIZES[0]], counts[("lat", path)]))
        for s in SIZES:
            for path, g in groups.items():
                g.barrier()
                out.setdefault(f"stream/{path}/{s}", []).append(stream(g, dicts[s], counts[(s, path)]))
    for g in groups.values():
        g.barrier()
    out["medians"] = {k: statistics.median(v) for k, v in out.items() if isinstance(v, list)}
    return out
