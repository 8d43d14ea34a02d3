"""The machine the doctor talks to, and the commands its learner types there: ``make lab`` on Linux and macOS,
PowerShell on Windows (no ``make``), ``bash scripts/setup.sh lab`` where ``make`` is missing. Tests build hosts
of other platforms to see what their learners are told.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
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


