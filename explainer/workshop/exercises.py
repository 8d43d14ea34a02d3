"""The exercises, whole (``Exercise`` objects: reference, what runs in the jail, the verdict). Importing this loads
torch and the engine: the grading process and the jail's warm process do; what only lists the exercises reads
``catalog.py``."""

from __future__ import annotations

from explainer.workshop import catalog
from explainer.workshop.accept import ACCEPT
from explainer.workshop.exercise import Exercise
from explainer.workshop.sync_fields import SYNC_FIELDS
from explainer.workshop.tensor_dict_gate import TENSOR_DICT_GATE

EXERCISES: dict[str, Exercise] = {e.id: e for e in (ACCEPT, SYNC_FIELDS, TENSOR_DICT_GATE)}


def get(exercise_id: str) -> Exercise:
    """The exercise named ``exercise_id`` (``UsageError`` for an unknown id, from the catalog)."""
    return EXERCISES[catalog.get(exercise_id).id]
