"""Workshop checkers, tested as a grader uses them: the command line on files.

Per exercise, one folder of submissions is graded with ``workshop check ID DIR --json`` (one process
for the folder): the stub fails, typical wrong answers fail with a reason a learner can act on, the
solution passes. Single-file runs check the exit codes and that ``--json`` gives the same verdict.
Every check's processes and shared-memory segments are gone afterwards (scoped to that check's pids).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "EXPLAINER_WORKSHOP_BUDGET": "3"}

ACCEPT = {
    "stub": "return torch.zeros_like(entropy, dtype=torch.bool)",
    "solution": """h, order = torch.sort(entropy, dim=-1)
keep = torch.cumsum(h, dim=-1) - h <= bound
return torch.zeros_like(keep).scatter_(-1, order, keep)""",
    "per_position": "return entropy <= bound",
    "strict": """h, order = torch.sort(entropy, dim=-1)
keep = torch.cumsum(h, dim=-1) - h < bound
return torch.zeros_like(keep).scatter_(-1, order, keep)""",
    "own_entropy_counted": """h, order = torch.sort(entropy, dim=-1)
keep = torch.cumsum(h, dim=-1) <= bound
return torch.zeros_like(keep).scatter_(-1, order, keep)""",
    "sorted_order": """h, order = torch.sort(entropy, dim=-1)
return torch.cumsum(h, dim=-1) - h <= bound""",
    "batch_flattened": """h, order = torch.sort(entropy.reshape(-1))
keep = torch.cumsum(h, dim=0) - h <= bound
return torch.zeros_like(keep).scatter_(0, order, keep).reshape(entropy.shape)""",
    "int_mask": """h, order = torch.sort(entropy, dim=-1)
