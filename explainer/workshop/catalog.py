"""The exercises: where each one lives, what a learner and an instructor see of it, and where its verdict goes.

One exercise is one module of ``explainer/workshop/exercises/`` and nothing else (its notebook cell and its docs
page aside). The module declares, top to bottom:

* ``ABOUT = About(id=..., ...)``: what learners see (the id, the function to write, its notebook, the minutes,
  the route notebook it follows), written as literals;
* ``EXAMPLES``: answers with their expected verdicts (``Example``): at least ``"stub"`` (what the exercises
  notebook starts from) and ``"solution"``; the tests grade every one, the benchmark and the rehearsal use them;
* ``ANSWER_WORDS``: the words its answer is made of (the exercises notebook must not show them before the check);
* ``PRELOAD``: modules the learner's process imports before the learner's code (their cost is not the learner's);
* ``reference()``: the reference's own work (a real generation, the PP=1 tokens), once per grading session;
* ``answer(fn, args) -> dict``: inside the jail, the learner's function on plain data, its answer as plain data
  (nothing of it is trusted: the learner's code can replace this function in its own process);
* ``grade(learner, code) -> Report``: in the trusted check process, asks the learner's process
  (``learner.call``), validates every answer as data, compares with the reference and gives the verdict;
* ``picture(report) -> str``: the HTML the notebook panel shows under a failed verdict.

This module is light on purpose (the standard library only): ``workshop list``, the room board and the argument
checks read ``EXERCISES`` without loading torch, so it reads each module's ``ABOUT`` as data (its literal
keywords, with ``ast``) instead of running the module; ``load`` imports the module itself, to grade.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from explainer.errors import UsageError
from explainer.room import client

FOLDER = Path(__file__).with_name("exercises")
PACKAGE = f"{__package__}.exercises"


@dataclass(frozen=True)
class About:
    id: str
    function: str          # what the learner's file defines
    signature: str
    notebook: str          # the exercise notebook (repo-relative)
    minutes: int           # suggested time in the room
    follows: str           # the route's notebook it follows (notebooks/NAME.ipynb)
    section: str           # the part of that notebook it practises
    summary: str
    checks: tuple[str, ...] = ()   # the names of its checks (the failure a report and the room board may name)

    @property
    def teaches(self) -> str:
        return f"{self.follows}: {self.section}"


@dataclass(frozen=True)
class Example:
    """An answer and its expected verdict: it passes when ``fails_with`` is empty, else it fails with a reason
    that holds each of ``fails_with``."""
    source: str
    fails_with: tuple[str, ...] = ()


def declared(path: Path) -> About:
    """The ``ABOUT = About(...)`` of an exercise module, read as data (nothing of the module runs)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["ABOUT"]:
            return About(**{kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords})
    raise ValueError(f"{path}: no ABOUT = About(...) with literal keywords")


def _discover() -> tuple[dict[str, About], dict[str, str]]:
    found = {}
    for path in sorted(FOLDER.glob("[!_]*.py")):
        about = declared(path)
        found[about.id] = (about, f"{PACKAGE}.{path.stem}")
    order = sorted(found, key=lambda i: (found[i][0].follows, i))          # the route's order
    return {i: found[i][0] for i in order}, {i: found[i][1] for i in order}


EXERCISES, MODULES = _discover()


def get(exercise_id: str) -> About:
    if exercise_id not in EXERCISES:
        raise UsageError(f"unknown exercise {exercise_id!r}; accepted: {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]


def load(exercise_id: str) -> ModuleType:
    """The exercise's module, whole (loads torch and the engine); ``UsageError`` for an unknown id."""
    module = importlib.import_module(MODULES[get(exercise_id).id])
    assert module.ABOUT == EXERCISES[exercise_id], f"{module.__name__}: ABOUT is not what the catalog read"
    return module


def load_all() -> dict[str, ModuleType]:
    return {exercise_id: load(exercise_id) for exercise_id in EXERCISES}


def report_verdict(report, seat: str | None = None, wait: bool = False, instructor: bool = False):
    """The hook after a verdict: post ``report``'s exercise, passed and first failing check's name to the room
    board ``EXPLAINER_ROOM`` names (``explainer.room.client``; nothing when no room is joined; ``wait``: at most
    ``client.TIMEOUT`` s; ``instructor``: a folder's hand-in, posted with the instructor's key when this user keeps
    one). It reads the verdict, never changes it, and sends nothing of the learner's code."""
    return client.report_verdict(report.exercise, report.passed, report.first_failure(), seat=seat, wait=wait,
                                 instructor=instructor)
