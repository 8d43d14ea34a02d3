"""Workshop checkers, tested as a grader uses them: the command line on files.

Per exercise, one folder of submissions is graded with ``workshop check ID DIR --json`` (one process
for the folder): the stub fails, typical wrong answers fail with a reason a learner can act on, the
solution passes. Single-file runs check the exit codes and that ``--json`` gives the same verdict.
Every check's processes and shared-memory segments are gone afterwards (scoped to that check's pids).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from explainer.workshop import catalog

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "EXPLAINER_WORKSHOP_BUDGET": "3"}

EXERCISES = catalog.load_all()          # every exercise module, with its example answers and their verdicts


def _folder(folder: Path, exercise: str, names=None) -> Path:
    for name, example in EXERCISES[exercise].EXAMPLES.items():
        if names is None or name in names:
            (folder / f"{name}.py").write_text(example.source)
    return folder


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "explainer", "workshop", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, env=ENV, timeout=timeout)


def _grade(exercise, folder) -> dict:
    proc = cli("check", exercise, folder, "--json")
    assert proc.returncode == 1, proc.stderr          # a folder with wrong answers: not all passed
    data = json.loads(proc.stdout)
    assert data["exercise"] == exercise and data["passed"] is False
    return {Path(f["source"]).stem: f for f in data["files"]}


@functools.cache
def graded(exercise: str) -> dict:
    """Every example answer of the exercise, graded as one folder (``workshop check ID DIR --json``), once."""
    with tempfile.TemporaryDirectory(prefix="explainer-test-examples-") as tmp:
        return _grade(exercise, _folder(Path(tmp), exercise))


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_every_example_answer_gets_its_verdict(exercise):
    """The stub fails, typical wrong answers fail with a reason a learner can act on, the solution passes."""
    files = graded(exercise)
    assert set(files) == set(EXERCISES[exercise].EXAMPLES) >= {"stub", "solution"}
    for name, example in EXERCISES[exercise].EXAMPLES.items():
        f = files[name]
        if not example.fails_with:
            assert f["passed"] and f["exit_code"] == 0, (name, f)
            continue
        assert f["status"] == "fail" and f["exit_code"] == 1, (name, f)
        assert not f["passed"] and any(not c["passed"] and c["required"] for c in f["checks"]), name
        for needle in example.fails_with:
            assert needle in f["reason"], (name, needle, f["reason"])


def test_accept_solution_passes_the_whole_generation():
    assert any(c["name"] == "whole generation" and c["passed"] for c in graded("accept")["solution"]["checks"])


def test_sync_fields_solution_is_minimal_and_a_superset_is_reported_not_minimal():
    files = graded("sync-fields")
    sol, extra = files["solution"], files["not_minimal"]
    assert sol["figures"]["minimal"] is True and sol["figures"]["synced bytes per request per step"] == 64 + 1 + 2048
    assert extra["passed"] and extra["figures"]["minimal"] is False       # correct, reported as not minimal
    minimal = next(c for c in extra["checks"] if c["name"] == "minimal")
    assert not minimal["passed"] and not minimal["required"] and "canvas, step" in minimal["detail"]


def test_folder_table_and_json_verdict_of_one_file_agree(tmp_path):
    _folder(tmp_path, "tensor-dict-gate", ("solution", "always_false"))
    table = cli("check", "tensor-dict-gate", tmp_path)
    assert table.returncode == 1
    rows = table.stdout.splitlines()
    assert rows[0].split()[:3] == ["file", "result", "s"]
    assert any(r.startswith("always_false.py") and " FAIL " in r and "correct but slow" in r for r in rows)
    assert any(r.startswith("solution.py") and " pass " in r for r in rows)
    assert rows[-1] == "1/2 passed"
    for name, code in (("solution", 0), ("always_false", 1)):
        plain, js = cli("check", "tensor-dict-gate", tmp_path / f"{name}.py"), \
            cli("check", "tensor-dict-gate", tmp_path / f"{name}.py", "--json")
        assert plain.returncode == js.returncode == code
        assert json.loads(js.stdout)["passed"] is (code == 0)
        assert ("PASS" if code == 0 else "FAIL") in plain.stdout.splitlines()[0]


# ---- bad input: exit 2, one line, no traceback ------------------------------------------------------------
BAD = {
    "syntax": ("accept", "def entropy_bound_accept(entropy, bound):\n    return entropy <=\n", "syntax error in"),
    "missing_function": ("accept", "def entropy_accept(entropy, bound):\n    return entropy\n",
                         "defines no function entropy_bound_accept (it defines entropy_accept)"),
    "top_level_raises": ("accept", "import torch\n1 / 0\ndef entropy_bound_accept(e, b):\n    return e\n",
                         "raised ZeroDivisionError: division by zero (at top_level_raises.py line 2: 1 / 0)"),
    "call_raises": ("accept", "def entropy_bound_accept(entropy, bound):\n    return entropy.no_such()\n",
                    "raised AttributeError"),
    "unknown_field": ("sync-fields", "def fields_to_sync():\n    return {'draft_tokens', 'kv_cache'}\n",
                      "unknown field name(s) 'kv_cache'; valid names: accepted_canvas_history"),
    "gate_raises": ("tensor-dict-gate", "def use_cpu_custom_send_recv(c):\n    raise KeyError('no')\n",
                    "raised KeyError: 'no' (at gate_raises.py line 2"),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_input_is_one_line_exit_2(tmp_path, kind):
    exercise, source, needle = BAD[kind]
    path = tmp_path / f"{kind}.py"
    path.write_text(source)
    proc = cli("check", exercise, path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    js = cli("check", exercise, path, "--json")
    data = json.loads(js.stdout)
    assert js.returncode == 2 and data["passed"] is False and data["status"] == "error" and data["error"]["kind"]


@pytest.mark.parametrize("args, needle", [
    (("check", "acept", "x.py"), f"unknown exercise 'acept'; accepted: {', '.join(EXERCISES)}"),
    (("check", "accept", "no/such/file.py"), "no such file: 'no/such/file.py'"),
    (("check", "accept"), "needs a FILE"),
    (("grade",), "unknown action 'grade'"),
])
def test_command_bad_input(args, needle):
    proc = cli(*args)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


def test_empty_folder_is_bad_input(tmp_path):
    proc = cli("check", "accept", tmp_path)
    assert proc.returncode == 2 and "holds no .py or .ipynb files" in proc.stderr


def test_list_names_every_exercise_with_notebook_and_minutes():
    proc = cli("list", "--json")
    rows = json.loads(proc.stdout)
    modules = {p.stem for p in catalog.FOLDER.glob("[!_]*.py")}
    assert [r["id"] for r in rows] == list(EXERCISES) and len(rows) == len(modules)      # one per module
    assert {m.__name__.rsplit(".", 1)[1] for m in EXERCISES.values()} == modules
    assert all(r["minutes"] > 0 and (REPO / r["notebook"]).exists() for r in rows)


def test_accept_checker_runs_the_learners_rule_inside_the_real_sampler(tmp_path):
    """The 'real entropies' check records what the sampler's accept rule sees during a real generation, and
    'whole generation' generates with the learner's rule in its place: the sampler's calls go over the pipe
    to the learner's jail, so the jail answers more calls than there are cases (fails if the checker patches
    a name the sampler does not look up: then only the cases reach the learner's function)."""
    path = tmp_path / "solution.py"
    path.write_text(EXERCISES["accept"].EXAMPLES["solution"].source)
    proc = cli("check", "accept", path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    real = next(c for c in data["checks"] if c["name"].startswith("real entropies"))
    assert real["detail"] == "6 cases equal"
    assert data["figures"]["calls to your function"] > data["figures"]["cases"]


def test_no_gate_failure_names_the_attribute_to_read():
    """Whatever the learner's gate did wrong, the reason and every check's detail say what happened (the backend,
    the path, the error), never the answer's attribute."""
    for name, f in graded("tensor-dict-gate").items():
        said = json.dumps([f["reason"], [c["detail"] for c in f["checks"]]])
        assert "supports_tensor_dict" not in said, (name, said)
