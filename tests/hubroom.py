"""A real room hub for tests: ``python -m explainer hub serve --port 0`` on loopback, as root, from the venv
``make hub`` built (``EXPLAINER_HUB_PREFIX``, default /opt/explainer-hub), with a state folder, a homes folder
and an account prefix of this run only; stopped by its own pid and every account it made removed.

``hub_or_skip()`` says why a machine cannot run it (not root, not Linux, no hub venv) and refuses a hub venv
whose copy of the package is not this checkout's (CI builds it with ``make hub`` right before; by hand:
``sudo make hub``).
"""

from __future__ import annotations

import filecmp
import os
import sys
from pathlib import Path

import pytest

from explainer.hub.process import HubProcess

REPO = Path(__file__).resolve().parents[1]
PREFIX = Path(os.environ.get("EXPLAINER_HUB_PREFIX", "/opt/explainer-hub"))


def installed_package() -> Path | None:
    found = list((PREFIX / "venv" / "lib").glob("python3*/site-packages/explainer"))
    return found[0] if found else None


def differing_files(installed: Path) -> list[str]:
    out = []
    for path in (REPO / "explainer").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            other = installed / path.relative_to(REPO / "explainer")
            if not other.is_file() or not filecmp.cmp(path, other, shallow=False):
                out.append(str(path.relative_to(REPO)))
    return out


def hub_or_skip() -> None:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the hub runs as root on Linux (it makes a Unix account per learner)")
    installed = installed_package()
    if installed is None or not (PREFIX / "proxy").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"no hub set up in {PREFIX}: make test runs `make hub` first")
        pytest.skip(f"no hub set up in {PREFIX} (sudo make hub)")
    stale = differing_files(installed)
    if stale:
        pytest.fail(f"{PREFIX}/venv holds another copy of the package than this checkout ({', '.join(stale[:3])} "
                    "differ): run `sudo make hub` again")


class Hub(HubProcess):
    """The test hub: 2 GiB and 192 processes per learner, at most 14 learners."""

    def __init__(self):
        super().__init__(str(PREFIX), f"xh{os.getpid() % 100000}-", pythonpath=str(REPO),
                         extra=["--memory", "2", "--processes", "192", "--max-learners", "14"])
