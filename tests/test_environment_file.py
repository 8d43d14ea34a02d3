"""environment.yml (conda, Binder) installs the same pip set as `make lab` (scripts/setup.sh lab)."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_environment_yml_pip_set_is_make_labs():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    setup = (REPO / "scripts" / "setup.sh").read_text()
    lab_extras = re.search(r'else extras="([^"]+)"', setup).group(1)
    editable = next(p for p in pip if p.startswith("-e "))
    assert set(re.search(r"\[(.*)\]", editable).group(1).split(",")) == set(lab_extras.split(","))
    assert "torch==2.13.0" in pip
    assert any("download.pytorch.org/whl/cpu" in p for p in pip)
