"""A grader that cannot be fooled: the attacks of ``tests/workshop_attacks/`` graded with the command line.

Each test fails on a grader that runs the learner's code in the process that computes the verdict (the
design before the jail; the notes of the change list which attacks passed there). The grading command runs
on a copy of the package in a temporary folder (PYTHONPATH), so an attack that did get through could
only damage the copy; the copy is compared with the checkout afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explainer.workshop import catalog, jail, process_group

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not jail.available()[0], reason=f"no jail here: "
                                                                                    f"{jail.available()[1]}")]
REPO = Path(__file__).resolve().parents[1]
ATTACKS = REPO / "tests" / "workshop_attacks"
STUB = "import torch\n\n\ndef entropy_bound_accept(entropy, bound):\n    return torch.zeros_like(entropy, dtype=torch.bool)\n"


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg")
    os.chmod(root, 0o755)
    shutil.copytree(REPO / "explainer", root / "explainer", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def cli(pkg, *args, timeout=300, **kw):
    env = {**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "3"}
    return subprocess.run([sys.executable, "-m", "explainer", "workshop", *map(str, args)], capture_output=True,
                          text=True, cwd=pkg, env=env, timeout=timeout, **kw)


RUN = f"4242{os.getpid() % 10000:04d}."      # this run's marker (another run's attacks on this machine are not ours)


def attack(name: str, folder: Path) -> Path:
    """A copy of an attack whose processes run `sleep RUN NN` (the attacks themselves say `sleep 4242.NN`)."""
    path = folder / f"{name}.py"
    path.write_text((ATTACKS / f"{name}.py").read_text().replace("4242.", RUN))
    return path


def markers(tag: str = RUN) -> list[str]:
    """Processes an attack of this run left (they run `sleep RUN NN`)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("sleep ") and tag in cmd:
            found.append(f"{entry}: {cmd}")
    return found


def _same_tree(a: Path, b: Path) -> bool:
    for p in a.rglob("*"):
        if "__pycache__" in p.parts or not p.is_file():
            continue
        if p.read_bytes() != (b / p.relative_to(a)).read_bytes():
            return False
    return True


@pytest.mark.parametrize("attack", ["forged_result", "patched_checker", "patched_reference", "torch_equal"])
def test_a_wrong_answer_cannot_forge_its_verdict(pkg, attack):
    proc = cli(pkg, "check", "accept", ATTACKS / f"{attack}.py", "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["passed"] is False and data["status"] == "fail", proc.stdout[-2000:]


@pytest.mark.parametrize("attack, exercise, failed", [("self_reported_bool", "tensor-dict-gate", "returns a bool"),
                                                      ("self_reported_unchanged", "accept", "distinct values")])
def test_the_learners_process_does_not_report_on_itself(pkg, attack, exercise, failed):
    """Its answers are data (what the function returned, its input after the call); the verdict on them ("returns
    a bool", input unchanged) is computed here. A process that replaces the exercise's `answer` to claim a bool or
    an unchanged input gets nothing for it."""
    proc = cli(pkg, "check", exercise, ATTACKS / f"{attack}.py", "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["passed"] is False, proc.stdout[-2000:]
    assert any(c["name"] == failed and not c["passed"] for c in data["checks"]), data["checks"]


def test_output_injection_does_not_reach_the_graders_stdout(pkg):
    proc = cli(pkg, "check", "accept", ATTACKS / "stdout_injection.py", "--json")
    data = json.loads(proc.stdout)                         # exactly one object: nothing was written beside it
    assert "FORGED" not in proc.stdout and data["passed"] is False and proc.returncode == 1


def test_tampering_with_the_package_and_checkpoint_changes_nothing(pkg, tmp_path):
    for attack in ("tamper_package", "tamper_checkpoint"):
        cli(pkg, "check", "accept", ATTACKS / f"{attack}.py")
    assert _same_tree(REPO / "explainer", pkg / "explainer")
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    assert cli(pkg, "check", "accept", stub).returncode == 1
    assert cli(pkg, "check", "accept", ATTACKS / "solution.py").returncode == 0


def test_one_submission_cannot_import_another(pkg, tmp_path):
    for name in ("solution.py", "copycat.py"):
        shutil.copy(ATTACKS / name, tmp_path / name)
    proc = cli(pkg, "check", "accept", tmp_path / "copycat.py")
    assert proc.returncode == 2 and "No module named 'solution'" in proc.stderr


@pytest.mark.parametrize("name, exercise", [("setsid_daemon", "accept"), ("double_fork", "accept"),
                                              ("daemon_forges_later", "accept"), ("gate_fork_burst", "tensor-dict-gate")])
def test_no_process_outlives_its_check(pkg, tmp_path, name, exercise):
    proc = cli(pkg, "check", exercise, attack(name, tmp_path))
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-500:]    # correct answers: they pass
    time.sleep(0.5)
    assert markers() == []
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    assert cli(pkg, "check", "accept", stub).returncode == 1                  # and a later check is its own


def test_limits_are_named(pkg, tmp_path):
    mem = cli(pkg, "check", "accept", ATTACKS / "memory_hog.py")
    assert mem.returncode == 1 and "hit the memory limit" in mem.stdout
    t0 = time.monotonic()
    dodge = cli(pkg, "check", "accept", ATTACKS / "watchdog_dodge.py")
    assert dodge.returncode == 1 and "did not return within 3 s (the time limit" in dodge.stdout
    assert time.monotonic() - t0 < 60                     # the check's deadline, not the 120 s hard cap
    bomb = cli(pkg, "check", "accept", attack("fork_bomb", tmp_path))
    assert bomb.returncode == 1 and markers() == []


def test_huge_file_is_refused_before_it_is_read(pkg, tmp_path):
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 9_000_000)                   # 54 MB
    proc = cli(pkg, "check", "accept", big)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "a submission may be at most 1 MB" in proc.stderr


