"""This user's own folder for grading sessions, and reading a small file there without trusting it.

A shared ``/tmp`` holds whatever other users put there, so the grader keeps its sessions' folders (each check's
work folder, a not-isolated learner's folder) in a folder only this user can enter: ``root()`` is
``$XDG_RUNTIME_DIR/explainer`` (a login's private runtime folder, where there is one), else
``<tmp>/explainer-<uid>``, else ``$XDG_CACHE_HOME/explainer/run`` (``~/.cache``). Each is taken only if it is a
real folder (not a symlink), owned by this user, with no permission for anyone else; one made by another user
first is passed over (a planted folder can neither stop this user's checks nor receive them).

``read_small`` opens one file of such a folder the way nothing planted can abuse: without following a symlink,
without waiting on a FIFO, only a regular file of this user's, at most ``limit`` bytes. ``create`` makes a
new file exclusively (never through a link, never an existing one).
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile

from explainer.errors import UsageError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def private(path: str, make: bool = True) -> bool:
    """``path`` is (made if missing) a real folder of this user's that nobody else may enter or list."""
    try:
        if make:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077
    finally:
        os.close(fd)


def candidates() -> list[str]:
    uid = os.geteuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    found = [os.path.join(runtime, "explainer")] if runtime and private(runtime, make=False) else []
    return found + [os.path.join(tempfile.gettempdir(), f"explainer-{uid}"), os.path.join(cache, "explainer", "run")]


@functools.lru_cache(maxsize=1)
def root() -> str:
    """This user's private folder for grading sessions (made 0700 when missing; see the module's text)."""
    tried = candidates()
    for path in tried:
        if private(path):
            return path
    raise UsageError(f"no private folder for the grader: {', '.join(tried)} are another user's, not folders, or "
                     f"cannot be made; remove the one in {tempfile.gettempdir()} or set XDG_RUNTIME_DIR")


def read_small(path: str, limit: int = 1 << 16, dir_fd: int | None = None) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of this user's (no symlink followed, no FIFO waited on,
    at most ``limit`` bytes); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        data = os.read(fd, limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def create(path: str, mode: int = 0o600) -> int:
    """A new file at ``path``, opened for writing; ``FileExistsError`` if anything (a link too) is there."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode)
