"""``python -m explainer accuracy [--pp 2] [--mode generic-int64|state-sync|generic] [--limit N] [--json]``.

Held-out exact match of the PP engine, per back-channel mode, next to PP=1 (same prompts, same
per-request seeds). Progress goes to stderr; the table (or ``--json``) to stdout.
"""

from __future__ import annotations

import json
import sys

HELP = "held-out exact-match accuracy of the PP engine per mode, next to PP=1"
MODES = ("generic-int64", "state-sync", "generic")


def configure(parser):
    parser.add_argument("--pp", default="2", metavar="N", help="pipeline-parallel size of the PP runs (default 2)")
    parser.add_argument("--mode", action="append", default=None, metavar="MODE",
                        help=f"one of {', '.join(MODES)}; repeatable (default: generic-int64 and state-sync)")
    parser.add_argument("--limit", default=None, metavar="N", help="only the first N held-out numbers")
    parser.add_argument("--seed", default="0", metavar="S",
                        help="base seed, 0..2**63-1 minus the number of requests; request i uses S + i (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def evaluate(numbers: list[int], *, model: str, pp: int, mode: str, seed: int, label: str,
             sync_fields: tuple[str, ...] | None = None) -> dict:
    """Exact match of one engine configuration; ``outcome`` says if it ran at all."""
    from explainer.model import task
    from explainer.config import PipelineParallelNotSupportedError
    from explainer.engine.errors import RankFailure, error_summary
    from explainer.engine.llm_engine import LLMEngine
    from explainer.trace import Trace

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


def run(args) -> int:
    from explainer.model import task
    from explainer.commands.generate import _int_arg as _int
    from explainer.errors import UsageError
    from explainer.pp_scenarios import PRE_FIX_MODEL
    from explainer.model.registry import DEFAULT_MODEL

    from explainer.commands.generate import MAX_SEED
    from explainer.config import EngineConfig

    pp = _int("--pp", args.pp, 2)                         # the upper bound: the startup check below
    numbers = task.held_out_numbers()
    seed = _int("--seed", args.seed, 0, MAX_SEED - len(numbers))     # request i uses seed + i
    modes = args.mode or ["generic-int64", "state-sync"]
    for m in modes:
        if m not in MODES:
            raise UsageError(f"--mode {m!r} is not accepted; accepted: {', '.join(MODES)}")
    if args.limit is not None:
        numbers = numbers[: _int("--limit", args.limit, 1, 10**6)]
    for m in modes:                                       # the startup check, before any evaluation runs
        try:
            EngineConfig(model=PRE_FIX_MODEL, pipeline_parallel_size=pp, pp_mode=m, seed=seed)
        except UsageError as exc:
            raise UsageError(f"--pp {pp}: {exc}") from None
    rows = [evaluate(numbers, model=DEFAULT_MODEL, pp=1, mode="generic", seed=seed, label="PP=1")]
    for m in modes:
        rows.append(evaluate(numbers, model=PRE_FIX_MODEL, pp=pp, mode=m, seed=seed, label=f"PP={pp} {m}"))
    reference = rows[0]["texts"]
    for r in rows:
        r["identical_to_pp1"] = sum(a == b for a, b in zip(r["texts"], reference)) if r["texts"] else None
    if args.json:
        print(json.dumps({"numbers": len(numbers), "rows": [{k: v for k, v in r.items() if k != "texts"}
                                                              for r in rows]}, indent=2))
        return 0
    print(f"held-out exact match over {len(numbers)} numbers (request i seeded {seed} + i)")
    print(f"{'run':24s} {'model':32s} {'exact match':>11s} {'same text as PP=1':>18s}")
    for r in rows:
        acc = f"{r['exact_match']:.1%}" if r["exact_match"] is not None else r["outcome"]
        same = "-" if r["identical_to_pp1"] is None else f"{r['identical_to_pp1']}/{len(numbers)}"
        print(f"{r['label']:24s} {r['model']:32s} {acc:>11s} {same:>18s}")
        if r["error"]:
            print(f"{'':24s} {r['error']['type']}: {r['error']['message']}")
    return 0
