"""The room kit (`make wheelhouse`, scripts/wheelhouse.py) and the set-up that installs from it with no network.

`make test` collects the kit into build/wheelhouse and builds .venv-lab from it inside a network namespace whose
only interface is loopback (scripts/no-network.sh); the notebooks then pass nbval in that venv, again with no
network (the Makefile's third nbval run). Here: that .venv-lab really came from the kit with no network (its
set-up's record) and holds exactly the kit's distributions; the kit verifies; a damaged kit, one collected for
another Python or platform, and a folder that is no kit are refused in one line before anything is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KIT = Path(os.environ.get("EXPLAINER_TEST_WHEELHOUSE") or REPO / "build" / "wheelhouse")
LAB_VENV = Path(os.environ.get("EXPLAINER_LAB_VENV") or REPO / ".venv-lab")
RECORD = LAB_VENV / ".explainer-wheelhouse.json"
SCRIPT = [sys.executable, str(REPO / "scripts" / "wheelhouse.py")]

needs_kit = pytest.mark.skipif(not (KIT / "manifest.json").exists(),
                               reason=f"no wheelhouse at {KIT}: `make test` collects it (make setup-lab-venv)")


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@needs_kit
def test_the_lab_venv_came_from_the_kit_with_no_network():
    if not RECORD.exists():
        pytest.skip(f"{LAB_VENV} was not set up from a wheelhouse (make setup-lab-venv does that)")
    record = json.loads(RECORD.read_text())
    assert Path(record["wheelhouse"]) == KIT.resolve()
    if record["interfaces"] != ["lo"]:
        pytest.skip(f"set up with network interfaces {record['interfaces']} (no namespace: not root?); "
                    "pip still had no index")
    manifest = json.loads((KIT / "manifest.json").read_text())
    kit = {norm(f["project"]): f["version"] for f in manifest["files"] if "project" in f}
    out = subprocess.run([str(LAB_VENV / "bin" / "python"), "-c",
                          "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: d.version "
                          "for d in m.distributions()}))"], capture_output=True, text=True, timeout=60, check=True)
    installed = {norm(k): v for k, v in json.loads(out.stdout).items()}
    installed.pop("pip")                                     # the venv's own, from ensurepip
    assert {k: kit.get(k) for k in installed} == installed, "installed but not from the kit (or another version)"
    assert set(kit) - set(installed) <= {"wheel"}, "the kit holds what make lab never installs"


@needs_kit
def test_the_kit_verifies_and_says_what_it_covers():
    out = subprocess.run([*SCRIPT, "verify", str(KIT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    manifest = json.loads((KIT / "manifest.json").read_text())
    assert manifest["target"]["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    names = {f["file"] for f in manifest["files"]}
    assert any(n.startswith("torch-2.13.0") for n in names) and any(n.startswith("explainer-") for n in names)
    assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in manifest["files"])
    assert "make lab WHEELHOUSE=" in (KIT / "README.txt").read_text()


@needs_kit
def test_collecting_again_keeps_an_up_to_date_kit():
    out = subprocess.run([*SCRIPT, "collect", str(KIT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "up to date" in out.stdout and "nothing downloaded" in out.stdout, out.stdout


def small_kit(tmp_path: Path) -> Path:
    """A kit of two small wheels with a manifest written by the script itself (for this Python and platform)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import wheelhouse
    finally:
        sys.path.pop(0)
    kit = tmp_path / "kit"
    kit.mkdir()
    for name in ("a_pkg-1.0-py3-none-any.whl", "b_pkg-2.0-py3-none-any.whl"):
        (kit / name).write_bytes(os.urandom(2048))
    wheelhouse.write_manifest(kit, sorted(p.name for p in kit.iterdir()), None)
    return kit


def setup_with(kit: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["scripts/setup.sh", "lab"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "VENV": str(tmp_path / "venv"), "WHEELHOUSE": str(kit)})


def test_a_damaged_or_foreign_kit_is_refused_before_anything_is_installed(tmp_path):
    kit = small_kit(tmp_path)
    ok = subprocess.run([*SCRIPT, "verify", str(kit)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "2 files verified" in ok.stdout, ok.stderr
    with open(kit / "b_pkg-2.0-py3-none-any.whl", "r+b") as f:           # one flipped byte, as a bad copy
        f.write(b"\0")
    for run in (subprocess.run([*SCRIPT, "verify", str(kit)], capture_output=True, text=True, timeout=60),
                setup_with(kit, tmp_path)):
        assert run.returncode in (1, 2) and "b_pkg-2.0-py3-none-any.whl is damaged" in run.stderr, run.stderr
        assert "Traceback" not in run.stderr
    assert not (tmp_path / "venv").exists()
    manifest = json.loads((kit / "manifest.json").read_text())
    manifest["target"].update(system="Windows", machine="AMD64")
    (kit / "manifest.json").write_text(json.dumps(manifest))
    foreign = setup_with(kit, tmp_path)
    assert foreign.returncode == 1 and "was collected for" in foreign.stderr and "Windows AMD64" in foreign.stderr
    (kit / "manifest.json").unlink()
    none = setup_with(kit, tmp_path)
    assert none.returncode == 1 and "not a wheelhouse" in none.stderr
    assert not (tmp_path / "venv").exists()


def test_the_offline_set_up_sees_no_pip_configuration_or_index(tmp_path):
    """WHEELHOUSE makes pip ignore this machine's pip sources (here PIP_FIND_LINKS and /etc/xdg/pip point at
    local wheel folders): a kit without torch cannot be completed from them."""
    kit = small_kit(tmp_path)
    out = setup_with(kit, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "torch" in out.stderr and ("no matching distribution" in out.stderr.lower()
                                      or "could not find a version" in out.stderr.lower()), out.stderr
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)
