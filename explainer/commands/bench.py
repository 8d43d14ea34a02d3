"""``python -m explainer bench [--json] [--quick] [--only AREA] [--loaded [N]] [--learners N]``: performance goals
as ratios (``--learners``: how many learners ``--only hub`` signs in)."""

import contextlib
import importlib
import json
import sys

from explainer.bench import AREAS, OPT_IN
from explainer.bench.load import MAX_PROCS, busy_load, default_procs
from explainer.errors import UsageError

HELP = "measure the performance goals side by side in one run and print ratios"


def configure(parser):
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--only", action="append", default=None, help=f"one of {', '.join(AREAS)}; repeatable")
    parser.add_argument("--loaded", nargs="?", type=int, const=default_procs(), default=None, metavar="N",
                        help=f"run N busy-loop processes meanwhile (default: one per cpu; 1..{MAX_PROCS})")
    parser.add_argument("--learners", type=int, default=5, metavar="N",
                        help="hub: learners signed in at once (default 5; 1..200)")


def run(args):
    areas = args.only or [a for a in AREAS if a not in OPT_IN]
    for a in areas:
        if a not in AREAS:
            raise UsageError(f"unknown bench area {a!r}; accepted: {', '.join(AREAS)}")
    if not 1 <= args.learners <= 200:
        raise UsageError(f"--learners {args.learners}: accepted 1..200")
    if args.loaded is not None and not 1 <= args.loaded <= MAX_PROCS:
        raise UsageError(f"--loaded {args.loaded}: accepted 1..{MAX_PROCS} busy-loop processes")
    with busy_load(args.loaded) if args.loaded else contextlib.nullcontext():
        rows = _measure(areas, args.quick, args.learners)
    return _print(rows, args.json)


def _measure(areas: list[str], quick: bool, learners: int) -> list:
    rows = []
    for area in areas:
        try:
            module = importlib.import_module(f"explainer.bench.{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"explainer.bench.{area}":
                continue
            raise
        print(f"bench: measuring {area} ...", file=sys.stderr, flush=True)      # progress: runs take seconds
        rows.extend(module.run(quick=quick, learners=learners) if area == "hub" else module.run(quick=quick))
    return rows


def _print(rows, as_json: bool) -> int:
    if as_json:
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
