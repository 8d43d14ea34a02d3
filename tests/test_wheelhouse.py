"""The room kit (`make wheelhouse`, scripts/wheelhouse.py) and the set-up that installs from it with no network.

`make test` collects the kit into build/wheelhouse with $(PYTHON) and builds .venv-lab from it, with Debian's own
/usr/bin/python3 where that is another patch release of the same minor version (3.11.2 beside 3.11.7), inside a
network namespace whose only interface is loopback (scripts/no-network.sh); the notebooks then pass nbval in that
venv, again with no network (the Makefile's third nbval run), and open unmodified in its JupyterLab
(tests/test_lab_opened.py). Here: that .venv-lab really came from the kit with no network (its set-up's record),
with the manifest checked against its digest, and holds exactly the kit's distributions; every wheel of the kit
admits every patch release the kit claims; a kit holding a wheel this Python's patch release cannot install (the
room's reproducer: soupsieve 4.1.3 needs 3.11.5, Debian 12 has 3.11.2), a damaged kit, one collected for another
Python or platform, a manifest that is not the published one and a folder that is no kit are refused in one line
before anything is installed; pip sees only the files the manifest lists, copied where they were checked (an
unlisted wheel with a .pth payload beside them is never installed); a kit and a checkout at paths with a space work.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KIT = Path(os.environ.get("EXPLAINER_TEST_WHEELHOUSE") or REPO / "build" / "wheelhouse")
LAB_VENV = Path(os.environ.get("EXPLAINER_LAB_VENV") or REPO / ".venv-lab")
RECORD = LAB_VENV / ".explainer-wheelhouse.json"
SCRIPT = [sys.executable, str(REPO / "scripts" / "wheelhouse.py")]
HERE = sys.version_info[:3]

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
    assert record["authenticated"], "make test sets the lab venv up with KIT_SHA256"
    if record["interfaces"] != ["lo"]:
        pytest.skip(f"set up with network interfaces {record['interfaces']} (no namespace: not root?); "
                    "pip still had no index")
    manifest = json.loads((KIT / "manifest.json").read_text())
    kit = {norm(f["project"]): f["version"] for f in manifest["files"] if "project" in f and f.get("for") != "hub"}
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
    digest = hashlib.sha256((KIT / "manifest.json").read_bytes()).hexdigest()
    assert f"KIT_SHA256={digest}" in out.stdout                  # what the instructor publishes with the stick


@needs_kit
def test_every_wheel_of_the_kit_admits_every_patch_release_it_claims():
    wheelhouse = script()
    manifest = json.loads((KIT / "manifest.json").read_text())
    oldest = tuple(int(x) for x in manifest["target"]["oldest"].split("."))
    assert oldest <= HERE and oldest[:2] == HERE[:2]
    wheels = [f for f in manifest["files"] if f["file"].endswith(".whl")]
    for release in [(*oldest[:2], p) for p in range(oldest[2], HERE[2] + 1)]:
        refused = [f["file"] for f in wheels if not wheelhouse.admits(f["requires_python"], release)]
        assert not refused, f"{refused} do not install on {release}"
    lab = LAB_VENV / "bin" / "python"
    if lab.exists():                                   # the lab venv's Python (Debian's 3.11.2 in make test)
        got = subprocess.run([str(lab), "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True,
                             text=True, timeout=60).stdout.split()
        assert tuple(map(int, got)) >= oldest


def script():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import wheelhouse
    finally:
        sys.path.pop(0)
    return wheelhouse


def make_wheel(folder: Path, name: str, version: str, requires_python: str | None = None,
               pth: str | None = None) -> Path:
    """A real, installable pure-Python wheel: one module, its METADATA (with Requires-Python), a RECORD."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 + (f"Requires-Python: {requires_python}\n" if requires_python else ""),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if pth:
        files[f"{name}.pth"] = pth
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
    return path


def small_kit(tmp_path: Path, requires_python: str | None = None, folder: str = "kit") -> Path:
    """A kit of two small wheels with a manifest written by the script itself (for this Python and platform)."""
    kit = tmp_path / folder
    kit.mkdir(parents=True)
    make_wheel(kit, "a_pkg", "1.0")
    make_wheel(kit, "b_pkg", "2.0", requires_python)
    script().write_manifest(kit, sorted(p.name for p in kit.iterdir()), None)
    return kit


