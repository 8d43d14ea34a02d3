"""The exercises as a learner and an instructor see them: the id, the function to write, its notebook, the minutes.

Light on purpose (the standard library only): the command line's ``workshop list``, the room board's page and
argument checks read it without loading torch. The machinery of each exercise (its reference, what runs in the
jail, the verdict) is its ``Exercise`` object (``exercise.py``; one module per exercise, ``exercises.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from explainer.errors import UsageError


@dataclass(frozen=True)
class About:
    id: str
    function: str          # what the learner's file defines
    signature: str
    notebook: str          # the exercise notebook (repo-relative)
    minutes: int           # suggested time in the room
    teaches: str           # the notebook section it follows
    summary: str


ACCEPT = About("accept", "entropy_bound_accept", "entropy_bound_accept(entropy, bound) -> bool tensor [B, L]",
               "notebooks/workshop/exercises.ipynb", 12, "01_canvas_sampler: the entropy-bound accept rule",
               "the sampler's accept rule, against the library's (= transformers') on random and edge-case entropies")
SYNC_FIELDS = About("sync-fields", "fields_to_sync", "fields_to_sync() -> set[str]",
                    "notebooks/workshop/exercises.ipynb", 18, "02_pipeline_parallel: stale state on rank 0, state sync",
                    "which per-request state fields the last PP rank must send each step; the real PP=2 engine vs PP=1")
TENSOR_DICT_GATE = About("tensor-dict-gate", "use_cpu_custom_send_recv",
                         "use_cpu_custom_send_recv(device_communicator) -> bool", "notebooks/workshop/exercises.ipynb",
                         12, "03_cpu_communicator: the #40150 gate",
                         "the GroupCoordinator's tensor-dict gate: its answers used by real rank processes on one node "
                         "and on two")
EXERCISES = {e.id: e for e in (ACCEPT, SYNC_FIELDS, TENSOR_DICT_GATE)}


def get(exercise_id: str) -> About:
    if exercise_id not in EXERCISES:
        raise UsageError(f"unknown exercise {exercise_id!r}; accepted: {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]
