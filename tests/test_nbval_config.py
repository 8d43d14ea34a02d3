"""The nbval settings live in tests/nbval (a plugin, so the notebooks folder holds only notebooks) and still
apply: a notebook whose stored SVG differs from what its cell draws now passes with the plugin and fails
without it; the sanitizer still hides graphviz's memory address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_notebooks_folder_lists_only_notebooks():
    # notebooks, the glossary their links open (JupyterLab serves this folder) and the workshop folder holding
    # only notebooks: no test configuration beside them
    shown = [p for p in (REPO / "notebooks").rglob("*") if not any(part.startswith(".") for part in p.parts)]
    files = [p.relative_to(REPO / "notebooks").as_posix() for p in shown if p.is_file()]
    assert files and all(name.endswith(".ipynb") or name == "glossary.md" for name in files), files
    assert {p.name for p in shown if p.is_dir()} <= {"workshop"}


def _notebook(path: Path) -> None:
    cell = {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {},
            "source": ["import graphviz\n", "graphviz.Source('digraph { rank0 -> rank1 }')"],
            "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                         "data": {"image/svg+xml": ["<svg>a layout from another graphviz version</svg>"],
                                  "text/plain": ["<graphviz.sources.Source at 0x7f0000000000>"]}}]}
    path.write_text(json.dumps({"cells": [cell], "nbformat": 4, "nbformat_minor": 5,
                                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}}}))


def _nbval(nb: Path, plugin: bool) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
           "--nbval-sanitize-with", str(REPO / "tests" / "nbval" / "sanitize.cfg"), str(nb), "-q",
           "--rootdir", str(nb.parent)]
    if plugin:
        cmd[3:3] = ["-p", "explainer_nbval"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests" / "nbval"), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    return subprocess.run(cmd, cwd=nb.parent, env=env, capture_output=True, text=True, timeout=300)


def test_svg_is_skipped_only_with_the_plugin(tmp_path):
    nb = tmp_path / "diagram.ipynb"
    _notebook(nb)
    with_plugin = _nbval(nb, plugin=True)
    assert with_plugin.returncode == 0, with_plugin.stdout[-3000:]
    without = _nbval(nb, plugin=False)
    assert without.returncode == 1 and "image/svg+xml" in without.stdout, without.stdout[-3000:]
