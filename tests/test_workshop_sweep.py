"""What a grading session finds on a shared machine cannot turn it against anyone: the start-up sweep of killed
sessions' folders, and the gradebook written into a folder learners can write to.

The hostile round's reproducers: another user plants a folder named like a killed session's, whose
``check.json`` names a process group of ours (the room board, a JupyterLab); a FIFO where the record should be
(every later check then hung); a symlink where the gradebook's temporary file will be (the instructor's grading
then overwrote a root-only file). Each sweep runs in a child process under a deadline, so a sweep that blocks
fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from explainer.workshop import grading, process_group
from explainer.workshop.grading import Row
from explainer.workshop.report import Report

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting a folder as another user needs root")


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _victim() -> subprocess.Popen:
    """A process group of ours that a sweep must never signal (stands for the room board or JupyterLab)."""
    return subprocess.Popen(["sleep", "120"], start_new_session=True)


def _start(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19].decode()


def _roots() -> list[str]:
    """Where a sweep looks: the shared temporary folder (where it used to), and this user's private folder."""
    roots = [tempfile.gettempdir()]
    private = getattr(process_group, "sweep_root", None)
    if private is not None:
        roots.append(private())
    return roots


def _plant(root: str, record: bytes | None = None, fifo: bool = False, owner: int | None = None) -> Path:
    prefix = getattr(process_group, "PREFIX", "explainer-workshop-")
    folder = Path(root) / f"{prefix}{_dead_pid()}-planted{os.getpid()}"
    folder.mkdir(mode=0o700)
    if fifo:
        os.mkfifo(folder / "check.json")
    elif record is not None:
        (folder / "check.json").write_bytes(record)
    if owner is not None:
        for p in (folder, folder / "check.json"):
            os.chown(p, owner, owner, follow_symlinks=False)
    return folder


