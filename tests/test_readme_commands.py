"""Every command in the README's "Command line" section, pasted as written into a plain shell at the
repository root after set-up, exits 0.

The shell gets a bare PATH (no venv on it, no VIRTUAL_ENV): whatever the README's block does to reach the
venv (its `source .venv/bin/activate` line) is what makes the commands work, as for a reader.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def readme_block() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line]


def _setup_lines(lines):
    return [line for line in lines if line.startswith(("source ", ". ", "cd "))]


def _commands(lines):
    return [line for line in lines if line not in _setup_lines(lines)]


LINES = readme_block()


def test_the_block_reaches_the_venv_and_has_commands():
    assert any(".venv" in line for line in _setup_lines(LINES)), "the block must say how to reach the venv"
    assert len(_commands(LINES)) >= 5


@pytest.mark.parametrize("command", _commands(LINES))
def test_readme_command_exits_0(command):
    if not (REPO / ".venv" / "bin" / "activate").exists():
        pytest.skip("no .venv: run make lab or make test first")
    script = "\n".join(["set -e", *_setup_lines(LINES), command])
    env = {"PATH": BARE_PATH, "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    out = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{command!r} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
