"""Execute notebooks in place, top to bottom in a fresh kernel, storing outputs and widget state.

Usage: python scripts/execute_notebooks.py notebooks/*.ipynb
Widget state is stored so the static HTML export (and JupyterLab, before anything runs) can step through frames
without a kernel. The file is written in the stored form JupyterLab leaves unchanged when it opens and saves it
(``explainer.notebook_file.normalize``: one stream output per run of same-name stream outputs, the kernelspec,
collapsed outputs, integral numbers, only the widget models an output shows).
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from explainer.notebook_file import normalize


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    client = NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(nbformat.from_dict(normalize(nb)), path)
    return time.perf_counter() - t0


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        seconds = execute(Path(arg))
        print(f"executed {arg} in {seconds:.1f} s")
