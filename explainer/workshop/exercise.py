"""One exercise, whole: what the learner is told, what the jail imports first, the reference's own work, what
runs inside the jail, and the verdict.

Each exercise module (``accept.py``, ``sync_fields.py``, ``tensor_dict_gate.py``) defines one ``Exercise``;
``exercises.py`` lists them. Read one top to bottom and you have the whole check:

* ``about``: the catalog entry (``catalog.py``: the id, the function to write, its notebook);
* ``preload``: modules the learner's process imports before the learner's code (so their cost is not the
  learner's time budget);
* ``reference()``: the reference's own work (a real generation, the PP=1 tokens), done once per grading session
  in the trusted process and kept for every check of it;
* ``answer(fn, args) -> dict``: inside the jail, the learner's function on plain data, its answer as plain data
  (nothing of it is trusted: the learner's code can replace this function in its own process);
* ``grade(learner, code) -> Report``: in the trusted check process, asks the learner's process (``learner.call``),
  validates every answer as data, compares with the reference and gives the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from explainer.workshop.catalog import About


@dataclass(frozen=True)
class Exercise:
    about: About
    preload: tuple[str, ...]
    reference: Callable[[], None]
    answer: Callable[[Callable, dict], dict]
    grade: Callable

    @property
    def id(self) -> str:
        return self.about.id

    @property
    def function(self) -> str:
        return self.about.function
