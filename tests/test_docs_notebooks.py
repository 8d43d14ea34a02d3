"""nbval and the site read the same notebooks.

- nbval fails when a stored output no longer matches what the code prints (a one-character change in a temp
  copy of a notebook), and passes on the unchanged copy: the stored outputs are checked.
- The site is built from the stored outputs, not from anything else: in a temp copy of the repository a
  changed stored output is what the page shows; a cell tagged `remove-cell` (check-only cells) is not on
  the page; pages other parts of the repo add (instructor guide, workshop notebooks, SOURCES.md) join the
  table of contents, and the build stays free of warnings.
- (tests/test_docs_site.py) every stream output stored in the real notebooks appears on its page exactly,
  in order: the site shows what nbval checked.
"""

from __future__ import annotations

import copy
import json
import shutil
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_docs_site import JS, REPO, build_site

pytestmark = [pytest.mark.slow]

NB = REPO / "notebooks" / "01_canvas_sampler.ipynb"


def _checked_stdout_cell(cells: list[dict]) -> int:
    """Index of the first code cell nbval compares that printed to stdout."""
    for i, c in enumerate(cells):
        src = "".join(c["source"])
        tags = set(c.get("metadata", {}).get("tags", []))
        if (c["cell_type"] == "code" and "NBVAL_IGNORE_OUTPUT" not in src and "NBVAL_SKIP" not in src
                and not tags & {"nbval-ignore-output", "nbval-skip", "remove-cell", "remove-output"}
                and any(o.get("name") == "stdout" for o in c["outputs"])):
            return i
    raise AssertionError(f"{NB.name} has no checked stdout cell")


def _nbval(path: Path) -> subprocess.CompletedProcess:
    (path.parent / "pytest.ini").write_text("[pytest]\n")
    for _ in range(3):   # a kernel that dies while starting (a port taken between pick and bind) is retried
        ran = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "explainer_nbval", "-q", "--nbval",
             "--nbval-current-env", "--nbval-sanitize-with", str(REPO / "tests" / "nbval" / "sanitize.cfg"),
             "--rootdir", str(path.parent), "-c", str(path.parent / "pytest.ini"), str(path)],
            capture_output=True, text=True, timeout=600, cwd=path.parent,
            env={**os.environ, "PYTHONPATH": str(REPO / "tests" / "nbval")})   # make test's nbval plugin
        if "Failure starting kernel" not in ran.stdout:
            return ran
    return ran


def test_nbval_fails_when_a_stored_output_changes(tmp_path):
    nb = json.loads(NB.read_text(encoding="utf-8"))
    k = _checked_stdout_cell(nb["cells"])
    nb["cells"] = nb["cells"][: k + 1]     # the set-up cells and the checked cell: enough, and quick

    same = tmp_path / "same.ipynb"
    same.write_text(json.dumps(nb), encoding="utf-8")
    ran = _nbval(same)
    assert ran.returncode == 0, ran.stdout[-3000:]

    changed = copy.deepcopy(nb)
    out = next(o for o in changed["cells"][k]["outputs"] if o.get("name") == "stdout")
    text = "".join(out["text"])
    out["text"] = [text.replace(text.strip()[0], "#", 1)]     # one character
    path = tmp_path / "changed.ipynb"
    path.write_text(json.dumps(changed), encoding="utf-8")
    ran = _nbval(path)
    assert ran.returncode == 1, ran.stdout[-3000:]
    assert "1 failed" in ran.stdout and "stdout" in ran.stdout, ran.stdout[-3000:]


@pytest.mark.skipif(not (JS / "dist" / "embed-amd.js").exists(), reason="html-manager not set up")
def test_the_site_renders_the_stored_outputs_of_a_temp_copy(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "docs", repo / "docs", ignore=shutil.ignore_patterns("_build"))
    shutil.copy(REPO / "CONTRIBUTING.md", repo / "CONTRIBUTING.md")   # docs/contributing.md includes it
    (repo / "notebooks" / "workshop").mkdir(parents=True)
    for nb in REPO.glob("notebooks/*.ipynb"):
        shutil.copy(nb, repo / "notebooks" / nb.name)
    shutil.copy(REPO / "notebooks" / "glossary.md", repo / "notebooks" / "glossary.md")   # the glossary page's words
    for nb in REPO.glob("notebooks/workshop/*.ipynb"):          # the workshop route links the exercises
        shutil.copy(nb, repo / "notebooks" / "workshop" / nb.name)
    # the pages other parts of the repo may add
    (repo / "docs" / "instructor-guide.md").write_text("# Instructor guide\n\nSENTINEL-GUIDE\n")
    (repo / "SOURCES.md").write_text("# Sources\n\nSENTINEL-SOURCES\n")

    nb = json.loads(NB.read_text(encoding="utf-8"))
    k = _checked_stdout_cell(nb["cells"])
    shown = nb["cells"][k]
    shown["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["SENTINEL-STORED stored text\n"]}]
    check_only = copy.deepcopy(shown)
    check_only["metadata"] = {"tags": ["check-only", "remove-cell"],
                              "jupyter": {"source_hidden": True, "outputs_hidden": True}}
    check_only["id"] = "sentinel-removed"                     # cell ids are unique within a notebook
    check_only["source"] = ["print('SENTINEL-REMOVED')"]
    check_only["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["SENTINEL-REMOVED\n"]}]
    nb["cells"].insert(k + 1, check_only)
    (repo / "notebooks" / NB.name).write_text(json.dumps(nb), encoding="utf-8")
    workshop = {"cells": [{"cell_type": "markdown", "id": "w1-title", "metadata": {},
                           "source": ["# Workshop SENTINEL-WORKSHOP\n"]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (repo / "notebooks" / "workshop" / "w1.ipynb").write_text(json.dumps(workshop))

    done = build_site(repo, tmp_path / "out")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-4000:]
    out = tmp_path / "out" / "html"
    page = (out / "notebooks" / NB.with_suffix(".html").name).read_text(encoding="utf-8")
    assert "SENTINEL-STORED stored text" in page           # the stored output, as stored
    assert "SENTINEL-REMOVED" not in page                    # neither its source nor its output
    index = (out / "docs" / "index.html").read_text(encoding="utf-8")
    for href in ("instructor-guide.html", "../SOURCES.html", "../notebooks/workshop/w1.html"):
        assert f'href="{href}"' in index, href
    assert not (out / "docs" / "sources.html").exists()     # SOURCES.md replaces docs/sources.md
    assert "SENTINEL-WORKSHOP" in (out / "notebooks" / "workshop" / "w1.html").read_text(encoding="utf-8")
