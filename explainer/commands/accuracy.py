"""``python -m explainer accuracy [--pp 2] [--mode generic-int64|state-sync|generic] [--limit N] [--json]``.

Held-out exact match of the PP engine, per back-channel mode, next to PP=1 (same prompts, same
per-request seeds). Progress goes to stderr; the table (or ``--json``) to stdout.
"""

from __future__ import annotations

import json

from explainer.validation import MAX_SEED, parse_int
from explainer.errors import UsageError
from explainer.vocab import PP_MODES_BY_STORY

HELP = "held-out exact-match accuracy of the PP engine per mode, next to PP=1"


def configure(parser):
    parser.add_argument("--pp", default="2", metavar="N", help="pipeline-parallel size of the PP runs (default 2)")
    parser.add_argument("--mode", action="append", default=None, metavar="MODE",
                        help=f"one of {', '.join(PP_MODES_BY_STORY)}; repeatable (default: generic-int64 and state-sync)")
    parser.add_argument("--limit", default=None, metavar="N", help="only the first N held-out numbers")
    parser.add_argument("--seed", default="0", metavar="S",
                        help="base seed, 0..2**63-1 minus the number of requests; request i uses S + i (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from explainer.config import EngineConfig            # the engine loads torch: only when the command runs
    from explainer.model import task
    from explainer.model.registry import DEFAULT_MODEL, PRE_FIX_MODEL
    from explainer.scenario.accuracy import engine_exact_match

    pp = parse_int("--pp", args.pp, 2)                         # the upper bound: the startup check below
    numbers = task.held_out_numbers()
    seed = parse_int("--seed", args.seed, 0, MAX_SEED - len(numbers))     # request i uses seed + i
    modes = args.mode or list(PP_MODES_BY_STORY[:2])   # the two that run
    for m in modes:
        if m not in PP_MODES_BY_STORY:
            raise UsageError(f"--mode {m!r} is not accepted; accepted: {', '.join(PP_MODES_BY_STORY)}")
    if args.limit is not None:
        numbers = numbers[: parse_int("--limit", args.limit, 1, 10**6)]
    for m in modes:                                       # the startup check, before any evaluation runs
        try:
            EngineConfig(model=PRE_FIX_MODEL, pipeline_parallel_size=pp, pp_mode=m, seed=seed)
        except UsageError as exc:
            raise UsageError(f"--pp {pp}: {exc}") from None
    rows = [engine_exact_match(numbers, model=DEFAULT_MODEL, pp=1, mode="generic", seed=seed, label="PP=1")]
    for m in modes:
        rows.append(engine_exact_match(numbers, model=PRE_FIX_MODEL, pp=pp, mode=m, seed=seed, label=f"PP={pp} {m}"))
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
