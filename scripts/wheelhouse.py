"""The room kit: every wheel `make lab` installs, in one folder, so a room with no network can set up.

    python3 scripts/wheelhouse.py collect DIR [--oldest 3.11.2]   (make wheelhouse [WHEELHOUSE=DIR] [OLDEST_PYTHON=..];
                                                                   online, once, by the instructor)
    python3 scripts/wheelhouse.py verify DIR [--manifest-sha256 HEX]
    python3 scripts/wheelhouse.py stage DIR DEST [--manifest-sha256 HEX]   (scripts/setup.sh, before installing)

collect: builds this package's wheel, then pip resolves what `make lab` installs (torch==2.13.0, the CPU build, this
package with its `notebooks,hf` extras, and setuptools, which builds the editable install) as wheels for this
platform and for the OLDEST patch release of this Python the room has (default X.Y.0, every patch release of this
minor version; Debian 12's /usr/bin/python3 is 3.11.2): pip reads each project's Requires-Python as that release
would, so the kit installs on every release from it to this one (checked again, wheel by wheel, before the kit is
written). It adds the checkout's committed files as a source archive (for a laptop with no clone), writes
`manifest.json` (every file's project, version, size, sha256, wheel tags and Requires-Python; the Pythons and
platform it covers) and a `README.txt`, and prints the manifest's sha256 for the instructor to publish with the
stick (KIT_SHA256). A folder whose manifest already matches this checkout's pyproject.toml, this Python, the
oldest release and this platform, and whose files verify, is kept as it is.

verify: the manifest's sha256 is the published one (when given), the kit covers this interpreter (implementation,
minor version, patch release not older than the kit's oldest, platform, glibc), every wheel's Requires-Python
admits this interpreter, and every file it names is there with its size and sha256; otherwise one line naming
what is wrong, exit 2. stage: the same checks, on private copies: every wheel the manifest lists is copied into
DEST (a folder of the caller's, e.g. `mktemp -d`) and its sha256 and Requires-Python checked there, so pip, given
DEST, sees exactly the listed, checked files (nothing else on the stick, and nothing changed after the check).

Standard library and pip only (the Python running it needs pip for `collect`; `verify` and `stage` need none).
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
EXTRAS = "notebooks,hf"                 # scripts/setup.sh lab
HUB_EXTRAS = "hub"                      # make hub (scripts/setup-hub.sh) installs these too, from the same kit
PROXY = "configurable-http-proxy@5.3.0"  # the hub's proxy (npm): its installed tree, one tarball
PROXY_KIT = "configurable-http-proxy-5.3.0-node_modules.tgz"
BUILD = ["setuptools>=61"]              # pyproject.toml's build-system: builds the editable install offline
MANIFEST = "manifest.json"
FORMAT = 2                              # 2: the oldest patch release, each wheel's Requires-Python
MAX_MANIFEST = 16 << 20                 # a kit's manifest is a few hundred KB


class KitError(Exception):
    """What is wrong with a wheelhouse or its collection, in one line."""


def target(oldest: tuple[int, int, int] | None = None) -> dict:
    """The Pythons and platform a wheelhouse collected here serves: this minor version from ``oldest`` (default X.Y.0)."""
    oldest = oldest or (*sys.version_info[:2], 0)
    return {"implementation": sys.implementation.name, "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "oldest": release_text(oldest), "platform": sysconfig.get_platform(), "system": platform.system(),
            "machine": platform.machine()}


def release_text(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


def this_release() -> tuple[int, int, int]:
    return tuple(sys.version_info[:3])


def parse_oldest(text: str) -> tuple[int, int, int]:
    """``--oldest``: a patch release of this interpreter's minor version, not newer than it."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text.strip())
    here = this_release()
    if not m or tuple(map(int, m.groups()))[:2] != here[:2] or tuple(map(int, m.groups())) > here:
        raise KitError(f"OLDEST_PYTHON={text!r}: give a release of Python {here[0]}.{here[1]} from "
                       f"{here[0]}.{here[1]}.0 to {release_text(here)} (e.g. Debian 12's 3.11.2); a kit serves one "
                       "minor version: for another, collect with that Python (make wheelhouse PYTHON=python3.X)")
    return tuple(map(int, m.groups()))


