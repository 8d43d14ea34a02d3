"""Notebooks 2 and 3 ask before they tell (#31 item 5): a workshop stop right before the section that answers an
exercise, the section opening with a warning, and nothing visible above the stop that gives the answer.

"Visible" is the markdown outside folded ``<details>`` and the text outputs of code cells. The answer is the
sentence that says which state fields state sync sends (`sync-fields`) and the gate's ``getattr(...,
"supports_tensor_dict", False)`` (`tensor-dict-gate`). Each pattern must match the notebook as a whole (its
folded answer), so a pattern that can no longer find the answer fails the test instead of passing silently.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
FIELDS = r"(draft_tokens|is_encoder_phase|self_conditioning_embeds)"
CASES = {   # notebook -> (exercise, the heading of the section that answers it, the answer as a pattern)
    "02_pipeline_parallel.ipynb": ("sync-fields", "## 5 · The alternative: sync the state",
                                   rf"{FIELDS}[^.\n]*\b(go|goes|sent|sync|synced)\b|\b(send|sends|sync|syncs)\b[^.\n]*{FIELDS}"),
    "03_cpu_communicator.ipynb": ("tensor-dict-gate", "## 3 · Two simulated nodes, after #40150",
                                  r"getattr\([^)\n]*supports_tensor_dict"),
}


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def visible(cell: dict, unfold: bool = False) -> str:
    if cell["cell_type"] == "markdown":
        text = _text(cell["source"])
        return text if unfold else re.sub(r"<details>.*?</details>", "", text, flags=re.S)
    outs = [_text(o.get("text", "")) + _text(o.get("data", {}).get("text/plain", ""))
            for o in cell.get("outputs", [])]
    return _text(cell["source"]) + "\n" + "\n".join(outs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_notebook_stops_before_the_answer_and_hides_nothing_above(name):
    exercise, heading, answer = CASES[name]
    cells = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))["cells"]
    stops = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
             and _text(c["source"]).startswith("**Workshop: do the exercise now.**")]
    assert len(stops) == 1, f"{name}: one workshop stop expected, found {len(stops)}"
    stop, section = cells[stops[0]], _text(cells[stops[0] + 1]["source"])
    assert f"[`{exercise}`](workshop/exercises.ipynb)" in _text(stop["source"])
    assert section.startswith(heading), f"{name}: the stop is not right before {heading!r}"
    assert "> ⚠ **Workshop:**" in section.split("\n\n")[1] and exercise in section.split("\n\n")[1]
    # the pattern finds the answer somewhere (folded below the stop), and nowhere visible above it
    assert any(re.search(answer, visible(c, unfold=True)) for c in cells[stops[0]:]), "the pattern finds nothing"
    above = [(i, m.group(0)) for i, c in enumerate(cells[:stops[0]]) for m in [re.search(answer, visible(c))] if m]
    assert not above, f"{name}: the answer of {exercise} is visible before its stop: {above}"


def _pictures(cell: dict) -> str:
    """The diagrams a code cell shows (SVG) and the DOT source it prints, as text."""
    outs = [_text(v) for o in cell.get("outputs", []) for kind, v in o.get("data", {}).items()
            if kind.startswith("image/svg")]
    outs += [_text(o.get("text", "")) for o in cell.get("outputs", []) if "digraph" in _text(o.get("text", ""))]
    return "\n".join(outs)


def test_no_diagram_before_the_sync_fields_stop_names_a_field():
    """Notebook 2's diagrams above its workshop stop (§1's stages, §3's never-sent edge) draw that a part reads the
    state, not which field (they used to label the three fields rank 0 reads: the exercise's answer). The same
    diagram after the stop (§5, state sync) names them, so the test cannot pass on a notebook without diagrams."""
    cells = json.loads((NOTEBOOKS / "02_pipeline_parallel.ipynb").read_text(encoding="utf-8"))["cells"]
    stop = next(i for i, c in enumerate(cells) if _text(c["source"]).startswith("**Workshop: do the exercise now.**"))
    drawn = [i for i, c in enumerate(cells[:stop]) if _pictures(c)]
    assert len(drawn) >= 2, "the diagrams of §1 and §3 are gone"
    named = [(i, m.group(0)) for i in drawn for m in [re.search(FIELDS, _pictures(cells[i]))] if m]
    assert not named, f"a diagram before the sync-fields stop names a field: {named}"
    assert any(re.search(FIELDS, _pictures(c)) for c in cells[stop:]), "no diagram after the stop names the fields"
