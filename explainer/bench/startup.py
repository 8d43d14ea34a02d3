"""The startup rejection (vLLM PR #45828): cost, and that it starts nothing.

Both sides are the toy's. Ours: building ``EngineConfig(model="diffusion-gemma-tiny", pipeline_parallel_size=2)``
until the toy's config check raises (median). Baseline, in the same run: the toy's pre-#45828 model with the same PP
size going all the way to its warmup crash (ranks, model load, warmup). Goal: < 10 ms and no process started.
The real vLLM's rejection is the conformance row "PP gate: LLM(pipeline_parallel_size=2)": ``vllm.LLM(...)`` from
the call to the exception, vLLM already imported (``explainer/records/``: 0.36 s on 2026-12-02).
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import statistics
import time

from explainer.bench import Row
from explainer.config import EngineConfig, PipelineParallelNotSupportedError, checkpoint_metadata
from explainer.engine.errors import RankFailure
from explainer.engine.llm_engine import LLMEngine
from explainer.model.registry import DEFAULT_MODEL, PRE_FIX_MODEL
from explainer.trace import Trace


def _child_pids() -> set[int]:
    """Children of this process, from /proc (any thread's), plus multiprocessing's view."""
    pids = {p.pid for p in multiprocessing.active_children()}
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            with open(path) as f:
                pids |= {int(p) for p in f.read().split()}
        except OSError:
            pass
    return pids


def _time_ms(fn, expected: type[BaseException]) -> float:
    start = time.perf_counter()
    try:
        fn()
    except expected:
        return (time.perf_counter() - start) * 1e3
    raise AssertionError(f"expected {expected.__name__}")


def run(quick: bool = False) -> list[Row]:
    """The rejection's median cost next to the pre-#45828 warmup crash, and how many processes it started."""
    checkpoint_metadata()                                   # a long-lived process has read the config
    before = _child_pids()
    reject = [_time_ms(lambda: EngineConfig(model=DEFAULT_MODEL, pipeline_parallel_size=2),
                       PipelineParallelNotSupportedError) for _ in range(20 if quick else 200)]
    started = len(_child_pids() - before)
    crash = [_time_ms(lambda: LLMEngine.from_engine_args(Trace(), model=PRE_FIX_MODEL, pipeline_parallel_size=2),
                      RankFailure) for _ in range(2 if quick else 5)]
    ours, base = statistics.median(reject), statistics.median(crash)
    return [
        Row("startup", "the toy: PP=2 rejected by its config check vs its pre-#45828 warmup crash", ours, base, "ms",
            base / ours, "< 10 ms", ours < 10 and started == 0),
        Row("startup", "processes started by the rejection", float(started), None, "", None, "0", started == 0),
    ]