# Requires-Python (PEP 440 specifiers) for a final release, with the standard library only: verify runs on a
# learner's python3, which may have no pip. Pre-/post-release suffixes on a bound are read as the release itself.
SPECIFIER = re.compile(r"\s*(~=|==|!=|<=|>=|<|>)\s*v?(\d+(?:\.\d+)*)(\.\*)?((?:a|b|rc|\.?post|\.?dev)\d*)?\s*")


def admits(requires_python: str | None, release: tuple[int, ...]) -> bool:
    """Whether ``requires_python`` (e.g. ">=3.11.5", "!=3.14.1,>=3.11") admits the final release ``release``."""
    for clause in (requires_python or "").split(","):
        if not clause.strip():
            continue
        m = SPECIFIER.fullmatch(clause)
        if not m or (m.group(3) and m.group(1) not in ("==", "!=")) or (m.group(1) == "~=" and "." not in m.group(2)):
            raise KitError(f"cannot read Requires-Python {requires_python!r}")
        op, bound = m.group(1), tuple(int(x) for x in m.group(2).split("."))
        if m.group(3):                                          # ==3.11.* / !=3.0.*: a prefix
            ok = (release + (0,) * len(bound))[:len(bound)] == bound
            ok = ok if op == "==" else not ok
        else:
            n = max(len(bound), len(release))
            a, b = release + (0,) * (n - len(release)), bound + (0,) * (n - len(bound))
            ok = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
                  "~=": a >= b and a[:len(bound) - 1] == b[:len(bound) - 1]}[op]
        if not ok:
            return False
    return True


