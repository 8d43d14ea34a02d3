"""No UTF-8 terminal needed: on a terminal whose encoding cannot show ✓ (a Latin-1 or ASCII console), a passing
check still prints its verdict and exits 0, a failing one exits 1 (before: exit 2, "'ascii' codec can't encode
character '\\u2713'", and no verdict)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_check_on_a_terminal_that_is_not_utf8(encoding, tmp_path):
    env = {**os.environ, "PYTHONIOENCODING": encoding, "PYTHONPATH": str(REPO), "EXPLAINER_WORKSHOP_BUDGET": "5"}
    env.pop("PYTHONUTF8", None)
    solution = REPO / "tests" / "workshop_attacks" / "solution.py"
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import torch\n\ndef entropy_bound_accept(entropy, bound):\n    return entropy <= bound\n")
    ok = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(solution)],
                        capture_output=True, env=env, cwd=REPO, timeout=300)
    out = ok.stdout.decode(encoding)
    assert ok.returncode == 0, ok.stderr.decode(encoding, errors="replace")
    assert "accept: PASS" in out and "ok distinct values" in out and "codec" not in ok.stderr.decode(encoding)
    bad = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(wrong)],
                         capture_output=True, env=env, cwd=REPO, timeout=300)
    assert bad.returncode == 1 and "accept: FAIL" in bad.stdout.decode(encoding)
    assert "x distinct values" in bad.stdout.decode(encoding)


def test_the_doctor_on_an_ascii_terminal():
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "explainer", "doctor"], capture_output=True, env=env, cwd=REPO,
                         timeout=300)
    assert out.returncode in (0, 1) and "codec" not in out.stderr.decode("ascii", errors="replace")
    assert out.stdout.decode("ascii").strip()
