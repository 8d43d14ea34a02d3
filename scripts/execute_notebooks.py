"""Execute notebooks in place, top to bottom in a fresh kernel, storing outputs and widget state.

Usage: python scripts/execute_notebooks.py notebooks/*.ipynb
Widget state is stored so the static HTML export can step through frames without a kernel.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    client = NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nb.metadata.pop("widgets", None) if not _has_widgets(nb) else None
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def _has_widgets(nb) -> bool:
    return any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        seconds = execute(Path(arg))
        print(f"executed {arg} in {seconds:.1f} s")
