"""The exercise registry: id -> the function the learner writes, its notebook, minutes."""

from __future__ import annotations

from dataclasses import dataclass

from explainer.errors import UsageError


@dataclass(frozen=True)
class Exercise:
    id: str
    function: str          # what the learner's file defines
    signature: str
    notebook: str          # the exercise notebook (repo-relative)
    minutes: int           # suggested time in the room
    teaches: str           # the notebook section it follows
    checker: str           # module with run(fn, code) -> Report (runs in the check's own process)
    summary: str


EXERCISES = {e.id: e for e in (
    Exercise("accept", "entropy_bound_accept", "entropy_bound_accept(entropy, bound) -> bool tensor [B, L]",
             "notebooks/workshop/exercises.ipynb", 12, "01_canvas_sampler: the entropy-bound accept rule",
             "explainer.workshop.check_accept",
             "the sampler's accept rule, against the library's (= transformers') on random and edge-case entropies"),
    Exercise("sync-fields", "fields_to_sync", "fields_to_sync() -> set[str]",
             "notebooks/workshop/exercises.ipynb", 18, "02_pipeline_parallel: stale state on rank 0, state sync",
             "explainer.workshop.check_sync_fields",
             "which per-request state fields the last PP rank must send each step; the real PP=2 engine vs PP=1"),
    Exercise("tensor-dict-gate", "use_cpu_custom_send_recv", "use_cpu_custom_send_recv(device_communicator) -> bool",
             "notebooks/workshop/exercises.ipynb", 12, "03_cpu_communicator: the #40150 gate",
             "explainer.workshop.check_gate",
             "the GroupCoordinator's tensor-dict gate: its answers used by real rank processes on one node and on two"),
)}


def get(exercise_id: str) -> Exercise:
    if exercise_id not in EXERCISES:
        raise UsageError(f"unknown exercise {exercise_id!r}; accepted: {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]