keep = torch.cumsum(h, dim=-1) - h <= bound
return torch.zeros_like(keep).scatter_(-1, order, keep).int()""",
}
# the reason each wrong answer must give (substrings of the one-line reason)
ACCEPT_REASONS = {
    "stub": ["case 'one row, three accepted'", "expected accepted, got rejected"],
    "per_position": ["case '", "expected"],
    "strict": ["bound 0", "expected accepted, got rejected"],
    "own_entropy_counted": ["distinct values", "expected accepted, got rejected"],
    "sorted_order": ["case 'one row, three accepted'"],
    "batch_flattened": ["batch > 1", "case '3 rows, different cuts'"],
    "int_mask": ["dtype int32; expected bool"],
}

SYNC = {
    "stub": "set()",
    "solution": '{"draft_tokens", "is_encoder_phase", "self_conditioning_embeds"}',
    "no_sc": '{"draft_tokens", "is_encoder_phase"}',
    "canvas_not_drafts": '{"canvas", "is_encoder_phase", "self_conditioning_embeds"}',
    "no_phase": '{"draft_tokens", "self_conditioning_embeds"}',
    "not_minimal": '{"draft_tokens", "is_encoder_phase", "self_conditioning_embeds", "canvas", "step"}',
}
SYNC_REASONS = {
    "stub": ["rank 0 reads", "is_encoder_phase", "draft_tokens", "prompt '", "engine step"],
    "no_sc": ["rank 0 reads self_conditioning_embeds", "not synced: self_conditioning_embeds"],
    "canvas_not_drafts": ["rank 0 reads draft_tokens", "not synced: draft_tokens"],
    "no_phase": ["is_encoder_phase", "not synced: is_encoder_phase"],
}

GATE = {
    "stub": "return True",
    "solution": 'return bool(getattr(device_communicator, "supports_tensor_dict", False))',
    "always_false": "return False",
    "not_none": "return device_communicator is not None",
    "int_flag": 'return 1 if device_communicator.backend == "shm" else 0',
}
GATE_REASONS = {
    "stub": ["two nodes", "fell back to torch.distributed", "NotImplementedError"],
    "always_false": ["correct but slow: lost the shared-memory fast path on one node"],
    "not_none": ["two nodes", "your gate said True", "fell back"],
    "int_flag": ["returns a bool", "returned int"],
}


def _write(folder: Path, name: str, header: str, signature: str, body: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(f"{header}\n\ndef {signature}:\n{textwrap.indent(body, '    ')}\n")
    return path


def _folder(tmp_path, variants, header, signature, body=lambda b: b):
    for name, b in variants.items():
        _write(tmp_path, name, header, signature, body(b))
    return tmp_path


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "explainer", "workshop", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, env=ENV, timeout=timeout)


def _grade(exercise, folder) -> dict:
    proc = cli("check", exercise, folder, "--json")
    assert proc.returncode == 1, proc.stderr          # a folder with wrong answers: not all passed
    data = json.loads(proc.stdout)
    assert data["exercise"] == exercise and data["passed"] is False
    return {Path(f["source"]).stem: f for f in data["files"]}


def _assert_verdicts(files, reasons):
    assert files["solution"]["passed"] and files["solution"]["exit_code"] == 0, files["solution"]
    for name, needles in reasons.items():
        f = files[name]
        assert f["status"] == "fail" and f["exit_code"] == 1, (name, f)
        assert not f["passed"] and any(not c["passed"] and c["required"] for c in f["checks"]), name
        for needle in needles:
            assert needle in f["reason"], (name, needle, f["reason"])


def test_accept_stub_wrong_answers_and_solution(tmp_path):
    files = _grade("accept", _folder(tmp_path, ACCEPT, "import torch", "entropy_bound_accept(entropy, bound)"))
    _assert_verdicts(files, ACCEPT_REASONS)
    assert any(c["name"] == "whole generation" and c["passed"] for c in files["solution"]["checks"])


def test_sync_fields_stub_wrong_answers_and_solution(tmp_path):
    files = _grade("sync-fields", _folder(tmp_path, SYNC, "", "fields_to_sync()", lambda b: f"return {b}"))
    _assert_verdicts(files, SYNC_REASONS)
    sol, extra = files["solution"], files["not_minimal"]
    assert sol["figures"]["minimal"] is True and sol["figures"]["synced bytes per request per step"] == 64 + 1 + 2048
    assert extra["passed"] and extra["figures"]["minimal"] is False       # correct, reported as not minimal
    minimal = next(c for c in extra["checks"] if c["name"] == "minimal")
    assert not minimal["passed"] and not minimal["required"] and "canvas, step" in minimal["detail"]


def test_gate_stub_wrong_answers_and_solution(tmp_path):
    files = _grade("tensor-dict-gate", _folder(tmp_path, GATE, "", "use_cpu_custom_send_recv(device_communicator)"))
    _assert_verdicts(files, GATE_REASONS)


def test_folder_table_and_json_verdict_of_one_file_agree(tmp_path):
    _folder(tmp_path, {k: GATE[k] for k in ("solution", "always_false")}, "",
            "use_cpu_custom_send_recv(device_communicator)")
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
    (("check", "acept", "x.py"), "unknown exercise 'acept'; accepted: accept, sync-fields, tensor-dict-gate"),
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
    assert [r["id"] for r in rows] == ["accept", "sync-fields", "tensor-dict-gate"]
    assert all(r["minutes"] > 0 and (REPO / r["notebook"]).exists() for r in rows)


def test_accept_checker_runs_the_learners_rule_inside_the_real_sampler(tmp_path):
    """The 'real entropies' check records what the sampler's accept rule sees during a real generation, and
    'whole generation' generates with the learner's rule in its place: the sampler's calls go over the pipe
    to the learner's jail, so the jail answers more calls than there are cases (fails if the checker patches
    a name the sampler does not look up: then only the cases reach the learner's function)."""
    path = tmp_path / "solution.py"
    path.write_text("import torch\n\n\n" + "def entropy_bound_accept(entropy, bound):\n" + textwrap.indent(
        ACCEPT["solution"], "    ") + "\n")
    proc = cli("check", "accept", path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    real = next(c for c in data["checks"] if c["name"].startswith("real entropies"))
    assert real["detail"] == "6 cases equal"
    assert data["figures"]["calls to your function"] > data["figures"]["cases"]
