"""``python -m explainer conformance [--json]``: the toy against the real vLLM that runs here (``.venv-vllm``).

Exit 0 when no row differs, 1 when one does, 2 (one line) when the vLLM environment is missing (``make vllm``).
``--pins`` runs only the pin checker (every ``RELEASE FILE:LINES TEXT`` pin the product shows; reads files, seconds).
``--release X`` reads vLLM release X's source instead (its wheel, fetched once with pip into the user's cache folder,
never installed) and says per pin held / moved / gone and the two fixes' static facts; exit 0 when every pin naming
X holds there, 1 when not, 2 (one line) for an unknown release or no network.
"""

import json
import sys

from explainer import vllm_release
from explainer.conformance import release     # reads files only (the rows' stories load torch: imported in run)

HELP = (f"compare the toy with the real vLLM {vllm_release.RUNS} on the same inputs (needs .venv-vllm: make vllm); "
        f"--release {vllm_release.NEWEST}: read the product's pins against that release")


def configure(parser):
    parser.add_argument("--json", action="store_true",
                        help='print {"vllm_version", "rows": [{"name", "toy", "vllm", "agree", ...}]} (with '
                             '--release: {"release", "pins": [{"pin", "release", "status", "now", ...}], "fixes"})')
    parser.add_argument("--pins", action="store_true", help="only the pin checker: each vLLM file:line the product "
                        "shows, its text found within its lines of the release it names")
    parser.add_argument("--release", metavar="X", help=f"read vLLM release X (e.g. {vllm_release.NEWEST}) from its "
                        "wheel, not installed, and say per pin held / moved / gone, and the two fixes' facts")


def progress(text: str) -> None:
    print(f"conformance: {text} ...", file=sys.stderr, flush=True)


def run(args):
    if args.release is not None:
        report = release.run(args.release, progress=progress)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            release.print_report(report, sys.stdout)
        return 0 if release.holds(report) else 1
    from explainer.conformance import report        # the toy's stories load torch; the parser stays light
    rows = report.run_all(progress=progress, only="the pins the product shows" if args.pins else None)
    if args.json:
        print(json.dumps(report.to_json(rows), indent=2, default=str))
    else:
        report.print_table(rows)
    return 0 if report.all_agree(rows) else 1
