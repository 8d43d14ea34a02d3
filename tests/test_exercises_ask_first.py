"""Exercises ask before they tell (#31 item 5): nothing a learner sees before an exercise's check gives its answer.

"Sees" is what JupyterLab and the site show without a click: markdown, code, and the outputs of cells whose
outputs are not folded. The answer of each exercise is named by the words its solution is made of
(``ANSWER_WORDS`` of its module: its own solution and the solutions notebook's answer cell must hold them, so the
list cannot drift away from the answer). The stored
stub checks name what goes wrong with the stub (for `sync-fields`, two of the three fields), so they are stored
folded: in JupyterLab (``jupyter.outputs_hidden``, unfolded when the cell runs) and on the site (``hide-output``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from explainer.workshop import catalog

REPO = Path(__file__).resolve().parents[1]
EXERCISES = REPO / "notebooks" / "workshop" / "exercises.ipynb"
SOLUTIONS = REPO / "notebooks" / "workshop" / "solutions.ipynb"

# exercise -> (the function the learner writes, the words of its answer), from each exercise's module
MODULES = catalog.load_all()
ANSWERS = {ex: (m.ABOUT.function, m.ANSWER_WORDS) for ex, m in MODULES.items()}
# the cell that lists the runner's state fields: the choices of `sync-fields`, every field, not the answer
CHOICES = "request_state_fields()"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def visible(cell: dict) -> str:
    """What a learner sees of a cell without unfolding anything."""
    shown = [_text(cell["source"])]
    meta = cell.get("metadata", {})
    folded = meta.get("jupyter", {}).get("outputs_hidden") and "hide-output" in meta.get("tags", [])
    if cell["cell_type"] == "code" and not folded and CHOICES not in shown[0]:
        for out in cell.get("outputs", []):
            shown.append(_text(out.get("text", "")))
            shown.extend(_text(v) for v in out.get("data", {}).values())
    return "\n".join(shown)


def check_cell(cells: list[dict], exercise: str) -> int:
    calls = [k for k, c in enumerate(cells) if c["cell_type"] == "code"
             and re.match(rf'check\("{re.escape(exercise)}",', _text(c["source"]))]
    assert len(calls) == 1, f"{exercise}: {len(calls)} check cells"
    return calls[0]


def test_the_answer_words_are_the_solutions():
    cells = _cells(SOLUTIONS)
    for exercise, (function, words) in ANSWERS.items():
        answer = [_text(c["source"]) for c in cells if c["cell_type"] == "code" and f"def {function}(" in
                  _text(c["source"])]
        assert len(answer) <= 1, exercise                                # the solutions notebook's, if it has one
        for word in words:
            for source in answer + [MODULES[exercise].EXAMPLES["solution"].source]:
                assert word in source, f"{exercise}: a solution no longer uses {word!r}: update ANSWER_WORDS"


@pytest.mark.parametrize("exercise", ANSWERS)
def test_nothing_before_the_check_gives_the_answer(exercise):
    cells = _cells(EXERCISES)
    upto = check_cell(cells, exercise)
    _, words = ANSWERS[exercise]
    for k, cell in enumerate(cells[:upto + 1]):
        seen = visible(cell)
        for word in words:
            assert word not in seen, f"exercises.ipynb cell {k} shows {word!r} before exercise {exercise!r} is done"


@pytest.mark.parametrize("exercise", ANSWERS)
def test_the_stored_stub_check_fails_and_is_folded_until_run(exercise):
    cells = _cells(EXERCISES)
    cell = cells[check_cell(cells, exercise)]
    meta = cell["metadata"]
    assert meta.get("jupyter", {}).get("outputs_hidden") is True and meta.get("collapsed") is True, exercise
    assert "hide-output" in meta.get("tags", []), f"{exercise}: the site would show the stub's panel unfolded"
    shown = "".join(_text(o.get("data", {}).get("text/plain", "")) for o in cell["outputs"])
    assert f"<workshop check {exercise}: FAIL" in shown, f"{exercise}: the stored check is not the stub's"


@pytest.mark.parametrize("exercise", ANSWERS)
def test_the_exercise_page_does_not_give_the_answer(exercise):
    page = (REPO / "docs" / f"exercise-{exercise}.md").read_text(encoding="utf-8")
    for word in ANSWERS[exercise][1]:
        assert word not in page, f"docs/exercise-{exercise}.md names {word!r}"


def test_the_accept_exercise_states_its_tie_rule():
    """A tie at the cut is accepted either way, and the page and the notebook say so (the check used to demand
    torch.sort's unspecified order of equal entropies, which the page never stated)."""
    page = (REPO / "docs" / "exercise-accept.md").read_text(encoding="utf-8")
    cell = next(_text(c["source"]) for c in _cells(EXERCISES) if _text(c["source"]).startswith("## 1. `accept`"))
    for text in (page, cell):
        assert "any of them may be the accepted ones" in text and "every order" in text


def test_the_gates_stored_hint_names_no_answer():
    """The tensor-dict-gate's stored stub check (the folded hint) says what went wrong without naming the attribute
    the gate should read: not in its message, not in its picture (it used to say "(supports_tensor_dict False)"
    and draw a supports_tensor_dict column)."""
    cells = _cells(EXERCISES)
    cell = cells[check_cell(cells, "tensor-dict-gate")]
    shown = "\n".join(_text(v) for out in cell["outputs"] for v in out.get("data", {}).values())
    assert "<workshop check tensor-dict-gate: FAIL" in shown
    for word in ANSWERS["tensor-dict-gate"][1]:
        assert word not in shown.replace("<wbr>", "")
