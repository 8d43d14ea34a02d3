"""This user's room settings file, outside any repository: ``$XDG_CONFIG_HOME/explainer/room.json`` (default
``~/.config``), a 0600 file in a 0700 folder, since it holds the room's token, the seat keys and, for the
instructor, the board's instructor key. ``client`` reads and updates it; nothing else writes it.

The standard library only. A write replaces the file whole under a lock on its folder (POSIX ``flock``; on
Windows the last writer wins), through a temporary file made exclusively (``mkstemp``: never through a link).
"""

from __future__ import annotations

import json
import os
import tempfile

try:                                                      # POSIX; on Windows the last writer of the file wins
    import fcntl
except ImportError:                                       # pragma: no cover
    fcntl = None

__all__ = ["settings_path", "load_settings", "save"]


def settings_path() -> str:
    """This user's room settings: ``$XDG_CONFIG_HOME/explainer/room.json`` (default ``~/.config``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "explainer", "room.json")


def load_settings() -> dict:
    """The settings file as a dict ({} when there is none or it is not ours to read)."""
    try:
        with open(settings_path(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(update) -> dict:
    """Read, ``update(settings)``, write back whole (0600 in a 0700 folder), under a lock on the folder."""
    path = settings_path()
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    lock = os.open(folder, os.O_RDONLY)
    try:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        data = load_settings()
        update(data)
        fd, tmp = tempfile.mkstemp(prefix="room.", suffix=".tmp", dir=folder)     # 0600, never through a link
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        os.close(lock)
    return data
