"""``python -m explainer doctor``: every row passes here; hiding `dot` or making /dev/shm read-only fails the
right row with its fix. The broken machines are real: a PATH without `dot`, and a private mount namespace
whose /dev/shm is a read-only tmpfs (so the check's own segment creation really fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from explainer import doctor, vllm_env

ROWS = ["Python", "torch", "graphviz dot", "JupyterLab + widgets", "shared memory", "gloo on 127.0.0.1",
        "shipped checkpoint", "vLLM 0.32 environment", "workshop jail"]
VLLM = "vLLM 0.32 environment"             # optional: its ✗ does not fail the doctor


def _doctor(env=None, prefix=()):
    out = subprocess.run([*prefix, sys.executable, "-m", "explainer", "doctor"], capture_output=True, text=True,
                         timeout=180, env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})})
    rows, fixes = {}, {}
    last = None
    for line in out.stdout.splitlines():
        if line[:2] in ("✓ ", "✗ "):
            last = next(name for name in ROWS if line[2:].startswith(name))
            rows[last] = line[0]
        elif line.strip().startswith("fix:"):
            fixes[last] = line.strip()
    return out, rows, fixes


def test_doctor_passes_here():
    out, rows, fixes = _doctor()
    assert out.returncode == 0, out.stdout + out.stderr
    vllm_ok = vllm_env.missing_reason() is None           # optional: built by make vllm (make test builds it)
    assert rows == {name: "✓" if vllm_ok or name != VLLM else "✗" for name in ROWS}
    assert list(fixes) == ([] if vllm_ok else [VLLM])
    assert f"{9 if vllm_ok else 8} of 9 checks passed" in out.stdout
    assert "'four hundred fifty-one'" in out.stdout


def test_doctor_without_dot_fails_that_row_with_the_fix():
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not os.access(os.path.join(d, "dot"), os.X_OK))
    out, rows, fixes = _doctor({"PATH": path})
    assert out.returncode == 1
    assert rows["graphviz dot"] == "✗"
    bad = [n for n, mark in rows.items() if mark == "✗" and n != VLLM]
    assert bad[0] == "graphviz dot" and set(bad) <= {"graphviz dot", "workshop jail"}   # bwrap may share dot's folder
    assert "apt-get install graphviz" in fixes["graphviz dot"] and "brew install graphviz" in fixes["graphviz dot"]
    assert f"{sum(mark == '✓' for mark in rows.values())} of 9 checks passed" in out.stdout


def test_doctor_without_the_jail_says_checks_are_not_isolated():
    out, rows, fixes = _doctor({"EXPLAINER_WORKSHOP_JAIL": "off"})
    assert out.returncode == 1 and [n for n, mark in rows.items() if mark == "✗" and n != VLLM] == ["workshop jail"]
    assert "apt-get install bubblewrap" in fixes["workshop jail"] and "not isolated" in out.stdout


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (mount namespace)")
def test_doctor_with_read_only_dev_shm_fails_that_row_with_the_fix():
    shell = 'mount -t tmpfs -o ro,size=1m tmpfs /dev/shm && exec "$@"'
    prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c", shell, "sh")
    out, rows, fixes = _doctor(prefix=prefix)
    assert out.returncode == 1, out.stdout + out.stderr
    assert rows["shared memory"] == "✗"
    assert "Read-only file system" in out.stdout
    assert "writable tmpfs" in fixes["shared memory"]
    for name in ("Python", "torch", "graphviz dot", "JupyterLab + widgets", "shipped checkpoint"):
        assert rows[name] == "✓", out.stdout


def test_shm_check_leaves_no_segment_behind(tmp_path):
    row = doctor.check_shm(str(tmp_path))
    assert row.ok, row
    assert list(tmp_path.iterdir()) == []
    missing = doctor.check_shm(str(tmp_path / "absent"))
    assert not missing.ok and "No such file or directory" in missing.detail and missing.fix


def test_gloo_round_trip_really_crosses_processes():
    row = doctor.check_gloo(timeout=60)
    assert row.ok, row
    assert "452 came back" in row.detail
