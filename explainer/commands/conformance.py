"""``python -m explainer conformance [--json]``: the toy against the real vLLM 0.32.0 (``.venv-vllm``), row by row.

Exit 0 when no row differs, 1 when one does, 2 (one line) when the vLLM environment is missing (``make vllm``).
``--pins`` runs only the pin checker (every ``FILE:LINES TEXT`` pin the product shows; reads files, seconds).
"""

import json
import sys

HELP = "compare the toy with the real vLLM 0.32.0 on the same inputs (needs .venv-vllm: make vllm)"


def configure(parser):
    parser.add_argument("--json", action="store_true",
                        help='print {"vllm_version", "rows": [{"name", "toy", "vllm", "agree", ...}]}')
    parser.add_argument("--pins", action="store_true", help="only the pin checker: each vLLM file:line the product "
                        "shows, its text found within its lines of the installed vLLM")


def run(args):
    from explainer.conformance import report        # the toy's stories load torch; the parser stays light
    rows = report.run_all(progress=lambda s: print(f"conformance: {s} ...", file=sys.stderr, flush=True),
                          only="the pins the product shows" if args.pins else None)
    if args.json:
        print(json.dumps(report.to_json(rows), indent=2, default=str))
    else:
        report.print_table(rows)
    return 0 if report.all_agree(rows) else 1
