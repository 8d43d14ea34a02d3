"""The join line learners are shown works as printed, with no venv active, where the system has no ``python``
command (Debian has only python3): the line `room serve` prints, run by a shell in a checkout whose .venv `make
lab` built (here: the test's venv, linked in as .venv when this checkout has none), with a PATH of /usr/bin and /bin
only, joins the board; so does the line the exercises notebook and the README show. A line that starts with
``python`` exits 127 there (what learners met before)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roomserver import REPO, room_server

pytestmark = pytest.mark.slow
NO_VENV_PATH = "/usr/bin:/bin"          # a fresh terminal on Debian: no venv's bin/, no pyenv shims


@pytest.fixture
def checkout(tmp_path) -> tuple[Path, dict]:
    """(the folder learners run the line in, the environment of a fresh terminal there)."""
    env = {"PATH": NO_VENV_PATH, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "LANG": "C.UTF-8"}
    if (REPO / ".venv" / "bin" / "python").exists():
        return REPO, env
    folder = tmp_path / "explainer"                 # this checkout's venv lives elsewhere: link the test's venv in
    folder.mkdir()
    (folder / ".venv").symlink_to(Path(sys.prefix))
    return folder, {**env, "PYTHONPATH": str(REPO)}


def run_as_printed(line: str, where: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", line], cwd=where, env=env, capture_output=True, text=True, timeout=120)


def test_the_join_line_room_serve_prints_works_as_printed_with_no_venv_active(tmp_path, checkout):
    where, env = checkout
    assert shutil.which("python", path=NO_VENV_PATH) is None or pytest.skip("this system has a `python` on /usr/bin")
    with room_server(tmp_path / "room.sqlite3") as board:
        printed = next(ln for ln in board.lines if ln.startswith("learners run"))
        line = printed.split(": ", 1)[1].replace("<name>", "ada")
        joined = run_as_printed(line, where, env)
        assert joined.returncode == 0 and "joined http://127.0.0.1:" in joined.stdout, (line, joined.stderr)
        assert board.api("/api/board")[1]["seats"][0]["seat"] == "ada"
        old = run_as_printed(re.sub(r"^\S+", "python", line), where, env)      # the line shown before
        assert old.returncode == 127, old
        status = run_as_printed(".venv/bin/python -m explainer room status", where, env)
        assert "seat 'ada'" in status.stdout, status.stdout + status.stderr


def test_the_exercises_notebook_and_the_readme_show_the_same_line():
    nb = json.loads((REPO / "notebooks" / "workshop" / "exercises.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for where, shown in (("exercises.ipynb", text), ("README.md", readme)):
        lines = re.findall(r"([\w./]+) -m explainer room join", shown)
        assert lines and set(lines) == {".venv/bin/python"}, f"{where}: {lines}"
