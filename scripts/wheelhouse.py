"""The room kit: every wheel `make lab` installs, in one folder, so a room with no network can set up.

    python3 scripts/wheelhouse.py collect DIR     (make wheelhouse [WHEELHOUSE=DIR]; online, once, by the instructor)
    python3 scripts/wheelhouse.py verify DIR      (scripts/setup.sh runs it before installing from DIR)

collect: pip resolves what `make lab` installs (torch==2.13.0, the CPU build, and this package with its
`notebooks,hf` extras) for this Python on this platform, plus setuptools, which builds the editable install;
downloads each wheel (a project with no wheel is built into one), builds this package's own wheel, adds the
checkout's committed files as a source archive (for a laptop with no clone), and writes `manifest.json` (every
file's project, version, size, sha256 and wheel tags; the Python and platform the folder covers) and a
`README.txt` saying how to use it. A folder whose manifest already matches this checkout's pyproject.toml, this
Python and this platform, and whose files verify, is kept as it is.

verify: every file the manifest names is there with its size and sha256, and the folder was collected for this
interpreter's Python and platform; otherwise one line naming what is wrong, exit 2.

Standard library and pip only (the Python running it needs pip for `collect`; `verify` needs none).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
EXTRAS = "notebooks,hf"                 # scripts/setup.sh lab
BUILD = ["setuptools>=61"]              # pyproject.toml's build-system: builds the editable install offline
MANIFEST = "manifest.json"
FORMAT = 1


class KitError(Exception):
    """What is wrong with a wheelhouse or its collection, in one line."""


def target() -> dict:
    """The Python and platform a wheelhouse collected here serves."""
    return {"implementation": sys.implementation.name, "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "platform": sysconfig.get_platform(), "system": platform.system(), "machine": platform.machine()}


def requirements_key() -> str:
    """Changes when what `make lab` installs can change (the project's dependencies, this script)."""
    h = hashlib.sha256()
    for path in (CHECKOUT / "pyproject.toml", Path(__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_tags(name: str) -> dict:
    """A wheel file name's parts (PEP 427): name-version[-build]-python-abi-platform.whl."""
    parts = name[:-len(".whl")].split("-")
    return {"python": parts[-3], "abi": parts[-2], "platform": parts[-1]}


def run(cmd: list[str], what: str, log: Path) -> None:
    t0 = time.monotonic()
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise KitError(f"{what} failed (exit {proc.returncode}); the last lines of {log}:\n  " + "\n  ".join(tail))
    print(f"wheelhouse: {what} ({time.monotonic() - t0:.0f} s)", flush=True)


def torch_build(pip: list[str], work: Path, log: Path) -> dict:
    """Which torch 2.13.0 pip would take here, asked without downloading it: {version, url, requires}."""
    report = work / "torch.json"
    run([*pip, "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--report", str(report), TORCH],
        "asked pip which torch it would take", log)
    item = json.loads(report.read_text())["install"][0]
    return {"version": item["metadata"]["version"], "url": item["download_info"]["url"],
            "requires": item["metadata"].get("requires_dist") or []}


def refuse_cuda_torch(torch: dict) -> None:
    if any(r.startswith("nvidia-") for r in torch["requires"]) and not os.environ.get("EXPLAINER_ALLOW_CUDA_TORCH"):
        raise KitError(f"pip would take torch {torch['version']} WITH CUDA ({torch['url']}): several GB that the "
                       "notebooks never use. Point pip at the CPU build and re-run: PIP_EXTRA_INDEX_URL="
                       "https://download.pytorch.org/whl/cpu make wheelhouse (or PIP_FIND_LINKS=/folder/with/the/wheel;"
                       " EXPLAINER_ALLOW_CUDA_TORCH=1 keeps the CUDA build)")


def source_archive(out: Path, log: Path) -> str | None:
    """The checkout's committed files as one archive (None where this is not a git checkout)."""
    if shutil.which("git") is None or not (CHECKOUT / ".git").exists():
        return None
    commit = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    name = f"explainer-src-{commit}.tar.gz"
    run(["git", "-C", str(CHECKOUT), "archive", "--format=tar.gz", "--prefix=explainer/", "-o", str(out / name),
         "HEAD"], f"source archive of commit {commit} ({name})", log)
    return name


def up_to_date(out: Path) -> bool:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        verify(out)
    except (OSError, ValueError, KitError):
        return False
    return manifest.get("requirements_key") == requirements_key() and manifest.get("target") == target()


def collect(out: Path) -> dict:
    out = out.resolve()
    if up_to_date(out):
        manifest = json.loads((out / MANIFEST).read_text())
        print(f"wheelhouse: {out} is up to date ({len(manifest['files'])} files, "
              f"{manifest['total_bytes'] / 1e6:.0f} MB); nothing downloaded")
        return manifest
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="explainer-wheelhouse-") as tmp:
        work, log = Path(tmp), Path(tmp) / "pip.log"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        if subprocess.run([*pip, "--version"], capture_output=True).returncode != 0:
            run([sys.executable, "-m", "venv", str(work / "venv")], "a scratch venv for pip", log)
            pip = [str(work / "venv" / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        refuse_cuda_torch(torch_build(pip, work, log))
        dl = work / "dl"
        run([*pip, "download", "--progress-bar", "off", "-d", str(dl), TORCH, f"{CHECKOUT}[{EXTRAS}]", *BUILD],
            "resolved and downloaded what make lab installs", log)
        for sdist in [p for p in dl.iterdir() if not p.name.endswith(".whl")]:
            run([*pip, "wheel", "--no-deps", "-w", str(dl), str(sdist)], f"built a wheel from {sdist.name}", log)
            sdist.unlink()
        run([*pip, "wheel", "--no-deps", "-w", str(dl), str(CHECKOUT)], "built this package's wheel", log)
        for old in previous_files(out):            # a fresh collection replaces the old one (its files only)
            (out / old).unlink(missing_ok=True)
        names = sorted(wheel.name for wheel in dl.iterdir())
        for name in names:
            shutil.move(str(dl / name), out / name)
    src = source_archive(out, log=Path(os.devnull))
    manifest = write_manifest(out, names, src)
    print(f"wheelhouse: {out}: {len(manifest['files'])} files, {manifest['total_bytes'] / 1e6:.0f} MB, for "
          f"{describe(manifest['target'])}, in {time.monotonic() - t0:.0f} s")
    print(f"wheelhouse: use it with: make lab WHEELHOUSE={out}   (or make setup-lab WHEELHOUSE={out})")
    return manifest


def previous_files(out: Path) -> list[str]:
    """The files an earlier collection's manifest names (nothing else in the folder is touched)."""
    try:
        return [f["file"] for f in json.loads((out / MANIFEST).read_text())["files"] if "/" not in f["file"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def glibc_needed(platform_tag: str) -> tuple[int, int] | None:
    """The oldest glibc a manylinux wheel runs on (any one of its compressed tags will do), else None."""
    found = []
    for tag in platform_tag.split("."):
        arch_free = tag.rsplit("_", 2)
        if tag.startswith("manylinux_") and len(arch_free) == 3:
            found.append((int(tag.split("_")[1]), int(tag.split("_")[2])))
        elif tag.split("_")[0] in LEGACY_GLIBC:
            found.append(LEGACY_GLIBC[tag.split("_")[0]])
    return min(found) if found else None


def covers(files: list[dict]) -> str:
    """Who can install from the kit: the target Python, its platform, and the newest glibc a wheel needs."""
    here = target()
    binary = [f for f in files if f.get("platform") not in (None, "any")]
    glibc = max((g for g in (glibc_needed(f["platform"]) for f in binary) if g), default=None)
    needs = next((f["project"] for f in binary if glibc_needed(f["platform"]) == glibc), "")
    libc = f" with glibc {glibc[0]}.{glibc[1]} or newer ({needs} needs it)" if glibc else ""
    return (f"{describe(here)}{libc}: {len(binary)} wheels are built for this Python and platform, "
            f"{len(files) - len(binary)} are pure Python or source")


def needs_glibc(files: list[dict]) -> str | None:
    glibc = max((g for g in (glibc_needed(f.get("platform", "any")) for f in files) if g), default=None)
    return f"{glibc[0]}.{glibc[1]}" if glibc else None


def describe(t: dict) -> str:
    return f"{t['implementation']} {t['python']} on {t['system']} {t['machine']} ({t['platform']})"


def write_manifest(out: Path, wheels: list[str], src: str | None) -> dict:
    files = []
    for path in [out / name for name in wheels + ([src] if src else [])]:
        entry = {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256(path)}
        if path.suffix == ".whl":
            entry.update(project=path.name.split("-")[0].lower().replace("_", "-"), version=path.name.split("-")[1],
                         **wheel_tags(path.name))
        files.append(entry)
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "requirements_key": requirements_key(), "target": target(),
                "covers": covers(files), "needs_glibc": needs_glibc(files),
                "installs": f"{TORCH} -e .[{EXTRAS}] (make lab), built with {', '.join(BUILD)}",
                "source_archive": src, "total_bytes": sum(f["bytes"] for f in files), "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "README.txt").write_text(readme(out, manifest))
    return manifest


def readme(out: Path, m: dict) -> str:
    src = (f"No clone of the project? Unpack {m['source_archive']} (tar xzf) and run the command from the folder "
           "it makes.\n\n" if m["source_archive"] else "")
    return (f"explainer room kit: every wheel `make lab` installs ({len(m['files'])} files, "
            f"{m['total_bytes'] / 1e6:.0f} MB), collected {m['created']}.\n\n"
            f"Covers {m['covers']}.\nA laptop with another Python or platform needs its own kit "
            "(run `make wheelhouse` on such a machine) or the network.\n\n"
            "Set up with no network, from the project's folder (this folder can be anywhere, e.g. a USB stick):\n"
            f"    {setup_command(m['target'])}\n\n"
            f"{src}"
            "Not in the kit: Graphviz's `dot` and bubblewrap (system packages; install them beforehand, "
            "`python3 -m explainer doctor` checks them) and the optional real-vLLM environment (`make vllm`).\n"
            "manifest.json lists every file with its sha256; set-up checks them before it installs anything.\n")


def setup_command(t: dict) -> str:
    if t.get("system") == "Windows":             # PowerShell: no make
        return (f"py -{t['python']} -m venv .venv; .venv\\Scripts\\python -m pip install --no-index --find-links "
                f"D:\\path\\to\\this\\folder {TORCH} -e \".[{EXTRAS}]\"")
    return "make lab WHEELHOUSE=/path/to/this/folder      (make setup-lab WHEELHOUSE=... sets up without opening it)"


def verify(folder: Path) -> dict:
    """The manifest, after checking every file it names and the interpreter it serves (KitError otherwise)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise KitError(f"{folder} has no {MANIFEST}: not a wheelhouse (make one with: make wheelhouse "
                       f"WHEELHOUSE={folder})") from None
    except (OSError, ValueError) as exc:
        raise KitError(f"{folder / MANIFEST} cannot be read: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise KitError(f"{folder / MANIFEST} is format {manifest.get('format')!r}, this checkout reads {FORMAT}")
    here, made = target(), manifest.get("target", {})
    same = ("implementation", "python", "system", "machine")
    if {k: here[k] for k in same} != {k: made.get(k) for k in same}:
        raise KitError(f"{folder} was collected for {describe(made) if made else '?'}; this is {describe(here)}: "
                       "set up online (make lab), or use a kit collected on a machine like this one")
    libc, version = platform.libc_ver()
    needed = manifest.get("needs_glibc")
    if needed and libc == "glibc" and tuple(map(int, version.split(".")[:2])) < tuple(map(int, needed.split("."))):
        raise KitError(f"{folder} holds wheels that need glibc {needed} or newer; this machine has {version}: "
                       "set up online (make lab)")
    for f in manifest["files"]:
        path = folder / f["file"]
        if not path.is_file():
            raise KitError(f"{path} is missing (the manifest lists it): copy the whole folder again")
        if path.stat().st_size != f["bytes"] or sha256(path) != f["sha256"]:
            raise KitError(f"{path} is damaged (size or sha256 differs from the manifest): copy it again")
    return manifest


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("collect", "verify"):
        print("usage: python3 scripts/wheelhouse.py collect|verify DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1])
    try:
        if argv[0] == "collect":
            collect(folder)
        else:
            m = verify(folder)
            print(f"wheelhouse: {folder}: {len(m['files'])} files verified (sha256), for {describe(m['target'])}")
    except KitError as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wheelhouse: interrupted; run it again to finish", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
