"""nbval settings for the notebooks, loaded as a plugin (``-p explainer_nbval`` with tests/nbval on PYTHONPATH)
so that nothing but notebooks sits in the notebooks folder.

SVG is never compared (each diagram's DOT source is printed and compared instead). When
EXPLAINER_NBVAL_KERNEL_PREFIX is set, the run refuses to start unless the ``python3`` kernel it will use
runs from that environment (``make test`` checks the notebooks in the environment ``make lab`` builds).
"""

import os
import sys
from pathlib import Path

import pytest

SKIP = ("image/svg+xml", "image/png")


def pytest_collectstart(collector):
    if str(getattr(collector, "path", "")).endswith(".ipynb"):
        collector.skip_compare += SKIP


def pytest_configure(config):
    want = os.environ.get("EXPLAINER_NBVAL_KERNEL_PREFIX")
    if not want:
        return
    from jupyter_client.kernelspec import KernelSpecManager

    argv0 = KernelSpecManager().get_kernel_spec("python3").argv[0]
    exe = Path(sys.executable if argv0 in ("python", "python3") else argv0)
    if not str(exe.absolute()).startswith(str(Path(want).absolute()) + os.sep):
        raise pytest.UsageError(f"explainer_nbval: kernel 'python3' runs {exe}, not from {want}; "
                         f"set JUPYTER_PATH={want}/share/jupyter")
    print(f"explainer_nbval: notebooks run on the kernel {exe}")
