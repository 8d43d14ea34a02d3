"""``python -m explainer bench [--json] [--quick] [--only AREA]``: performance goals as ratios."""

import importlib
import json
import sys

from explainer.bench import AREAS
from explainer.errors import UsageError

HELP = "measure the performance goals side by side in one run and print ratios"


def configure(parser):
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--only", action="append", default=None, help=f"one of {', '.join(AREAS)}; repeatable")


def run(args):
    areas = args.only or list(AREAS)
    for a in areas:
        if a not in AREAS:
            raise UsageError(f"unknown bench area {a!r}; accepted: {', '.join(AREAS)}")
    rows = []
    for area in areas:
        try:
            module = importlib.import_module(f"explainer.bench.{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"explainer.bench.{area}":
                continue
            raise
        print(f"bench: measuring {area} ...", file=sys.stderr, flush=True)      # progress: runs take seconds
        rows.extend(module.run(quick=args.quick))
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return 0
    width = max(len(r.name) for r in rows) if rows else 20
    print(f"{'area':8s} {'measurement':{width}s} {'ours':>14s} {'baseline':>10s} {'ratio':>8s}  {'goal':10s} met")
    for r in rows:
        base = "-" if r.baseline is None else f"{r.baseline:.4g}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        ours = f"{r.ours:.4g} {r.unit}"
        print(f"{r.area:8s} {r.name:{width}s} {ours:>14s} {base:>10s} {ratio:>8s}  {r.goal:10s} {'yes' if r.met else 'NO'}")
    return 0