def requires_python(wheel: Path) -> str | None:
    """A wheel's Requires-Python, read from its METADATA (None when it states none)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            meta = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(meta) != 1:
                raise KitError(f"{wheel} is not a wheel (no single .dist-info/METADATA)")
            text = z.read(meta[0]).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise KitError(f"{wheel} cannot be read as a wheel: {exc}") from None
    value = email.parser.HeaderParser().parsestr(text).get("Requires-Python")
    return value.strip() if value else None


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


def project_of(name: str) -> str:
    """A wheel's or a source archive's project (normalized), from its file name."""
    stem = name.split("-")[0] if name.endswith(".whl") else name.rsplit("-", 1)[0]
    return stem.lower().replace("_", "-").replace(".", "-")


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


def up_to_date(out: Path, oldest: tuple[int, int, int] | None) -> bool:
    try:
        manifest = verify(out)
    except (OSError, ValueError, KitError):
        return False
    return manifest.get("requirements_key") == requirements_key() and manifest.get("target") == target(oldest)


def publish_lines(out: Path) -> None:
    digest = hashlib.sha256((out / MANIFEST).read_bytes()).hexdigest()
    print(f"wheelhouse: publish with the stick (on the board, not on the stick): KIT_SHA256={digest}")
    print(f'wheelhouse: each laptop: make lab WHEELHOUSE="{out}" KIT_SHA256={digest}')


def collect(out: Path, oldest: tuple[int, int, int] | None = None) -> dict:
    out = out.resolve()
    if up_to_date(out, oldest):
        manifest = json.loads((out / MANIFEST).read_text())
        print(f"wheelhouse: {out} is up to date ({len(manifest['files'])} files, "
              f"{manifest['total_bytes'] / 1e6:.0f} MB); nothing downloaded")
        publish_lines(out)
        return manifest
    want = target(oldest)
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
        run([*pip, "wheel", "--no-deps", "-w", str(dl), str(CHECKOUT)], "built this package's wheel", log)
        own = next(dl.glob("explainer-*.whl"))
        # wheels only: pip checks Requires-Python for --python-version only where it builds nothing
        run([*pip, "download", "--progress-bar", "off", "--only-binary=:all:", "--python-version", want["oldest"],
             "-d", str(dl), TORCH, f"{own}[{EXTRAS}]", *BUILD],
            f"resolved and downloaded what make lab installs, as wheels for Python {want['oldest']} and newer", log)
        lab = {project_of(p.name) for p in dl.iterdir()}
        run([*pip, "download", "--progress-bar", "off", "--only-binary=:all:", "--python-version", want["oldest"],
             "-d", str(dl), TORCH, f"{own}[{EXTRAS},{HUB_EXTRAS}]"], "and what make hub adds", log)
        names = sorted(wheel.name for wheel in dl.iterdir())
        first, last = parse_oldest(want["oldest"]), this_release()
        for name in names:
            rp = requires_python(dl / name)
            refused = [r for r in range(first[2], last[2] + 1) if not admits(rp, (*first[:2], r))]
            if refused:
                raise KitError(f"{name} needs Python {rp}: it does not install on "
                               f"{release_text((*first[:2], refused[0]))}, which this kit would claim")
        for old in previous_files(out):            # a fresh collection replaces the old one (its files only)
            (out / old).unlink(missing_ok=True)
        hub_proxy(dl, work, log)
        names = sorted(wheel.name for wheel in dl.iterdir())
        hub_only = {name for name in names if project_of(name) not in lab | {"explainer"}}
        for name in names:
            shutil.move(str(dl / name), out / name)
    src = source_archive(out, log=Path(os.devnull))
    manifest = write_manifest(out, names, src, want, hub_only)
    print(f"wheelhouse: {out}: {len(manifest['files'])} files, {manifest['total_bytes'] / 1e6:.0f} MB, for "
          f"{describe(manifest['target'])}, in {time.monotonic() - t0:.0f} s")
    publish_lines(out)
    return manifest


def hub_proxy(dl: Path, work: Path, log: Path) -> None:
    """The hub's proxy for `make hub WHEELHOUSE=DIR`: npm installs it once here, its tree goes in as one tarball
    (pure JavaScript: any machine with node runs it). Without npm the kit has none, and says so."""
    if shutil.which("npm") is None:
        print(f"wheelhouse: no npm here: the kit holds no {PROXY} (make hub from it will ask for the network)")
        return
    run(["npm", "install", "--prefix", str(work / "proxy"), "--no-fund", "--no-audit", "--loglevel=error", PROXY],
        f"npm installed {PROXY} (the hub's proxy)", log)
    run(["tar", "czf", str(dl / PROXY_KIT), "-C", str(work / "proxy"), "node_modules"], f"packed it as {PROXY_KIT}",
        log)


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


def covers(files: list[dict], here: dict) -> str:
    """Who can install from the kit: the target Pythons, their platform, and the newest glibc a wheel needs."""
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
    pythons = f"{t['oldest']} to {t['python']}.x" if t.get("oldest") else t["python"]
    return f"{t['implementation']} {pythons} on {t['system']} {t['machine']} ({t['platform']})"


def write_manifest(out: Path, wheels: list[str], src: str | None, here: dict | None = None,
                   hub_only: set[str] = frozenset()) -> dict:
    here = here or target()
    files = []
    for path in [out / name for name in wheels + ([src] if src else [])]:
        entry = {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256(path)}
        if path.name in hub_only:
            entry["for"] = "hub"                 # make hub only: make lab never installs it
        if path.suffix == ".whl":
            entry.update(project=path.name.split("-")[0].lower().replace("_", "-"), version=path.name.split("-")[1],
                         requires_python=requires_python(path), **wheel_tags(path.name))
        files.append(entry)
    lab_files = [f for f in files if f.get("for") != "hub"]          # what a learner's laptop installs
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "requirements_key": requirements_key(), "target": here,
                "covers": covers(lab_files, here), "needs_glibc": needs_glibc(lab_files),
                "installs": f"{TORCH} -e .[{EXTRAS}] (make lab), built with {', '.join(BUILD)}; make hub: .[{HUB_EXTRAS}] "
                            f"and {PROXY} too",
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
            "manifest.json lists every file with its sha256 and Requires-Python; set-up checks them, and that this "
            "Python is one the kit covers, before it installs anything, and gives pip only the files it lists.\n"
            "The manifest itself is checked against KIT_SHA256, the digest the instructor publishes apart from the "
            "stick (on the board, in the room's chat): make lab WHEELHOUSE=... KIT_SHA256=...\n")


def setup_command(t: dict) -> str:
    if t.get("system") == "Windows":             # PowerShell: no make
        return (f"py -{t['python']} -m venv .venv; .venv\\Scripts\\python -m pip install --no-index --find-links "
                f"D:\\path\\to\\this\\folder {TORCH} -e \".[{EXTRAS}]\"")
    return "make lab WHEELHOUSE=/path/to/this/folder      (make setup-lab WHEELHOUSE=... sets up without opening it)"


def read_manifest(folder: Path, manifest_sha256: str | None) -> tuple[dict, str]:
    """The manifest, checked against the published digest when one is given, and a line saying what was checked."""
    try:
        if (folder / MANIFEST).stat().st_size > MAX_MANIFEST:
            raise KitError(f"{folder / MANIFEST} is over {MAX_MANIFEST >> 20} MiB: not a kit's manifest")
        raw = (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise KitError(f"{folder} has no {MANIFEST}: not a wheelhouse (make one with: make wheelhouse "
                       f"WHEELHOUSE={folder})") from None
    except OSError as exc:
        raise KitError(f"{folder / MANIFEST} cannot be read: {exc}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if manifest_sha256:
        if digest != manifest_sha256.strip().lower():
            raise KitError(f"{folder / MANIFEST} is not the published one (its sha256 is {digest[:16]}..., KIT_SHA256 "
                           f"says {manifest_sha256.strip()[:16]}...): the stick was changed, or this is another kit; "
                           "get the kit and its KIT_SHA256 again from the instructor")
        checked = f"{MANIFEST} matches the published KIT_SHA256"
    else:
        checked = f"{MANIFEST} NOT authenticated (no KIT_SHA256 given: the files match the manifest on the stick)"
    try:
        manifest = json.loads(raw)
        files = manifest["files"]
        names = [f["file"] for f in files]
    except (ValueError, KeyError, TypeError) as exc:
        raise KitError(f"{folder / MANIFEST} cannot be read: {exc!r}") from None
    if manifest.get("format") != FORMAT:
        raise KitError(f"{folder / MANIFEST} is format {manifest.get('format')!r}, this checkout reads {FORMAT}: "
                       "collect the kit again with this checkout (make wheelhouse)")
    bad = [n for n in names if not isinstance(n, str) or os.path.basename(n) != n or n.startswith(".") or "\\" in n]
    if bad:
        raise KitError(f"{folder / MANIFEST} names a file outside the kit folder ({bad[0]!r}): not a kit to use")
    return manifest, checked


def check_interpreter(folder: Path, manifest: dict) -> None:
    """The kit covers this interpreter: implementation, minor version, patch release, platform, glibc, and each
    wheel's Requires-Python as the manifest records it (the wheels themselves are read again by ``stage``)."""
    here, made = target(), manifest.get("target", {})
    same = ("implementation", "python", "system", "machine")
    release = this_release()
    if {k: here[k] for k in same} != {k: made.get(k) for k in same}:
        raise KitError(f"{folder} was collected for {describe(made) if made else '?'}; this is "
                       f"{describe({**here, 'oldest': release_text(release)})}: set up online (make lab), or use a kit "
                       "collected on a machine like this one")
    oldest = tuple(int(x) for x in str(made.get("oldest", "")).split(".") if x.isdigit())
    if len(oldest) != 3 or release < oldest:
        raise KitError(f"{folder} serves Python {made.get('oldest')} to {made.get('python')}.x; this is "
                       f"{release_text(release)}: ask for a kit collected for it (make wheelhouse "
                       f"OLDEST_PYTHON={release_text(release)}), or set up online (make lab)")
    for f in manifest["files"]:
        if f["file"].endswith(".whl") and not admits(f.get("requires_python"), release):
            raise KitError(f"{folder} holds {f['file']}, which needs Python {f['requires_python']}; this is "
                           f"{release_text(release)}: ask for a kit collected for it (make wheelhouse "
                           f"OLDEST_PYTHON={release_text(release)}), or set up online (make lab)")
    libc, version = platform.libc_ver()
    needed = manifest.get("needs_glibc")
    if needed and libc == "glibc" and tuple(map(int, version.split(".")[:2])) < tuple(map(int, needed.split("."))):
        raise KitError(f"{folder} holds wheels that need glibc {needed} or newer; this machine has {version}: "
                       "set up online (make lab)")


