"""The notebooks' teaching prose reads at a glance: per notebook, the median sentence is at most 16 words,
at most 10 % of sentences run over 25 words, and none over 40; and every glossary word and code name is defined
(`<dfn>`) or linked where it is first used (tests/prose.py says what is counted)."""

from __future__ import annotations

import pytest
from prose import GOAL_LONG, GOAL_MAX, NOTEBOOKS, figures, sentences, teaching_text, term_first_uses, words


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_prose_meets_the_goal(path):
    got = figures(path)
    assert got.meets_goal(), f"{got.line()}; longest: {got.longest_text!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_term_is_defined_or_linked_where_it_is_first_used(path):
    missing = [use.line() for use in term_first_uses(path) if use.how not in ("linked", "defined")]
    assert not missing, f"{path.name}: first uses neither defined (<dfn>) nor linked:\n" + "\n".join(missing)


def test_the_term_check_finds_an_undefined_name_and_a_broken_glossary_link(tmp_path):
    import json
    cells = ["# Title\n\nA [canvas](glossary.md#term-canvas) of `canvas_length` positions.\n"
             "<dfn>`StepRecorder`</dfn> records.\n\n<details><summary>note</summary>\n\n`hidden_name` here.\n</details>",
             "The `canvas_length` again, a [word](glossary.md#term-no-such-word), a PP rank and `torch.Generator`.",
             "## A `heading_name`\n\nThe [stop](glossary.md#term-stop-check) rule; later the stop check."]
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": [c]} for c in cells]}))
    got = {(u.kind, u.term): (u.cell, u.how) for u in term_first_uses(path)}
    assert got[("glossary", "canvas")] == (0, "linked")
    assert got[("code", "canvas_length")] == (0, "")                 # first use, neither defined nor linked
    assert got[("code", "StepRecorder")] == (0, "defined")
    assert got[("glossary", "PP rank")] == (1, "")
    assert got[("glossary", "stop check")] == (2, "linked")           # a link to the word counts as its first use
    assert got[("glossary link", "no-such-word")][1] == ""
    assert ("code", "hidden_name") not in got and ("code", "heading_name") not in got   # folds and headings
    assert ("code", "torch.Generator") not in got                     # a name a PyTorch reader knows


def test_the_counter_splits_sentences_and_skips_what_is_not_prose():
    cell = """# A heading is not a sentence

One short sentence. Another one, e.g. with an abbreviation, that ends here!
* a bullet without a full stop
* a [linked](../docs/glossary.md#term-canvas) bullet

| a | table |
|---|---|
| is | skipped |

```python
code = "is skipped. Too."
```

<details><summary>Answer</summary>

A folded answer is skipped.

</details>"""
    found = [s for block in teaching_text(cell) for s in sentences(block)]
    assert found == ["One short sentence.", "Another one, e.g. with an abbreviation, that ends here!",
                     "a bullet without a full stop", "a linked bullet"]
    assert [words(s) for s in found] == [3, 9, 6, 3]


def test_a_long_sentence_fails_the_goal(tmp_path):
    import json
    long = " ".join(["word"] * (GOAL_MAX + 1)) + "."
    short = "Short and sweet here."
    nb = {"cells": [{"cell_type": "markdown", "source": [short, " ", long]}]}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    got = figures(path)
    assert got.longest == GOAL_MAX + 1 and got.long_share == 0.5 > 0 and GOAL_LONG < got.longest
    assert not got.meets_goal()


def _flat(text: str) -> str:
    return " ".join(text.split()).lower()


def test_the_accept_rule_has_one_wording_everywhere():
    """Notebook 1, its stepper caption, the exercise and the glossary say the accept rule in the same words."""
    import torch
    from explainer.render.rules import accept_rule_html
    from explainer.vocab import ACCEPT_RULE
    from prose import REPO

    rule = _flat(ACCEPT_RULE)
    places = {
        "notebook 1": REPO / "notebooks" / "01_canvas_sampler.ipynb",
        "the exercise": REPO / "notebooks" / "workshop" / "exercises.ipynb",
        "the glossary": REPO / "notebooks" / "glossary.md",
    }
    for name, path in places.items():
        assert rule in _flat(path.read_text(encoding="utf-8")), name
    caption = accept_rule_html(torch.tensor([0.0, 0.4, 0.05]), torch.tensor([True, False, True]), 0.1, "f")
    assert rule in _flat(caption)
