"""Issue #10 items 6-9: every bad flag, environment value, prompt and checkpoint exits 2 with one line naming
what is wrong, before any work or process starts; a closed pipe exits quietly; peer-supplied segment names
and a full /dev/shm are refused before anything is opened or sized."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from explainer import cli
from explainer.distributed.device_communicators import shm


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str, *words) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def no_work(monkeypatch):
    """Any evaluation, training, generation or process start fails the test: bad input is rejected first."""
    def boom(*a, **k):
        raise AssertionError("work started before the bad input was rejected")
    import explainer.distributed.launch as launch
    import explainer.engine.multiproc_executor as multiproc
    import explainer.model.train as train
    import explainer.scenario.accuracy as acc
    import explainer.scenario.comm as comm
    monkeypatch.setattr(acc, "engine_exact_match", boom)
    monkeypatch.setattr(train, "train", boom)
    monkeypatch.setattr(train, "record_accuracy", boom)
    for module in (launch, multiproc, comm):                # every module that starts rank processes
        monkeypatch.setattr(module, "launch", boom)
    import explainer.sampler as sampler
    monkeypatch.setattr(sampler, "generate", boom)


@pytest.mark.parametrize("argv, words", [
    (["accuracy", "--seed", "18446744073709551615"], ["--seed", "18446744073709551615"]),
    (["accuracy", "--pp", "5"], ["--pp", "5"]),
    (["accuracy", "--pp", "1e3"], ["--pp"]),
    (["accuracy", "--limit", "0"], ["--limit"]),
    (["generate", "451", "--steps", "99999999999999999999999"], ["--steps"]),
    (["generate", "451", "--steps", "1e23"], ["--steps"]),
    (["generate", "451", "--seed", str(2**64)], ["--seed"]),
    (["generate", "451", "--seed", "-1"], ["--seed"]),
    (["generate", "4" * 120_000], ["120000 characters", "1..64"]),
    (["train", "--steps", "1e23"], ["--steps", "1e23"]),
    (["train", "--steps", "100001"], ["--steps"]),
    (["train", "--steps", "1" + "0" * 23], ["--steps"]),
    (["train", "--seed", str(2**70)], ["--seed"]),
    (["train", "--out", "/proc/nonexistent/ckpt"], ["--out"]),
    (["train", "--out", "/proc/version"], ["--out", "not a directory"]),
    (["scenario", "comm-same-node", "--backend", "gpu"], ["gpu"]),
])
def test_bad_flag_exits_2_before_any_work(capsys, no_work, argv, words):
    t0 = time.monotonic()
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (code, out, err)
    _one_line_error(err, *words)
    assert time.monotonic() - t0 < 10


def test_train_refuses_the_shipped_checkpoint_without_force(capsys, no_work):
    from explainer.model.train import DEFAULT_OUT
    before = (DEFAULT_OUT / "spell_numbers.pt").stat().st_mtime_ns
    code, _, err = run_cli(capsys, "train", "--out", str(DEFAULT_OUT), "--steps", "1")
    assert code == 2
    _one_line_error(err, "shipped checkpoint", "--force")
    code, _, err = run_cli(capsys, "train", "--evaluate-only")      # re-evaluating writes its metadata
    assert code == 2
    _one_line_error(err, "--force")
    assert (DEFAULT_OUT / "spell_numbers.pt").stat().st_mtime_ns == before


def test_train_default_out_is_a_new_directory():
    from explainer.model.train import DEFAULT_OUT, NEW_OUT
    assert (os.path.abspath(NEW_OUT) != str(DEFAULT_OUT.resolve()))


@pytest.mark.parametrize("damage", ["empty", "truncated", "wrong-shape", "not-a-dict", "bad-json"])
def test_damaged_checkpoint_exits_2_naming_the_file(capsys, tmp_path, damage, monkeypatch):
    import shutil

    import explainer.model.train as train
    monkeypatch.setattr(train, "record_accuracy", lambda *a, **k: pytest.fail("evaluated a damaged checkpoint"))
    for ext in ("pt", "json"):
        shutil.copy(train.DEFAULT_OUT / f"spell_numbers.{ext}", tmp_path / f"spell_numbers.{ext}")
    pt = tmp_path / "spell_numbers.pt"
    if damage == "empty":
        pt.write_bytes(b"")
    elif damage == "truncated":
        pt.write_bytes(pt.read_bytes()[: pt.stat().st_size // 2])
    elif damage == "wrong-shape":
        state = torch.load(pt, weights_only=True)
        key = next(k for k, v in state.items() if v.dim() == 2)
        state[key] = torch.zeros(3, 3)
        torch.save(state, pt)
    elif damage == "not-a-dict":
        torch.save([torch.zeros(2)], pt)
    else:
        (tmp_path / "spell_numbers.json").write_text("{not json")
    code, _, err = run_cli(capsys, "train", "--evaluate-only", "--out", str(tmp_path), "--force")
    assert code == 2, err
    _one_line_error(err, str(tmp_path))


@pytest.mark.parametrize("var, value", [
    ("EXPLAINER_SHM_OPS", "maybe"), ("EXPLAINER_COMM_TIMEOUT", "abc"), ("EXPLAINER_COMM_TIMEOUT", "nan"),
    ("EXPLAINER_COMM_TIMEOUT", "inf"), ("EXPLAINER_COMM_TIMEOUT", "1e300"), ("EXPLAINER_COMM_TIMEOUT", "0"),
    ("EXPLAINER_COMM_TIMEOUT", "-1"), ("EXPLAINER_SHM_CHUNK_BYTES", "65537"),
    ("EXPLAINER_SHM_CHUNK_BYTES", "abc"), ("EXPLAINER_SHM_ALLOW_ARM", "2"), ("EXPLAINER_DIST_IDENT", "a/b"),
    ("EXPLAINER_START_METHOD", "teleport"), ("EXPLAINER_FAULT_PHASE", "1:nowhere"),
])
def test_bad_environment_exits_2_naming_the_variable(capsys, no_work, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    code, out, err = run_cli(capsys, "scenario", "comm-same-node", "--backend", "processes", "--json")
    assert code == 2, (code, out, err)
    _one_line_error(err, var)
    assert out == ""


def test_generate_help_states_the_prompt_limit(capsys):
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    assert "at most 64 characters" in " ".join(capsys.readouterr().out.split())


# --- subprocess: signals and pipes as a shell delivers them ------------------------------------------------
def test_closed_pipe_exits_quietly():
    p = subprocess.Popen([sys.executable, "-m", "explainer", "scenario"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()                                       # like `| head` that already exited
    err = p.stderr.read().decode()
    code = p.wait(timeout=120)
    assert code == 141 and err == "", (code, err)


def test_ctrl_c_exits_130_with_one_line():
    p = subprocess.Popen([sys.executable, "-m", "explainer", "accuracy", "--limit", "100"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    buf = ""
    while "PP=1:" not in buf and time.monotonic() < deadline:   # evaluating: progress on stderr
        buf += p.stderr.read(1)
    p.send_signal(2)
    _, err = p.communicate(timeout=30)
    lines = [ln for ln in (buf + err).replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("PP=1")]
    assert p.returncode == 130 and len(lines) == 1 and lines[0].startswith("interrupted"), (p.returncode, lines)


# --- shared-memory names and capacity -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../etc/hostname", "/etc/hostname", "g_1-123-0123abcd/../../x",
                                  "other_1-123-0123abcd", "g_0-123-0123abcd", "g_1-123-0123abcd\0", ""])
def test_peer_segment_name_is_validated_before_opening(name, monkeypatch):
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    with pytest.raises(shm.ShmPayloadError, match="not accepted"):
        shm.check_segment_name(name, "g", 1)
    assert opened == []
    assert shm.check_segment_name("g_1-123-0123abcd", "g", 1)


def test_peer_supplied_name_never_opens_a_file_outside_dev_shm(monkeypatch):
    """A rank that receives a hostile name from the exchange refuses it before any open()."""
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    hostile = lambda mine: [mine, "../../etc/hostname"]    # noqa: E731 - the peer's "segment name"
    with pytest.raises(shm.ShmPayloadError):
        shm.ShmGroup(f"t{os.getpid()}-pp:0-[0-1]-cpushm", 0, 2, exchange=hostile, barrier=lambda: None)
    assert not any("hostname" in p for p in opened), opened
    assert not [n for n in os.listdir(shm.SHM_DIR) if n.startswith(f"t{os.getpid()}-")]


def test_capacity_is_checked_before_sizing(monkeypatch):
    class Tiny:
        f_bavail, f_frsize = 10, 4096
    monkeypatch.setattr(os, "statvfs", lambda path: Tiny())
    with pytest.raises(shm.ShmCapacityError, match=r"40960 bytes free.*needs \d+ bytes"):
        shm.ShmGroup(f"c{os.getpid()}-pp:0-[0-1]-cpushm", 0, 2, exchange=lambda n: [n, n], barrier=lambda: None)
    assert not [n for n in os.listdir(shm.SHM_DIR) if n.startswith(f"c{os.getpid()}-")]
