"""``python -m explainer doctor``: every row passes here; hiding `dot` or making /dev/shm read-only fails the
right row with its fix. The broken machines are real: a PATH without `dot`, and a private mount namespace
whose /dev/shm is a read-only tmpfs (so the check's own segment creation really fails).

Minute 0 is real too: a fresh venv with nothing installed (no torch), from a copy of the checkout with no
.venv, on this interpreter and on every other Python >= 3.10 found here; Pythons older than 3.10 get one line.
Other platforms are simulated with ``check.Host`` (the real checks run; the platform's answers change): a Mac
and Windows get "not available here" for /dev/shm, the jail and vLLM, never counted as failures, and their own
commands (brew, winget, PowerShell; no make on Windows).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from explainer import vllm_env
from explainer.doctor import CHECKS as DOCTOR_CHECKS, check
from explainer.doctor import rows as doctor_rows
from explainer.cli import main
from explainer.commands import doctor as doctor_command

ROWS = ["Python", "torch", "graphviz dot", "JupyterLab + widgets", "shared memory", "gloo on 127.0.0.1",
        "shipped checkpoint", doctor_rows.VLLM_CHECK, "workshop jail"]
VLLM = doctor_rows.VLLM_CHECK             # optional: its ✗ does not fail the doctor
REPO = Path(__file__).resolve().parents[1]
MARKS = ("✓", "✗", "–", "·")
PYENV = Path.home() / ".pyenv" / "versions"


def parse(stdout: str):
    rows, fixes, nxt = {}, {}, None
    last = None
    for line in stdout.splitlines():
        if line[:2] in tuple(m + " " for m in MARKS):
            last = next(name for name in ROWS if line[2:].startswith(name))
            rows[last] = line[0]
        elif line.strip().startswith("fix:"):
            fixes[last] = line.strip()
        elif line.startswith("next: "):
            nxt = line[len("next: "):]
    return rows, fixes, nxt


def _doctor(env=None, prefix=(), python=sys.executable, cwd=None, flags=()):
    out = subprocess.run([*prefix, python, *flags, "-m", "explainer", "doctor"], capture_output=True, text=True,
                         timeout=180, cwd=cwd, env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})})
    return (out, *parse(out.stdout))


def test_doctor_passes_here():
    out, rows, fixes, nxt = _doctor()
    assert out.returncode == 0, out.stdout + out.stderr
    vllm_ok = vllm_env.missing_reason() is None           # optional: built by make vllm (make test builds it)
    assert rows == {name: "✓" if vllm_ok or name != VLLM else "✗" for name in ROWS}
    assert list(fixes) == ([] if vllm_ok else [VLLM])
    assert f"{9 if vllm_ok else 8} of 9 checks passed" in out.stdout
    assert "'four hundred fifty-one'" in out.stdout
    assert nxt == "make lab" and "ready" in out.stdout


def test_doctor_without_dot_fails_that_row_with_the_fix():
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not os.access(os.path.join(d, "dot"), os.X_OK))
    out, rows, fixes, nxt = _doctor({"PATH": path})
    assert out.returncode == 1
    assert rows["graphviz dot"] == "✗"
    bad = [n for n, mark in rows.items() if mark == "✗" and n != VLLM]
    assert bad[0] == "graphviz dot" and set(bad) <= {"graphviz dot", "workshop jail"}   # bwrap may share dot's folder
    assert "install graphviz" in fixes["graphviz dot"]        # apt-get's or dnf's: that PATH hides apt-get too
    assert f"{sum(mark == '✓' for mark in rows.values())} of 9 checks passed" in out.stdout


def test_doctor_without_the_jail_says_checks_are_not_isolated():
    out, rows, fixes, nxt = _doctor({"EXPLAINER_WORKSHOP_JAIL": "off"})
    assert out.returncode == 1 and [n for n, mark in rows.items() if mark == "✗" and n != VLLM] == ["workshop jail"]
    assert "not isolated" in out.stdout
    assert nxt == "unset EXPLAINER_WORKSHOP_JAIL"


def test_a_bad_engine_setting_fails_the_gloo_row_not_the_doctor():
    out, rows, fixes, nxt = _doctor({"EXPLAINER_COMM_TIMEOUT": "soon"})
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert rows["gloo on 127.0.0.1"] == "✗" and "EXPLAINER_COMM_TIMEOUT" in out.stdout
    assert rows["shipped checkpoint"] == "✓"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (mount namespace)")
def test_doctor_with_read_only_dev_shm_fails_that_row_with_the_fix():
    shell = 'mount -t tmpfs -o ro,size=1m tmpfs /dev/shm && exec "$@"'
    prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c", shell, "sh")
    out, rows, fixes, nxt = _doctor(prefix=prefix)
    assert out.returncode == 1, out.stdout + out.stderr
    assert rows["shared memory"] == "✗"
    assert "Read-only file system" in out.stdout
    assert "writable tmpfs" in fixes["shared memory"]
    for name in ("Python", "torch", "graphviz dot", "JupyterLab + widgets", "shipped checkpoint"):
        assert rows[name] == "✓", out.stdout


def test_shm_check_leaves_no_segment_behind(tmp_path):
    host = check.Host.here()
    row = doctor_rows.check_shm(host, str(tmp_path))
    assert row.ok, row
    assert list(tmp_path.iterdir()) == []
    missing = doctor_rows.check_shm(host, str(tmp_path / "absent"))
    assert not missing.ok and "No such file or directory" in missing.detail and missing.fix


def test_gloo_round_trip_really_crosses_processes():
    row = doctor_rows.check_gloo(check.Host.here(), timeout=60)
    assert row.ok, row
    assert "452 came back" in row.detail


# --- minute 0: a Python with nothing installed ---------------------------------------------------------------

def fresh_checkout(tmp_path: Path) -> Path:
    """What a learner has before set-up: the project's files, no .venv (copied, so this worktree's .venv is
    not seen)."""
    root = tmp_path / "explainer-checkout"
    shutil.copytree(REPO / "explainer", root / "explainer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "scripts", root / "scripts")
    (root / "notebooks").mkdir()
    shutil.copy(REPO / "Makefile", root)
    return root


def bare_python(base: str, where: Path) -> str:
    """A venv with nothing in it (no pip, no torch), made from ``base``."""
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    return str(where / "bin" / "python")


def other_pythons(newer: bool) -> list[str]:
    found = sorted(str(p) for p in PYENV.glob("3.*/bin/python3")) if PYENV.is_dir() else []
    here = ".".join(map(str, sys.version_info[:3]))               # this Python is tested anyway
    minor = lambda p: int(Path(p).parents[1].name.split(".")[1])   # noqa: E731
    return [p for p in found if Path(p).parents[1].name != here and (minor(p) >= 10) == newer]


@pytest.mark.parametrize("base", [sys.executable] + other_pythons(newer=True),
                         ids=lambda p: "this-python" if p == sys.executable else Path(p).parents[1].name)
def test_minute_zero_bare_python_gets_rows_and_the_next_command(tmp_path, base):
    checkout = fresh_checkout(tmp_path)
    py = bare_python(base, tmp_path / "bare")
    no_vars = {k: "" for k in os.environ if k.startswith("EXPLAINER_")}
    out, rows, fixes, nxt = _doctor(env=no_vars, python=py, cwd=checkout, flags=("-s", "-E"))
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    assert out.returncode == 1
    assert list(rows) == ROWS, out.stdout
    assert rows["Python"] == "✓" and rows["torch"] == "✗" and rows["JupyterLab + widgets"] == "✗"
    assert rows["gloo on 127.0.0.1"] == rows["shipped checkpoint"] == "·"        # not checked yet: need torch
    assert "not checked yet (they need torch)" in out.stdout
    assert nxt == "make lab", out.stdout                                          # the set-up, nothing else
    # make doctor before set-up: no .venv, so $(PYTHON) runs it
    made = subprocess.run(["make", "-s", "doctor", f"PYTHON={py}"], cwd=checkout, capture_output=True, text=True,
                          timeout=180, env={**os.environ, **no_vars, "PYTHONIOENCODING": "utf-8"})
    assert parse(made.stdout) == (rows, fixes, nxt) and "Traceback" not in made.stderr


def test_minute_zero_after_set_up_points_at_the_set_ups_venv(tmp_path):
    """From this checkout (its .venv is built) a bare Python is told to run the doctor in .venv."""
    py = bare_python(sys.executable, tmp_path / "bare")
    out, rows, fixes, nxt = _doctor(python=py, cwd=REPO, flags=("-s", "-E"))
    assert out.returncode == 1 and rows["torch"] == "✗" and "Traceback" not in out.stderr
    assert nxt == "make doctor"


@pytest.mark.parametrize("old", other_pythons(newer=False), ids=lambda p: Path(p).parents[1].name)
def test_an_old_python_gets_one_line(old):
    out = subprocess.run([old, "-m", "explainer", "doctor"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("explainer needs Python 3.10 or newer"), out.stderr


# --- other platforms, simulated ------------------------------------------------------------------------------

def host(system: str, **kw) -> check.Host:
    machine = {"linux": "x86_64", "darwin": "arm64", "win32": "AMD64"}[system]
    return check.Host(system, machine, kw.pop("checkout", REPO), make=system != "win32", apt=system == "linux",
                       **kw)


CHECKS = (*DOCTOR_CHECKS, doctor_command.check_workshop_jail)


@pytest.mark.parametrize("system", ["darwin", "win32"])
def test_a_mac_or_windows_gets_not_available_rows_that_do_not_fail(system):
    h = host(system)
    rows = {r.name: r for r in check.run_checks(CHECKS, host=h)}
    for name in ("shared memory", "workshop jail", VLLM):
        row = rows[name]
        assert row.status == "not available here" and not row.blocking, row
        assert row.detail.startswith("not available here: ") and h.label in row.detail
    assert "torch.distributed fallback" in rows["shared memory"].detail
    jail = rows["workshop jail"].detail
    if system == "darwin":            # checks fork from a warm process: limits only on a Mac, WSL2 on Windows
        assert "not isolated" in jail and "verdicts are the same" in jail
    else:
        assert "checks do not run here" in jail and "WSL2" in jail
    assert not any(r.blocking for r in rows.values())            # everything else passes on this machine
    assert "3 not available here (nothing to fix)" in doctor_command.summary(list(rows.values()))
    assert " to fix;" not in doctor_command.summary(list(rows.values())) + ";"


def test_the_whole_report_on_a_simulated_mac(monkeypatch, capsys):
    monkeypatch.setattr(check.Host, "here", classmethod(lambda cls: host("darwin", prefix=REPO / ".venv")))
    monkeypatch.setenv("PYTHONIOENCODING", "utf-8")
    code = main(["doctor"])
    out = capsys.readouterr().out
    rows, fixes, nxt = parse(out)
    assert code == 0, out
    assert out.splitlines()[0].startswith("explainer doctor: macOS arm64")
    assert [n for n, m in rows.items() if m == "–"] == ["shared memory", VLLM, "workshop jail"]
    assert fixes == {} and nxt == "make lab"


def test_missing_dot_tells_each_platform_its_own_command(monkeypatch):
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not os.access(os.path.join(d, "dot"), os.X_OK))
    monkeypatch.setenv("PATH", path)
    want = {"linux": ("sudo apt-get install graphviz", True), "darwin": ("brew install graphviz", False),
            "win32": ("winget install graphviz, then open a new terminal (so `dot` is on PATH)", False)}
    for system, (fix, by_setup) in want.items():
        row = doctor_rows.check_dot(host(system))
        assert row.status == "failed" and (row.fix, row.by_setup) == (fix, by_setup)
    fedora = doctor_rows.check_dot(check.Host("linux", "x86_64", REPO, apt=False))
    assert "dnf install graphviz" in fedora.fix and not fedora.by_setup


def _rows(**status) -> list[check.Check]:
    out = []
    for name, kind in status.items():
        out.append(check.Check(name, kind == "ok", name, fix=f"fix {name}", by_setup=kind == "setup",
                                unavailable=kind == "n/a", unchecked=kind == "unchecked"))
    return out


def test_next_step_a_fix_the_set_up_cannot_make_comes_first(tmp_path):
    mac = host("darwin", checkout=tmp_path)                       # a fresh checkout: no .venv
    rows = _rows(python="ok", torch="setup", dot="own", shm="n/a", gloo="unchecked")
    rows[-1].by_setup = True
    assert check.next_step(rows, mac) == ("fix dot", "fix the dot row, then run the doctor again")
    rows[2].ok = True                                             # Graphviz installed
    assert check.next_step(rows, mac)[0] == "make lab"
    assert check.next_step(_rows(python="ok", shm="n/a"), mac)[0] == "jupyter lab notebooks/"


def test_windows_gets_powershell_commands_and_no_make(tmp_path):
    win = host("win32", checkout=tmp_path)
    rows = _rows(torch="setup")
    command, why = check.next_step(rows, win)
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert command == (f"py -{v} -m venv .venv; .venv\\Scripts\\python -m pip install torch=={check.TORCH_VERSION} "
                       f'-e ".[notebooks,hf]"; .venv\\Scripts\\python -m explainer doctor')
    assert "make" not in command and "creates .venv" in why
    (tmp_path / ".venv" / "Scripts").mkdir(parents=True)
    (tmp_path / ".venv" / "Scripts" / "python.exe").touch()      # set up; the doctor ran from another Python
    assert check.next_step(rows, win)[0] == ".venv\\Scripts\\python -m explainer doctor"
    ready = host("win32", checkout=tmp_path, prefix=tmp_path / ".venv")
    assert check.next_step(_rows(torch="ok"), ready)[0].endswith(".venv\\Scripts\\jupyter lab notebooks")


def test_linux_without_make_runs_the_set_up_script(tmp_path):
    bare = check.Host("linux", "x86_64", tmp_path, make=False, apt=True)
    assert check.next_step(_rows(torch="setup"), bare)[0] == "bash scripts/setup.sh lab"


def test_ascii_marks_on_a_console_that_cannot_show_them(monkeypatch):
    class Cp437:
        encoding = "cp437"
    monkeypatch.setattr(sys, "stdout", Cp437())
    assert doctor_command._marks() == doctor_command.ASCII_MARKS