def copy_checked(src: Path, dest: Path | None, entry: dict) -> None:
    """``src`` is the file ``entry`` lists (size, sha256); with ``dest``, checked while it is copied there."""
    damaged = KitError(f"{src} is damaged (size or sha256 differs from the manifest): copy it again")
    h, size, made = hashlib.sha256(), 0, False
    try:
        if not src.is_file():                   # a FIFO or a device is no kit file either
            raise KitError(f"{src} is missing (the manifest lists it): copy the whole folder again")
        if src.stat().st_size != entry["bytes"]:
            raise damaged
        with open(src, "rb") as f, (open(dest, "xb") if dest else open(os.devnull, "wb")) as out:
            made = dest is not None
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
                size += len(block)
                out.write(block)
        if size != entry["bytes"] or h.hexdigest() != entry["sha256"]:
            raise damaged
    except (OSError, KitError) as exc:          # unreadable (another user's, a dangling link), DEST not writable
        if made:                                # a copy that failed its check is not left where pip looks
            dest.unlink(missing_ok=True)
        if isinstance(exc, KitError):
            raise
        raise KitError(f"{src} cannot be copied: {exc.strerror or exc}: copy the kit again") from None


def check_wheel(path: Path, listed_as: Path) -> None:
    """The wheel's own Requires-Python admits this interpreter (read from the checked file)."""
    rp = requires_python(path)
    if not admits(rp, this_release()):
        raise KitError(f"{listed_as} needs Python {rp}; this is {release_text(this_release())}: ask for a kit "
                       f"collected for it (make wheelhouse OLDEST_PYTHON={release_text(this_release())}), or set up "
                       "online (make lab)")


