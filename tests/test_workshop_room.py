"""A room's worth of submissions graded as an instructor would: 30 mixed files (solutions, stubs, wrong
answers, attacks, a handed-in notebook, and entries that are not submissions) in one folder per exercise.
Every file gets a row (or a skip with its reason), the gradebook has one row per submission, and nothing is
left behind: no process (an attack's or the grader's own), no /dev/shm segment, nothing in the grader's TMPDIR.
Each grading command runs as this test's own (``own_run``: its own process tree, TMPDIR and, as root,
/dev/shm), so another run on the machine is not taken for a leftover. The time is printed (not asserted)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from explainer.workshop import jail
from own_run import PRIVATE_SHM, run_own

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not jail.available()[0], reason="no jail here")]
REPO = Path(__file__).resolve().parents[1]
ATTACKS = REPO / "tests" / "workshop_attacks"
SOLUTION = (ATTACKS / "solution.py").read_text()
ACCEPT_ATTACKS = ["forged_result", "patched_checker", "torch_equal", "stdout_injection", "setsid_daemon",
                  "double_fork", "daemon_forges_later", "memory_hog", "fork_bomb", "copycat", "watchdog_dodge"]


def _notebook(source: str) -> str:
    cell = {"cell_type": "code", "metadata": {"tags": ["exercise:accept"]}, "source": source.splitlines(True),
            "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def _room(tmp_path) -> dict[str, Path]:
    acc, gate, sync = (tmp_path / n for n in ("accept", "gate", "sync"))
    for d in (acc, gate, sync):
        d.mkdir()
    for name in ACCEPT_ATTACKS + ["solution"]:
        shutil.copy(ATTACKS / f"{name}.py", acc / f"{name}.py")
    (acc / "STUB.PY").write_text("import torch\ndef entropy_bound_accept(e, b):\n    return e > 1e9\n")
    (acc / "notebook.ipynb").write_text(_notebook(SOLUTION))
    (acc / "notes.txt").write_text("not a submission")
    os.symlink("/etc/hostname", acc / "link.py")
    shutil.copy(ATTACKS / "gate_fork_burst.py", gate / "burst.py")
    for i, body in enumerate(["True", "False", "bool(getattr(c, 'supports_tensor_dict', False))", "c is not None",
                              "1 if c.backend == 'shm' else 0", "c.no_such_fact", "c.backend == 'shm'",
                              "c.rank_in_group == 0"]):
        (gate / f"g{i}.py").write_text(f"def use_cpu_custom_send_recv(c):\n    return {body}\n")
    for i, body in enumerate(["set()", "{'draft_tokens', 'is_encoder_phase', 'self_conditioning_embeds'}",
                              "{'draft_tokens', 'is_encoder_phase'}", "{'kv_cache'}", "42",
                              "{'canvas', 'is_encoder_phase', 'self_conditioning_embeds'}",
                              "{'draft_tokens', 'self_conditioning_embeds'}"]):
        (sync / f"s{i}.py").write_text(f"def fields_to_sync():\n    return {body}\n")
    return {"accept": acc, "tensor-dict-gate": gate, "sync-fields": sync}


def _host_segments() -> list[str]:
    """Not root (no /dev/shm of the run's own): the gate check's segments in the host's /dev/shm."""
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("workshop"))


def test_a_room_of_30_mixed_submissions_leaves_nothing(tmp_path):
    host_shm = _host_segments()
    env = {**os.environ, "EXPLAINER_WORKSHOP_BUDGET": "3"}
    rows, t0 = {}, time.monotonic()
    for exercise, folder in _room(tmp_path).items():
        gradebook, own = tmp_path / f"{exercise}.csv", tmp_path / f"run-{exercise}"
        own.mkdir()
        run = run_own([sys.executable, "-m", "explainer", "workshop", "check", exercise, str(folder),
                           "--csv", str(gradebook)], own, env=env, capture_output=True, text=True, timeout=900)
        proc = run.proc
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert run.left() == {"processes": [], "shm": [], "tmp": []}, exercise
        with open(gradebook, newline="") as f:
            rows.update({(exercise, r["submission"]): r for r in csv.DictReader(f)})
    seconds = time.monotonic() - t0
    graded = [k for k, r in rows.items() if r["verdict"] != "skipped"]
    print(f"\nroom run: {len(graded)} submissions graded in {seconds:.1f} s")
    assert len(graded) == 30 and len(rows) == 32
    assert rows[("accept", "link.py")]["verdict"] == "skipped" and "symlink" in rows[("accept", "link.py")]["reason"]
    assert rows[("accept", "notes.txt")]["verdict"] == "skipped"
    passed = {k[1] for k, r in rows.items() if r["verdict"] == "pass"}
    assert passed == {"solution.py", "notebook.ipynb", "setsid_daemon.py", "double_fork.py", "daemon_forges_later.py",
                      "burst.py", "g2.py", "g6.py", "s1.py"}
    assert rows[("accept", "STUB.PY")]["verdict"] == "fail"
    if not PRIVATE_SHM:
        assert _host_segments() == host_shm