@pytest.mark.parametrize("case", ["huge_output", "one_mb_of_statements"])
def test_the_grader_stays_under_500_mb(pkg, tmp_path, case):
    path = ATTACKS / "huge_output.py"
    if case == "one_mb_of_statements":                      # just under the cap: the most a file can make us parse
        path = tmp_path / "statements.py"
        path.write_text("x = 1\n" * 166_000 + "def entropy_bound_accept(e, b):\n    return e > 1e9\n")
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    env = {**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "3"}
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "explainer", "workshop", "check",
                          "accept", str(path)], capture_output=True, text=True, env=env, cwd=pkg, timeout=300)
    peak_mb = int(out.stdout.strip()) / 1024                # the largest process of the grading command's tree
    print(f"peak RSS ({case}): {peak_mb:.0f} MB")
    assert peak_mb < 500


def test_no_network_in_the_jail(pkg, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    path = tmp_path / "net.py"
    path.write_text(f"import socket\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), 2)\n"
                    f"def entropy_bound_accept(e, b):\n    return e > 0\n")
    proc = cli(pkg, "check", "accept", path)
    assert proc.returncode == 2 and "Network is unreachable" in proc.stderr      # not even a loopback
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


@pytest.mark.parametrize("name, reason", [("reply_flood", "answered with more than 4 MB"),
                                          ("reply_nested", "answered with malformed data")])
def test_the_answer_channel_is_bounded_and_checked(pkg, name, reason):
    proc = cli(pkg, "check", "accept", ATTACKS / f"{name}.py")
    assert proc.returncode == 1 and reason in proc.stdout, proc.stdout[-1500:] + proc.stderr[-500:]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_jail_holds_no_secret_and_no_way_out(pkg):
    """The grader's environment (a joined room's address and token) never reaches the learner's process, and
    limits, pid 1, the root, uid 0, the network, Unix, vsock (to the host, across namespaces) and netlink sockets
    and io_uring are all refused."""
    secret = "SECRET-TOKEN-4242"
    env = {**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "3", "GRADER_SECRET": secret,
           "EXPLAINER_ROOM": f"http://127.0.0.1:9/?token={secret}", "EXPLAINER_SEAT": "alice"}
    proc = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept",
                           str(ATTACKS / "escape_tries.py")], capture_output=True, text=True, cwd=pkg, env=env,
                          timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if "ESCAPE " in ln)
    got = json.loads(line.split("ESCAPE ", 1)[1])
    assert secret not in line and not [k for k in got["environ"] if k.startswith("EXPLAINER_")]
    assert "a room's address seen" not in line
    tries = {k: v for k, v in got.items() if k != "environ" and not k.startswith("/proc/")}
    assert len(tries) == 9 and all(v.startswith("refused") for v in tries.values()), tries
    assert all("Permission denied" in tries[k] for k in ("unix socket", "vsock to the host", "netlink socket")), tries


