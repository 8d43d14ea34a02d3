"""What a reviewer's diff holds after a notebook is re-executed (scripts/execute_notebooks.py writes the stored form
of explainer.notebook_file): notebook 1, executed, then executed again, differs only in the timings nbval sanitizes
(and the clock times printed beside them); executed once more with two cells added (a markdown cell and a code
cell that shows a widget), the file gains those two cells, their output and their widget models, and every other
cell and stored widget model is unchanged but for the execution counts after the new code cell.
"""

from __future__ import annotations

import configparser
import copy
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from explainer.notebook_file import WIDGET_VIEW, connected, widget_models

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "01_canvas_sampler.ipynb"
CLOCK = (re.compile(r"\b\d\d:\d\d:\d\d\b"), "HH:MM:SS")       # "ran at 07:42:18, took 443 ms" (a knob's last run)

pytestmark = pytest.mark.slow


def sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "tests" / "nbval" / "sanitize.cfg", encoding="utf-8")
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()] + [CLOCK]


def sanitized(line: str) -> str:
    for pattern, replace in sanitizers():
        line = pattern.sub(replace, line)
    return line


def execute(path: Path) -> str:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "execute_notebooks.py"), str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stderr[-3000:]
    return path.read_text(encoding="utf-8")


def changed_lines(a: str, b: str) -> list[tuple[str, str]]:
    """The (old, new) line pairs of a line diff; a line only added or only removed pairs with ''."""
    pairs = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False).get_opcodes():
        if op != "equal":
            old, new = a.splitlines()[i1:i2], b.splitlines()[j1:j2]
            pairs += list(zip(old + [""] * (len(new) - len(old)), new + [""] * (len(old) - len(new))))
    return pairs


def without_counts(cell: dict) -> dict:
    cell = copy.deepcopy(cell)
    cell.pop("execution_count", None)
    for out in cell.get("outputs", []):
        out.pop("execution_count", None)
    return json.loads(sanitized(json.dumps(cell)))


def test_re_executing_changes_only_timings_and_two_added_cells_are_a_diff_of_two_cells(tmp_path):
    first = tmp_path / NOTEBOOK.name
    shutil.copy(NOTEBOOK, first)
    a = execute(first)
    b = execute(first)
    diff = changed_lines(a, b)
    assert len(diff) < 20, f"{len(diff)} lines changed by a second execution"
    assert all(sanitized(old) == sanitized(new) for old, new in diff), \
        "a second execution changed more than timings:\n" + "\n".join(f"- {o[:150]}\n+ {n[:150]}" for o, n in diff[:6])

    # two cells added after the first cell that shows a widget: a markdown cell and a code cell showing a slider
    nb = json.loads(b)
    at = next(i for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})) + 1
    added = [{"cell_type": "markdown", "id": "added-note", "metadata": {}, "source": "One more knob."},
             {"cell_type": "code", "id": "added-knob", "metadata": {}, "execution_count": None, "outputs": [],
              "source": "import ipywidgets\nipywidgets.IntSlider(value=3, max=9, description='added')"}]
    nb["cells"][at:at] = added
    first.write_text(json.dumps(nb))
    c = execute(first)
    before, after = json.loads(b), json.loads(c)

    assert [x["id"] for x in after["cells"]] == [x["id"] for x in before["cells"][:at]] + ["added-note", "added-knob"] \
        + [x["id"] for x in before["cells"][at:]]
    kept = after["cells"][:at] + after["cells"][at + 2:]
    assert [json.loads(sanitized(json.dumps(x))) for x in kept[:at]] == \
        [json.loads(sanitized(json.dumps(x))) for x in before["cells"][:at]], "a cell above the added ones changed"
    assert [without_counts(x) for x in kept[at:]] == [without_counts(x) for x in before["cells"][at:]], \
        "a cell below the added ones changed more than its execution count"
    assert [x.get("execution_count") for x in kept[at:] if x["cell_type"] == "code"] == \
        [x["execution_count"] + 1 for x in before["cells"][at:] if x["cell_type"] == "code"]
    old_models, new_models = widget_models(before), widget_models(after)
    assert json.loads(sanitized(json.dumps({k: new_models.get(k) for k in old_models}))) == \
        json.loads(sanitized(json.dumps(old_models))), "a stored widget model was renamed or changed"
    view = after["cells"][at + 1]["outputs"][0]["data"][WIDGET_VIEW]["model_id"]
    assert set(new_models) - set(old_models) == set(connected(new_models, {view})), \
        "the added models are not exactly the new cell's widget"
    lines = changed_lines(b, c)
    counts = [p for p in lines if all('"execution_count"' in s or not s.strip() for s in p)]
    print(f"two cells added: {len(lines)} changed lines, {len(counts)} of them execution counts; "
          f"{len(new_models) - len(old_models)} widget models added")