def setup_with(kit: Path, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["scripts/setup.sh", "lab"], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VENV": str(tmp_path / "venv"), "WHEELHOUSE": str(kit), **env})


def test_a_damaged_or_foreign_kit_is_refused_before_anything_is_installed(tmp_path):
    kit = small_kit(tmp_path)
    ok = subprocess.run([*SCRIPT, "verify", str(kit)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "2 listed files match it (sha256)" in ok.stdout, ok.stderr
    with open(kit / "b_pkg-2.0-py3-none-any.whl", "r+b") as f:           # one flipped byte, as a bad copy
        f.seek(40)
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


def test_a_kit_with_a_wheel_this_patch_release_cannot_install_is_refused_in_one_line(tmp_path):
    """The room's reproducer, in this interpreter's numbers: a kit collected on a newer patch release holds a wheel
    whose Requires-Python this release does not meet (soupsieve 4.1.3, >=3.11.5, on Debian 12's 3.11.2): refused
    before anything is installed, naming the wheel and the fix, instead of pip failing minutes into the install."""
    newer = f">={HERE[0]}.{HERE[1]}.{HERE[2] + 1}"
    kit = small_kit(tmp_path, requires_python=newer)
    for run in (subprocess.run([*SCRIPT, "verify", str(kit)], capture_output=True, text=True, timeout=60),
                setup_with(kit, tmp_path)):
        assert run.returncode in (1, 2), run.stdout + run.stderr
        line = run.stderr.strip().splitlines()[-1]
        assert "b_pkg-2.0-py3-none-any.whl" in line and f"needs Python {newer}" in line, run.stderr
        assert f"OLDEST_PYTHON={HERE[0]}.{HERE[1]}.{HERE[2]}" in line and "Traceback" not in run.stderr
    assert not (tmp_path / "venv").exists()
    manifest = json.loads((kit / "manifest.json").read_text())        # a kit that claims only newer releases
    manifest["target"]["oldest"] = f"{HERE[0]}.{HERE[1]}.{HERE[2] + 1}"
    manifest["files"] = [dict(f, requires_python=None) for f in manifest["files"]]
    (kit / "manifest.json").write_text(json.dumps(manifest))
    older = subprocess.run([*SCRIPT, "verify", str(kit)], capture_output=True, text=True, timeout=60)
    assert older.returncode == 2 and "serves Python" in older.stderr and "OLDEST_PYTHON=" in older.stderr


def test_a_manifest_naming_files_outside_the_kit_or_unreadable_ones_is_refused_in_one_line(tmp_path):
    """What a hostile stick could hold: a listed name that climbs out of the folder, a listed file that is a link to
    one this user cannot read, a FIFO that would block a reader. Each: one line, exit 2, no traceback, nothing
    staged."""
    kit = small_kit(tmp_path)
    good = json.loads((kit / "manifest.json").read_text())
    secret = tmp_path / "secret.whl"
    secret.write_bytes(b"x" * 10)
    secret.chmod(0)
    os.mkfifo(kit / "fifo.whl")
    (kit / "link.whl").symlink_to(secret)
    for i, (name, says) in enumerate((("../secret.whl", "outside the kit folder"), ("fifo.whl", "is missing"),
                                      ("link.whl", "cannot be copied" if os.geteuid() else "is damaged"))):
        manifest = copy.deepcopy(good)
        manifest["files"][0] = dict(manifest["files"][0], file=name, bytes=10)
        (kit / "manifest.json").write_text(json.dumps(manifest))
        dest = tmp_path / f"dest-{i}"
        dest.mkdir()
        out = subprocess.run([*SCRIPT, "stage", str(kit), str(dest)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1, (name, out.stderr)
        assert not list(dest.iterdir()), (name, list(dest.iterdir()))
    secret.chmod(0o600)


def test_collect_refuses_an_oldest_release_of_another_minor_version():
    for bad in (f"{HERE[0]}.{HERE[1] - 1}.0", f"{HERE[0]}.{HERE[1]}.{HERE[2] + 1}", "3.11"):
        out = subprocess.run([*SCRIPT, "collect", "/nonexistent/kit", "--oldest", bad], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 2 and f"OLDEST_PYTHON={bad!r}" in out.stderr, out.stderr
        assert not Path("/nonexistent/kit").exists()


def test_pip_gets_only_the_listed_checked_wheels_and_the_manifest_is_authenticated(tmp_path):
    """A stick in a folder with a space; beside the listed wheels an unlisted one, a newer b_pkg whose .pth runs at
    every start of Python (what the hostile round planted): staged, pip installs the listed b_pkg 1.0 and nothing
    runs. The manifest is checked against the published digest: another digest is refused in one line."""
    kit = tmp_path / "USB STICK" / "kit"
    kit.mkdir(parents=True)
    make_wheel(kit, "b_pkg", "1.0")
    script().write_manifest(kit, ["b_pkg-1.0-py3-none-any.whl"], None)
    make_wheel(kit, "b_pkg", "9.0", pth="import os; os.makedirs(os.environ['PLANTED'], exist_ok=True)\n")
    digest = hashlib.sha256((kit / "manifest.json").read_bytes()).hexdigest()
    bad = subprocess.run([*SCRIPT, "verify", str(kit), "--manifest-sha256", "0" * 64], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "not the published one" in bad.stderr and len(bad.stderr.splitlines()) == 1
    plain = subprocess.run([*SCRIPT, "verify", str(kit)], capture_output=True, text=True, timeout=60)
    assert "NOT authenticated" in plain.stdout
    dest = tmp_path / "staged here"
    dest.mkdir()
    staged = subprocess.run([*SCRIPT, "stage", str(kit), str(dest), "--manifest-sha256", digest], capture_output=True,
                            text=True, timeout=60)
    assert staged.returncode == 0 and "matches the published KIT_SHA256" in staged.stdout, staged.stderr
    assert "pip gets only these" in staged.stdout and len(staged.stdout.splitlines()) == 1
    assert sorted(p.name for p in dest.iterdir()) == ["b_pkg-1.0-py3-none-any.whl"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE="/dev/null", PIP_NO_INDEX="1", PIP_FIND_LINKS=dest.as_uri(),
               PLANTED=str(tmp_path / "planted"))
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                          "--disable-pip-version-check", "b_pkg"], capture_output=True, text=True, env=env, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    got = subprocess.run([str(venv / "bin" / "python"), "-c", "import b_pkg; print(b_pkg.VERSION)"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert got.stdout.strip() == "1.0" and not (tmp_path / "planted").exists()
    # the same folder given whole to pip, as set-up did before: the planted wheel wins and its .pth runs
    whole = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                            "--disable-pip-version-check", "--upgrade", "b_pkg"], capture_output=True, text=True,
                           env={**env, "PIP_FIND_LINKS": kit.as_uri()}, timeout=300)
    assert whole.returncode == 0 and "b_pkg-9.0" in whole.stdout, whole.stdout + whole.stderr
    subprocess.run([str(venv / "bin" / "python"), "-c", "pass"], env=env, timeout=60)
    assert (tmp_path / "planted").exists()


def test_set_up_reads_a_kit_on_a_stick_mounted_at_a_path_with_a_space(tmp_path):
    """Set-up from a kit at a path with a space gets as far as pip (the small kit has no torch, so pip says so):
    the path reached pip whole (PIP_FIND_LINKS is split at spaces, so set-up gives pip a file: URL)."""
    kit = small_kit(tmp_path, folder="USB STICK/kit")
    out = setup_with(kit, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 listed files match it" in out.stdout and "torch" in out.stderr
    assert "no matching distribution" in out.stderr.lower() or "could not find a version" in out.stderr.lower()
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)


def test_make_lab_from_a_checkout_at_a_path_with_a_space(tmp_path):
    """`make lab`'s own command line in a checkout under "my work/" (set-up and JupyterLab stand-ins that print
    what they got): JUPYTER_PATH and the arguments arrive whole."""
    ck = tmp_path / "my work" / "explainer"
    (ck / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", ck / "Makefile")
    (ck / "scripts" / "setup.sh").write_text("#!/bin/sh\necho \"setup $* WHEELHOUSE=$WHEELHOUSE\"\n")
    (ck / ".venv" / "bin").mkdir(parents=True)
    (ck / ".venv" / "bin" / "jupyter").write_text('#!/bin/sh\necho "JUPYTER_PATH=$JUPYTER_PATH"; echo "args: $*"\n')
    for f in (ck / "scripts" / "setup.sh", ck / ".venv" / "bin" / "jupyter"):
        f.chmod(0o755)
    stick = tmp_path / "USB STICK" / "kit"
    out = subprocess.run(["make", "lab", f"WHEELHOUSE={stick}"], cwd=ck, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"setup lab WHEELHOUSE={stick}" in out.stdout
    assert f"JUPYTER_PATH={ck}/.venv-vllm/jupyter-kernel/share/jupyter" in out.stdout, out.stdout
    assert "args: lab --ServerApp.ip=127.0.0.1" in out.stdout

def test_the_offline_set_up_sees_no_pip_configuration_or_index(tmp_path):
    """WHEELHOUSE makes pip ignore this machine's pip sources (here PIP_FIND_LINKS and /etc/xdg/pip point at
    local wheel folders): a kit without torch cannot be completed from them."""
    kit = small_kit(tmp_path)
    out = setup_with(kit, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "torch" in out.stderr and ("no matching distribution" in out.stderr.lower()
                                      or "could not find a version" in out.stderr.lower()), out.stderr
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)