def verify(folder: Path, manifest_sha256: str | None = None, dest: Path | None = None) -> dict:
    """The manifest, after checking it, the interpreter it serves and every file it names (KitError otherwise).

    With ``dest``: every wheel is copied there and checked as copied (``stage``); the source archive stays behind.
    The manifest gets a ``checked`` line: what was checked, in words.
    """
    manifest, checked = read_manifest(folder, manifest_sha256)
    check_interpreter(folder, manifest)
    for f in manifest["files"]:
        wheel = f["file"].endswith(".whl")
        if dest is not None and not wheel:
            continue
        copy = dest / f["file"] if dest is not None else None
        copy_checked(folder / f["file"], copy, f)
        if wheel:
            check_wheel(copy or folder / f["file"], folder / f["file"])
    n = sum(f["file"].endswith(".whl") for f in manifest["files"]) if dest is not None else len(manifest["files"])
    manifest["checked"] = (f"{checked}; {n} listed files match it (sha256), every wheel admits Python "
                           f"{release_text(this_release())}" + ("; pip gets only these, copied where they were "
                                                                "checked" if dest is not None else ""))
    return manifest


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="scripts/wheelhouse.py", description="The room kit (make wheelhouse).")
    ap.add_argument("command", choices=("collect", "verify", "stage"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("dest", type=Path, nargs="?", help="stage: the (empty, private) folder pip is given")
    ap.add_argument("--oldest", help="collect: the oldest patch release of this Python the room has, e.g. 3.11.2")
    ap.add_argument("--manifest-sha256", help="verify, stage: the KIT_SHA256 the instructor published")
    args = ap.parse_args(argv)
    try:
        if (args.dest is not None) != (args.command == "stage"):
            raise KitError("usage: wheelhouse.py collect DIR [--oldest X.Y.Z] | verify DIR | stage DIR DEST")
        if args.command == "collect":
            collect(args.folder, parse_oldest(args.oldest) if args.oldest else None)
        else:
            if args.dest is not None and (not args.dest.is_dir() or any(args.dest.iterdir())):
                raise KitError(f"{args.dest} is not an empty folder")
            m = verify(args.folder, args.manifest_sha256, args.dest)
            print(f"wheelhouse: {args.folder}: for {describe(m['target'])}: {m['checked']}")
    except KitError as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wheelhouse: interrupted; run it again to finish", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
