"""``python -m explainer doctor [--json]``: is this machine ready for the notebooks? One row per check, then the
one command to run next.

Runs on a bare Python 3.10+ before anything is installed (``ENGINE = False``: no torch to check the engine's
settings with; the gloo row checks them when torch is there). Exit 0 only when every required row passes.
Marks: ✓ passed; ✗ to fix (the fix follows); – not available on this platform (what that means follows; never
a failure); · not checked yet (it needs torch first). The vLLM 0.32 environment is optional: shown, never failing.
"""

import json
import sys

from explainer.doctor import CHECKS
from explainer.doctor import rows as doctor_rows
from explainer.doctor.check import Check, Host, next_step, run_checks
from explainer.workshop import jail

HELP = ("check this machine (Python, torch CPU build, dot, JupyterLab + widgets, /dev/shm, gloo, checkpoint, "
        "the workshop jail; optional: the vLLM environment) and say the one command to run next; works "
        "before set-up")
ENGINE = False                      # a bare Python (no torch) must get its rows, not a traceback


def check_workshop_jail(host: Host) -> Check:
    """bubblewrap making the workshop checks' jail (a real ``bwrap`` run with the jail's namespaces and binds)."""
    name = "workshop jail"
    if host.windows:                  # the checks fork from a warm process (explainer.workshop.grader_process)
        return Check(name, False, "not available here: Windows has no fork, so the exercise checks do not run "
                     "here; the notebooks do. For the exercises use WSL2 (Ubuntu) and set up there as on Linux",
                     unavailable=True)
    if host.system != "linux":
        return Check(name, False, f"not available here: {host.label} has no Linux namespaces, so exercise checks "
                     "run your code under resource limits only, not isolated from this machine (the verdicts are "
                     "the same)", unavailable=True)
    jail.available.cache_clear()
    ok, why = jail.available()
    if ok:
        return Check(name, True, "bubblewrap: learner code runs isolated (namespaces, unprivileged uid)")
    if "EXPLAINER_WORKSHOP_JAIL" in why:
        fix, by_setup = "unset EXPLAINER_WORKSHOP_JAIL", False
    elif "not installed" in why:
        fix, by_setup = ("sudo apt-get install bubblewrap", True) if host.apt else \
            ("install bubblewrap with your package manager (e.g. sudo dnf install bubblewrap)", False)
    else:
        fix, by_setup = ("allow unprivileged user namespaces (Ubuntu 24.04: sudo sysctl "
                         "kernel.apparmor_restrict_unprivileged_userns=0); without them checks run under rlimits "
                         "only"), False
    return Check(name, False, f"not isolated: {why}", fix, by_setup=by_setup)


def configure(parser):
    parser.add_argument("--json", action="store_true", help="print one JSON object")


MARKS = {"ok": "✓", "failed": "✗", "optional": "✗", "not available here": "–", "not checked": "·"}
ASCII_MARKS = {"ok": "OK", "failed": "XX", "optional": "XX", "not available here": "--", "not checked": ".."}


def _marks() -> dict[str, str]:
    enc = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "".join(MARKS.values()).encode(enc)
        return MARKS
    except (UnicodeEncodeError, LookupError):              # e.g. a Windows console code page
        return ASCII_MARKS


def summary(rows: list[Check]) -> str:
    by = lambda status: sum(r.status == status for r in rows)            # noqa: E731
    total = sum(r.seconds for r in rows)
    parts = [f"{by('ok')} of {len(rows)} checks passed in {total:.1f} s"]
    if by("failed"):
        parts.append(f"{by('failed')} to fix")
    if by("not checked"):
        parts.append(f"{by('not checked')} not checked yet (they need torch)")
    if by("not available here"):
        parts.append(f"{by('not available here')} not available here (nothing to fix)")
    if by("optional"):
        parts.append(f"{by('optional')} optional row(s) not met (not needed for the notebooks)")
    return "; ".join(parts)


def run(args):
    host = Host.here()
    marks = _marks()
    width = len(doctor_rows.VLLM_CHECK)

    def show(r):
        print(f"{marks[r.status]} {r.name:{width}s}  {r.detail}", flush=True)
        if r.status in ("failed", "optional") and r.fix:
            print(f"{'':{width + 4}s}fix: {r.fix}", flush=True)

    if not args.json:
        print(f"explainer doctor: {host.label} {host.machine}, Python {sys.version.split()[0]} ({sys.executable})",
              flush=True)
    rows = run_checks((*CHECKS, check_workshop_jail), host=host, on_row=None if args.json else show)
    command, why = next_step(rows, host)
    failed = any(r.blocking for r in rows)
    if args.json:
        print(json.dumps({"ok": not failed, "platform": {"system": host.system, "machine": host.machine},
                          "checks": [{**r.__dict__, "status": r.status} for r in rows],
                          "next": {"command": command, "why": why}}, indent=2))
        return 1 if failed else 0
    print(summary(rows))
    print(f"next: {command}")
    print(f"      ({why})")
    return 1 if failed else 0
