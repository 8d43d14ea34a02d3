"""Held-out exact match of one engine configuration: the aggregate accuracy the notebooks and
``python -m explainer accuracy`` show beside the demo prompt (same prompts, same per-request seeds).

Progress goes to stderr: a live counter on a terminal, one line per 25 prompts in a log.
"""

from __future__ import annotations

import sys

from explainer.config import PipelineParallelNotSupportedError
from explainer.engine.errors import RankFailure, error_summary
from explainer.engine.llm_engine import LLMEngine
from explainer.model import task
from explainer.trace import Trace


def engine_exact_match(numbers: list[int], *, model: str, pp: int, mode: str, seed: int, label: str,
             sync_fields: tuple[str, ...] | None = None) -> dict:
    """Exact match of one engine configuration; ``outcome`` says if it ran at all."""
    row = {"label": label, "model": model, "pp": pp, "mode": mode, "n": len(numbers)}
    try:
        engine = LLMEngine.from_engine_args(Trace(enabled=False), model=model, pipeline_parallel_size=pp,
                                            pp_mode=mode, seed=seed,
                                            **({} if sync_fields is None else {"sync_fields": tuple(sync_fields)}))
    except (RankFailure, PipelineParallelNotSupportedError) as exc:     # bad values stay UsageErrors (exit 2)
        cause = exc.cause if isinstance(exc, RankFailure) else exc
        outcome = "warmup-crash" if isinstance(exc, RankFailure) else "startup-rejected"
        return {**row, "outcome": outcome, "error": error_summary(cause), "exact_match": None, "texts": []}
    done = 0

    tty = sys.stderr.isatty()

    def progress(_):                        # a live counter on a terminal; one line per 25 prompts in a log
        nonlocal done
        done += 1
        if tty:
            print(f"\r{label}: {done}/{len(numbers)}", end="", file=sys.stderr, flush=True)
        elif done % 25 == 0 or done == len(numbers):
            print(f"{label}: {done}/{len(numbers)}", file=sys.stderr, flush=True)

    outs = engine.generate([task.encode(str(n)) for n in numbers], max_tokens=task.MAX_CANVASES * task.CANVAS_LENGTH,
                           seeds=[seed + i for i in range(len(numbers))], on_finish=progress)
    if tty:
        print(file=sys.stderr)
    texts = [task.decode(o.output_token_ids) for o in outs]
    return {**row, "outcome": "ok", "error": None, "exact_match": task.exact_match(texts, numbers), "texts": texts}
