"""``python -m explainer conformance [--json]``: the toy against the real vLLM 0.32.0 (``.venv-vllm``), row by row.

Exit 0 when no row differs, 1 when one does, 2 (one line) when the vLLM environment is missing (``make vllm``).
"""

import json
import sys

HELP = "compare the toy with the real vLLM 0.32.0 on the same inputs (needs .venv-vllm: make vllm)"


def configure(parser):
    parser.add_argument("--json", action="store_true",
                        help='print {"vllm_version", "rows": [{"name", "toy", "vllm", "agree", ...}]}')


def run(args):
    from explainer.conformance import report        # the toy's stories load torch; the parser stays light
    rows = report.run_all(progress=lambda s: print(f"conformance: {s} ...", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report.to_json(rows), indent=2, default=str))
    else:
        report.print_table(rows)
    return 0 if report.all_agree(rows) else 1
