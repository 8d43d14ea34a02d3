"""One row of the doctor (``Check``), running the rows, the one command to run next, and the machine the doctor
talks to (``Host``: the commands its learner types there: ``make lab`` on Linux and macOS, PowerShell on Windows (no
``make``), ``bash scripts/setup.sh lab`` where ``make`` is missing; tests build hosts of other platforms to see what
their learners are told).

A row is passed, failed (with its fix), optional (a ✗ that does not fail), not available here (this platform
cannot have it: never a failure) or not checked yet (it needs torch first).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


TORCH_VERSION = "2.13.0"
MIN_PYTHON = (3, 10)
SYSTEMS = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}
CHECKOUT = Path(__file__).resolve().parents[2]      # the project folder, when the package runs from a checkout
LAB_EXTRAS = "notebooks,hf"                         # what `make lab` installs (scripts/setup.sh lab)


@dataclass(frozen=True)
class Host:
    """The machine the doctor talks to, and the commands its learner types there."""
    system: str                      # sys.platform: linux, darwin, win32
    machine: str                     # platform.machine(): x86_64, arm64, AMD64
    checkout: Path | None            # the project folder (None: the package was installed, not checked out)
    make: bool = True                # `make` on PATH (Windows has none)
    apt: bool = True                 # apt-get on PATH (what scripts/setup.sh installs system packages with)
    prefix: Path = field(default_factory=lambda: Path(sys.prefix))   # the environment running the doctor

    @classmethod
    def here(cls) -> Host:
        checkout = CHECKOUT if (CHECKOUT / "Makefile").is_file() and (CHECKOUT / "notebooks").is_dir() else None
        return cls(sys.platform, platform.machine(), checkout, make=shutil.which("make") is not None,
                   apt=shutil.which("apt-get") is not None)

    @property
    def label(self) -> str:
        return SYSTEMS.get(self.system, self.system)

    @property
    def windows(self) -> bool:
        return self.system == "win32"

    def venv(self) -> Path | None:
        """The environment the set-up builds (``.venv`` in the checkout)."""
        return None if self.checkout is None else self.checkout / ".venv"

    def venv_ready(self) -> bool:
        """The set-up has built its environment and the doctor is not running in it."""
        venv = self.venv()
        if venv is None or _same(venv, self.prefix):
            return False
        return (venv / ("Scripts/python.exe" if self.windows else "bin/python")).exists()

    def in_venv(self) -> bool:
        venv = self.venv()
        return venv is not None and _same(venv, self.prefix)

    def bin(self, name: str) -> str:
        """A program of the set-up's environment as typed from the project folder."""
        return f".venv\\Scripts\\{name}" if self.windows else f".venv/bin/{name}"

    def setup(self) -> str:
        """The one command that sets everything up (what `make lab` does, without a terminal-full of steps)."""
        if self.checkout is None:
            return (f'{python_typed()} -m pip install torch=={TORCH_VERSION} "explainer[{LAB_EXTRAS}]" '
                    f"(torch's CPU build: see the project's README)")
        if self.windows:
            v = f"{sys.version_info[0]}.{sys.version_info[1]}"
            return (f"py -{v} -m venv .venv; {self.bin('python')} -m pip install torch=={TORCH_VERSION} "
                    f'-e ".[{LAB_EXTRAS}]"; {self.bin("python")} -m explainer doctor')
        return "make lab" if self.make else "bash scripts/setup.sh lab"

    def setup_does(self) -> str:
        if self.checkout is None:
            return "installs what the rows above are missing"
        if self.windows:
            return "creates .venv and installs torch, JupyterLab and this package into it (a few minutes), then checks again"
        then = ", then opens the notebooks" if self.make else ""
        return f"sets up .venv: torch, JupyterLab and this package (a few minutes){then}"

    def doctor(self) -> str:
        """The doctor in the set-up's environment."""
        return "make doctor" if self.make and not self.windows else f"{self.bin('python')} -m explainer doctor"

    def open_notebooks(self) -> str:
        if self.checkout is None or (not self.in_venv() and not self.venv_ready()):
            return "jupyter lab notebooks/"
        if self.windows:
            return (f"{self.bin('jupyter')} trust (Get-ChildItem notebooks -Recurse -Filter *.ipynb).FullName; "
                    f"{self.bin('jupyter')} lab notebooks")
        return "make lab" if self.make else f"{self.bin('jupyter')} lab notebooks/"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def python_typed() -> str:
    """This interpreter as the reader would type it (relative when it lives under the current folder)."""
    try:
        rel = os.path.relpath(sys.executable)
    except ValueError:                                     # Windows: another drive
        return sys.executable
    return rel if not rel.startswith("..") else sys.executable


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
