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
    _coalesce_streams(nb)
    nb.metadata.pop("widgets", None) if not _has_widgets(nb) else None
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def _coalesce_streams(nb) -> None:
    """One stream output per run of same-name stream outputs, as nbval compares them and the site shows them (the
    kernel splits a cell's prints wherever it happens to flush, which would differ from run to run)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if (out.get("output_type") == "stream" and prev is not None and prev.get("output_type") == "stream"
                    and prev.get("name") == out.get("name")):
                prev["text"] = "".join(prev["text"]) + "".join(out["text"])
            else:
                merged.append(out)
        cell.outputs = merged


def _has_widgets(nb) -> bool:
    return any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        seconds = execute(Path(arg))
        print(f"executed {arg} in {seconds:.1f} s")
