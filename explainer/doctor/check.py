"""One row of the doctor (``Check``), running the rows, and the one command to run next.

A row is passed, failed (with its fix), optional (a ✗ that does not fail), not available here (this platform
cannot have it: never a failure) or not checked yet (it needs torch first).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from explainer.doctor.host import TORCH_VERSION, Host, python_typed


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    seconds: float = 0.0
    optional: bool = False               # shown, but a ✗ here does not fail the doctor (the notebooks work without)
    unavailable: bool = False            # this platform cannot have it: "not available here", never a failure
    unchecked: bool = False              # not run: it needs something that is missing (torch) first
    by_setup: bool = False               # the set-up (make lab) installs what this row is missing

    @property
    def status(self) -> str:
        if self.ok:
            return "ok"
        if self.unavailable:
            return "not available here"
        if self.unchecked:
            return "not checked"
        return "optional" if self.optional else "failed"

    @property
    def blocking(self) -> bool:
        """Counts against the machine: a required row that failed or could not be checked yet."""
        return self.status in ("failed", "not checked")


def torch_problem() -> str | None:
    """None when torch imports here, else why not (one line)."""
    try:
        import torch  # noqa: F401
    except Exception as exc:                               # noqa: BLE001 - ImportError, or a broken install (OSError)
        return f"{type(exc).__name__}: {exc}"
    return None


def missing_package(host: Host, what: str) -> tuple[str, bool]:
    """(fix, by_setup) for a package the set-up installs: outside the set-up's venv the set-up is the fix;
    inside it, pip installs the one thing."""
    if host.in_venv():
        return f"{python_typed()} -m pip install {what}", False
    return host.setup(), True


def needs_torch(name: str, host: Host) -> Check | None:
    """A "not checked yet" row when torch does not import here (the torch row says why)."""
    if torch_problem() is None:
        return None
    return Check(name, False, "not checked yet: needs torch (see the torch row)",
                 missing_package(host, f"torch=={TORCH_VERSION}")[0], unchecked=True, by_setup=True)


def run_checks(checks, host: Host | None = None, on_row=None) -> list[Check]:
    """Run each check in order; ``on_row(check)`` sees each row as soon as it is known."""
    host = host or Host.here()
    out = []
    for check in checks:
        t0 = time.monotonic()
        try:
            row = check(host)
        except Exception as exc:                           # noqa: BLE001 - a crashing check is a failed row
            row = Check(check.__name__.removeprefix("check_"), False, f"{type(exc).__name__}: {exc}",
                        "report this with the output of python -m explainer doctor")
        row.seconds = time.monotonic() - t0
        out.append(row)
        if on_row is not None:
            on_row(row)
    return out


def next_step(rows: list[Check], host: Host) -> tuple[str, str]:
    """The one command to run next, and why: a fix the set-up cannot make comes first (Graphviz on a Mac),
    then the set-up (or the doctor in the environment it built), then opening the notebooks."""
    blocking = [r for r in rows if r.blocking]
    if not blocking:
        return host.open_notebooks(), "this machine is ready: open the notebooks"
    own = [r for r in blocking if not r.by_setup]
    if own:
        return own[0].fix, f"fix the {own[0].name} row, then run the doctor again"
    if host.venv_ready():
        return host.doctor(), f"the set-up's environment ({host.venv()}) has these; check it, not {sys.executable}"
    return host.setup(), host.setup_does()
