"""``python -m explainer scenario NAME [--backend inprocess|processes|hosts] [--pp-schedule sync|async] [--gate G]
[--engine toy|vllm] [--json]``."""

import json

from explainer import scenario as scenarios
from explainer import vllm_release

HELP = "run a named scenario (pp1, pp2-pre-fix, ..., comm-inter-node-fixed) and report its outcome"


def configure(parser):
    parser.add_argument("name", nargs="?", help="scenario name; omit to list them")
    parser.add_argument("--backend", default="inprocess",
                        help="inprocess (default), processes, or hosts (two network-namespace hosts, Linux as root)")
    parser.add_argument("--gate", default=None, help="PP scenarios: the communicator gate, pre-40150 or post-40150 "
                        "(default post-40150)")
    parser.add_argument("--pp-schedule", default="sync", dest="pp_schedule",
                        help="PP back-channel schedule: sync (vLLM #33960, default) or async (#42187)")
    parser.add_argument("--engine", default=None, help="comm-shared-ident-two-hosts: who runs the ranks, toy "
                        f"(default) or vllm (the real {vllm_release.ENGINE_LABEL} from .venv-vllm: make vllm)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args):
    if not args.name:
        for name, summary in scenarios.available().items():
            print(f"{name:26s} {summary}")
        return 0
    result = scenarios.run(args.name, backend=args.backend, pp_schedule=args.pp_schedule, gate=args.gate,
                             engine=args.engine)
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        print(result.summary or json.dumps(result.to_json(), indent=2, sort_keys=True))
    return 0
