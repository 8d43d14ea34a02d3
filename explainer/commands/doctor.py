"""``python -m explainer doctor [--json]``: is this machine ready for the notebooks? One ✓/✗ row per check.

Exit 0 only when every required check passes (the vLLM 0.32 environment is optional: shown, never failing);
each ✗ row is followed by the command that fixes it.
"""

import json
import sys

from explainer.doctor import CHECKS, Check, run_checks
from explainer.workshop import jail

HELP = ("check this machine (Python, torch CPU build, dot, JupyterLab + widgets, /dev/shm, gloo, checkpoint, "
        "the workshop jail; optional: the vLLM 0.32 environment)")


def check_workshop_jail() -> Check:
    """bubblewrap making the workshop checks' jail (a real ``bwrap`` run with the jail's namespaces and binds)."""
    jail.available.cache_clear()
    ok, why = jail.available()
    return Check("workshop jail", ok, "bubblewrap: learner code runs isolated (namespaces, unprivileged uid)"
                 if ok else f"not isolated: {why}",
                 "" if ok else "sudo apt-get install bubblewrap (Linux; elsewhere checks run under rlimits only)")


def configure(parser):
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _marks() -> tuple[str, str]:
    enc = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "✓✗".encode(enc)
        return "✓", "✗"
    except (UnicodeEncodeError, LookupError):              # e.g. a Windows console code page
        return "OK", "XX"


def run(args):
    yes, no = _marks()
    width = len("vLLM 0.32 environment")

    def show(r):
        print(f"{yes if r.ok else no} {r.name:{width}s}  {r.detail}", flush=True)
        if not r.ok:
            print(f"  {'':{width}s}fix: {r.fix}", flush=True)

    rows = run_checks((*CHECKS, check_workshop_jail), on_row=None if args.json else show)
    failed = [r for r in rows if not r.ok and not r.optional]
    optional = [r for r in rows if not r.ok and r.optional]
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [r.__dict__ for r in rows]}, indent=2))
        return 1 if failed else 0
    total = sum(r.seconds for r in rows)
    print(f"{len(rows) - len(failed) - len(optional)} of {len(rows)} checks passed in {total:.1f} s"
          + ("" if not failed else f"; fix the {len(failed)} row(s) marked {no} and run doctor again")
          + ("" if not optional else f"; {len(optional)} optional row(s) not met (not needed for the notebooks)"))
    return 1 if failed else 0