def test_a_killed_grader_leaves_nothing_after_the_next_run(pkg, tmp_path):
    path = tmp_path / "slow.py"
    path.write_text("import os, time\nif os.fork() == 0:\n    os.execv('/bin/sleep', ['sleep', '" + RUN + "41'])\n"
                    "time.sleep(100)\ndef entropy_bound_accept(e, b):\n    return e > 0\n")
    env = {**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "60"}
    grader = subprocess.Popen([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(path)],
                              cwd=pkg, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not markers(RUN + "41") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert markers(RUN + "41"), "the submission never started"
    grader.send_signal(signal.SIGKILL)
    grader.wait()
    deadline = time.monotonic() + 10
    while markers(RUN + "41") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert markers(RUN + "41") == []                          # the jail died with the check, the check with the grader
    left = list(Path(process_group.sweep_root()).glob(f"{process_group.PREFIX}{grader.pid}-*"))
    assert left, "the killed grader left no work folder: the sweep below would prove nothing"
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    cli(pkg, "check", "accept", stub)
    assert not [p for p in left if p.exists()]              # the next run swept the killed one's folder


def test_not_isolated_is_said_in_one_line(pkg, tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    env = {**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "3", "EXPLAINER_WORKSHOP_JAIL": "off"}
    proc = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(stub), "--json"],
                          capture_output=True, text=True, cwd=pkg, env=env, timeout=300)
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["isolated"] is False
    notes = [line for line in proc.stderr.splitlines() if "not isolated" in line]
    assert len(notes) == 1 and "rlimits only" in notes[0]


def test_ctrl_c_during_a_folder_prints_the_finished_rows_and_exits_130(pkg, tmp_path):
    (tmp_path / "a_stub.py").write_text(STUB)
    (tmp_path / "b_slow.py").write_text("import time\ntime.sleep(100)\ndef entropy_bound_accept(e, b):\n"
                                        "    return e > 0\n")
    (tmp_path / "c_stub.py").write_text(STUB)
    env = {**os.environ, "PYTHONPATH": str(pkg), "EXPLAINER_WORKSHOP_BUDGET": "60"}
    grader = subprocess.Popen([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(tmp_path)],
                              cwd=pkg, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in grader.stderr:                              # the first row is done: b_slow.py is running
        if "a_stub.py: fail" in line:
            break
    time.sleep(2)
    grader.send_signal(signal.SIGINT)
    out, err = grader.communicate(timeout=60)
    assert grader.returncode == 130, err
    rows = out.splitlines()
    assert any(r.startswith("a_stub.py") and " FAIL " in r for r in rows)
    assert not any(r.startswith(("b_slow.py", "c_stub.py")) for r in rows) and rows[-1] == "0/1 passed"
    assert "interrupted: 1 of 3 file(s) graded" in err and "Traceback" not in err
    assert not list(Path(process_group.sweep_root()).glob(f"{process_group.PREFIX}{grader.pid}-*"))


@pytest.mark.parametrize("exercise", list(catalog.EXERCISES))
@pytest.mark.parametrize("exc", ["SystemExit(3)", "KeyboardInterrupt()"])
def test_system_exit_and_interrupt_are_the_same_error_for_every_exercise(pkg, tmp_path, exercise, exc):
    path = tmp_path / "raises.py"
    path.write_text(f"def {catalog.EXERCISES[exercise].signature.split(' -> ')[0]}:\n    raise {exc}\n")
    proc = cli(pkg, "check", exercise, path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"raised {exc.split('(')[0]}" in proc.stderr and "(at raises.py line 2" in proc.stderr


def test_a_symlinked_submission_is_refused_unread(pkg, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-FIRST-LINE\n")
    link = tmp_path / "answer.py"
    link.symlink_to(secret)
    proc = cli(pkg, "check", "accept", link)
    assert proc.returncode == 2 and "is a symlink" in proc.stderr and "SECRET" not in proc.stderr + proc.stdout
