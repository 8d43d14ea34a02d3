"""The rows for what the set-up installs: Python, torch (version and build), Graphviz's ``dot`` rendering a graph,
JupyterLab with the widget extension. Each fix is this platform's command (brew on a Mac, winget on Windows).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from explainer.doctor.check import Check, missing_package, torch_problem
from explainer.doctor.host import MIN_PYTHON, TORCH_VERSION, Host, python_typed


def check_python(host: Host) -> Check:
    v = sys.version_info
    ok = v[:2] >= MIN_PYTHON
    return Check("Python", ok, f"Python {platform.python_version()} ({sys.executable})",
                 "" if ok else f"install Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer, then: {host.setup()}")


def check_torch(host: Host) -> Check:
    why = torch_problem()
    if why is not None:
        fix, by_setup = missing_package(host, f"torch=={TORCH_VERSION}")
        where = "" if host.in_venv() else "; the set-up installs it into .venv"
        return Check("torch", False, f"cannot import torch in {sys.executable} ({why}){where}", fix,
                     by_setup=by_setup)
    import torch
    version = torch.__version__
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    build = "CPU build" if cuda is None and hip is None else f"CUDA {cuda} build" if cuda else f"ROCm {hip} build"
    ok = version.split("+")[0] == TORCH_VERSION and build == "CPU build"
    fix = (f"{python_typed()} -m pip uninstall -y torch && {python_typed()} -m pip install torch=={TORCH_VERSION} "
           "(the CPU build: see the README's 'torch')")
    return Check("torch", ok, f"torch {version}, {build} (wanted {TORCH_VERSION}, CPU build)", "" if ok else fix)


def install_graphviz(host: Host) -> tuple[str, bool]:
    """(the command that installs the `dot` binary here, whether the set-up runs it itself)."""
    if host.system == "darwin":
        return "brew install graphviz", False
    if host.windows:
        return "winget install graphviz, then open a new terminal (so `dot` is on PATH)", False
    if host.apt:
        return "sudo apt-get install graphviz", True
    return "install Graphviz with your package manager (e.g. sudo dnf install graphviz)", False


def check_dot(host: Host) -> Check:
    fix, by_setup = install_graphviz(host)
    exe = shutil.which("dot")
    if exe is None:
        return Check("graphviz dot", False, "`dot` is not on PATH (the notebooks' diagrams need it)", fix,
                     by_setup=by_setup)
    try:
        version = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stderr.strip()
        svg = subprocess.run([exe, "-Tsvg"], input="digraph { rank0 -> rank1 }", capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("graphviz dot", False, f"{exe} does not run: {exc}", fix)
    if svg.returncode != 0 or "<svg" not in svg.stdout:
        return Check("graphviz dot", False, f"{exe} cannot render SVG: {svg.stderr.strip()[:200]}",
                     "sudo dot -c  (registers Graphviz's plugins), or reinstall Graphviz")
    return Check("graphviz dot", True, f"{exe}: {version}")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_jupyterlab(host: Host) -> Check:
    lab, widgets, ext = _version("jupyterlab"), _version("ipywidgets"), _version("jupyterlab_widgets")
    fix, by_setup = missing_package(host, '"jupyterlab>=4,<5" "ipywidgets>=8,<9" "jupyterlab_widgets>=3,<4" ipykernel')
    problems = []
    if lab is None or not lab.startswith("4."):
        problems.append(f"JupyterLab {lab or 'missing'} (wanted 4.x)")
    if widgets is None or not widgets.startswith("8."):
        problems.append(f"ipywidgets {widgets or 'missing'} (wanted 8.x)")
    if ext is None or not ext.startswith("3."):              # jupyterlab_widgets 3.x is ipywidgets 8's lab side
        problems.append(f"jupyterlab_widgets {ext or 'missing'} (wanted 3.x, the match for ipywidgets 8)")
    manifest = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyter-widgets" / \
        "jupyterlab-manager" / "package.json"
    if ext is not None and not manifest.is_file():
        problems.append(f"the widget extension's files are missing ({manifest})")
    if _version("ipykernel") is None:
        problems.append("ipykernel missing")
    if problems:
        return Check("JupyterLab + widgets", False, "; ".join(problems), fix, by_setup=by_setup)
    return Check("JupyterLab + widgets", True,
                 f"JupyterLab {lab}, widget extension jupyterlab_widgets {ext} (ipywidgets {widgets}) in {sys.prefix}")