def _sweep(timeout: float = 120.0) -> subprocess.CompletedProcess:
    """The grader's start-up sweep, in a child (as ``Grader()`` runs it). The deadline only tells a blocked sweep
    from a finished one; it is generous because the child imports the package on a machine that may be busy."""
    return subprocess.run([sys.executable, "-c", "from explainer.workshop import process_group; "
                           "print(len(process_group.sweep()))"], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


@as_root
def test_the_sweep_never_signals_a_group_named_by_a_folder_another_user_planted():
    victim = _victim()
    planted = []
    try:
        record = json.dumps({"pid": victim.pid, "start": _start(victim.pid)}).encode()
        planted = [_plant(root, record, owner=NOBODY) for root in _roots()]
        out = _sweep()
        assert out.returncode == 0, out.stderr
        time.sleep(0.3)
        assert victim.poll() is None, "the sweep killed a process group named by another user's file"
        assert all(p.exists() for p in planted), "the sweep removed another user's folder"
    finally:
        victim.kill()
        victim.wait()
        for p in planted:
            subprocess.run(["rm", "-rf", str(p)], check=False)


def test_a_planted_fifo_never_blocks_the_sweep():
    planted = []
    try:
        planted = [_plant(root, fifo=True) for root in _roots()]
        try:
            out = _sweep()
        except subprocess.TimeoutExpired:
            pytest.fail("the sweep blocked on a FIFO planted where a check's record is kept")
        assert out.returncode == 0, out.stderr
    finally:
        for p in planted:
            subprocess.run(["rm", "-rf", str(p)], check=False)


def test_the_sweep_signals_only_a_group_it_can_prove_it_started():
    """In this user's own folder: a record naming a live group of ours without the proof (uid, boot, start of
    the session leader) is not signalled, and a symlinked record is not followed; both folders are removed."""
    sweep_root = getattr(process_group, "sweep_root", None)
    if sweep_root is None:
        pytest.fail("the sweep has no private folder of this user's: it sweeps the shared temporary folder")
    victim = _victim()
    target = Path(sweep_root()) / f"elsewhere-{os.getpid()}"
    planted = []
    try:
        bare = _plant(sweep_root(), json.dumps({"pid": victim.pid, "start": _start(victim.pid)}).encode())
        linked = _plant(sweep_root())
        planted = [bare, linked]
        target.write_text(json.dumps({"pid": victim.pid, "start": _start(victim.pid), "uid": os.geteuid()}))
        os.symlink(target, linked / "check.json")
        assert _sweep().returncode == 0
        time.sleep(0.3)
        assert victim.poll() is None
        assert not bare.exists() and not linked.exists() and target.exists()
    finally:
        victim.kill()
        victim.wait()
        target.unlink(missing_ok=True)
        for p in planted:
            subprocess.run(["rm", "-rf", str(p)], check=False)


def test_the_private_folder_is_this_users_alone(tmp_path, monkeypatch):
    sweep_root = getattr(process_group, "sweep_root", None)
    if sweep_root is None:
        pytest.fail("the sweep has no private folder of this user's")
    st = os.lstat(sweep_root())
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


@as_root
def test_a_private_folder_planted_by_another_user_is_not_used(tmp_path, monkeypatch):
    """Another user made the folder first (or a symlink by that name): a session uses a folder of its own."""
    from explainer.workshop import private_dir
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    os.chmod(tmp_path, 0o1777)
    planted = tmp_path / f"explainer-{os.geteuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, NOBODY, NOBODY)
    private_dir.root.cache_clear()
    try:
        got = private_dir.root()
        st = os.lstat(got)
        assert Path(got) != planted and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    finally:
        private_dir.root.cache_clear()


def _rows() -> list[Row]:
    return [Row("ada.py", Report("accept", "pass", seconds=1.0)), Row("notes.txt", skipped="not a .py file")]


def test_the_gradebook_never_writes_through_a_planted_link(tmp_path):
    """A shared hand-in folder: a learner links the gradebook's temporary name to a file only the instructor may
    write. Grading writes the gradebook and leaves that file as it was."""
    victim = tmp_path / "root-only.txt"
    victim.write_text("the instructor's own file\n")
    os.chmod(victim, 0o600)
    handins = tmp_path / "handins"
    handins.mkdir()
    os.chmod(handins, 0o1777)
    for pid in {os.getpid(), os.getpid() + 1}:
        os.symlink(victim, handins / f".grades.csv.{pid}.tmp")
    grading.write_csv(handins / "grades.csv", "accept", _rows())
    assert victim.read_text() == "the instructor's own file\n"
    book = (handins / "grades.csv").read_text().splitlines()
    assert book[0].startswith("submission,") and book[1].startswith("ada.py,accept,pass")
    assert not (handins / "grades.csv").is_symlink()
    left = sorted(p.name for p in handins.iterdir())
    assert left == sorted(["grades.csv"] + [f".grades.csv.{pid}.tmp" for pid in {os.getpid(), os.getpid() + 1}])


def test_a_gradebook_path_that_is_a_link_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "root-only.txt"
    victim.write_text("keep\n")
    os.symlink(victim, tmp_path / "grades.csv")
    grading.write_csv(tmp_path / "grades.csv", "accept", _rows())
    assert victim.read_text() == "keep\n" and not (tmp_path / "grades.csv").is_symlink()


def test_end_does_not_signal_a_group_whose_leader_changed():
    """``end`` on a record: the leader's start time, uid and session are checked before any signal."""
    if not hasattr(process_group, "Record"):
        pytest.fail("a check's record holds no proof of whose group it is")
    victim = _victim()
    try:
        rec = process_group.Record.of(victim.pid)
        assert rec is not None and rec.ours()
        forged = process_group.Record(victim.pid, str(int(rec.start) + 1), rec.uid, rec.boot)
        assert not forged.ours()
        assert not process_group.Record(victim.pid, rec.start, rec.uid + 1, rec.boot).ours()
        assert not process_group.Record(victim.pid, rec.start, rec.uid, "another-boot").ours()
        os.kill(victim.pid, 0)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


def test_a_checks_own_files_are_never_written_through_a_link(tmp_path):
    """The check's record (check.json), its progress file and its output are each made new (O_EXCL, no link
    followed): a link planted where one goes is refused, and the file it points at, or would make, is untouched."""
    from explainer.workshop import private_dir, progress
    victim = tmp_path / "root-only"
    victim.write_text("keep\n")
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    os.symlink(victim, work / "check.json")
    with pytest.raises(FileExistsError):
        process_group.record(work, os.getpid())
    os.symlink(victim, work / "progress.jsonl")
    with pytest.raises(FileExistsError):
        progress.start(str(work / "progress.jsonl"))
    os.symlink(tmp_path / "made-through-a-link", work / "output.txt")      # a dangling link: O_CREAT would follow it
    with pytest.raises(FileExistsError):
        private_dir.create(str(work / "output.txt"))
    assert victim.read_text() == "keep\n" and not (tmp_path / "made-through-a-link").exists()
