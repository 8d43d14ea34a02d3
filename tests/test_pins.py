"""The pin checker: every ``FILE:LINES TEXT`` pin the product shows is found within its lines of the installed vLLM.

With ``.venv-vllm`` (``make test`` builds it on x86_64 Linux) every pin of SOURCES.md, the docs, the notebooks and the
package's docstrings is checked and must hold. The checker is also shown to fail the way a maintainer needs: a pin
whose text moved names its file, the old range and where the text is now; a pin with no text, a loose line reference
and a missing file fail; without the vLLM environment it says "not checked" instead of passing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from explainer import vllm_env
from explainer.conformance import pins

NEEDS_VLLM = pytest.mark.skipif(vllm_env.missing_reason() is not None, reason=str(vllm_env.missing_reason()))


@NEEDS_VLLM
def test_every_pin_the_product_shows_is_within_its_lines_of_the_installed_vllm():
    result = pins.check()
    assert result["failures"] == [], "\n".join(result["failures"])
    assert result["pins"] == result["checked"] >= 90


@NEEDS_VLLM
def test_the_conformance_command_runs_the_pin_checker_alone_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "explainer", "conformance", "--pins"], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "✓ agree  source: every file:line pin the product shows" in proc.stdout, proc.stdout


def product(tmp_path, text: str):
    """A repository with one product file holding ``text``, and a vLLM package folder beside it."""
    repo, vllm = tmp_path / "repo", tmp_path / "site-packages" / "vllm"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "page.md").write_text(text)
    (vllm / "distributed").mkdir(parents=True)
    (vllm / "distributed" / "comm.py").write_text("import os\n\n\ndef make_group_name():\n    return 'cpushm'\n")
    return repo, vllm


def test_a_pin_whose_text_moved_names_the_file_the_old_range_and_where_it_is_now(tmp_path):
    repo, vllm = product(tmp_path, "The name is built at `distributed/comm.py:4-5 return 'cpushm'`.\n")
    assert pins.check(repo, vllm)["failures"] == []
    path = vllm / "distributed" / "comm.py"
    path.write_text("# a new release adds\n# three lines\n# on top\n" + path.read_text())
    (failure,) = pins.check(repo, vllm)["failures"]
    assert failure == ("docs/page.md:1: `distributed/comm.py:4-5`: \"return 'cpushm'\" is not within lines 4-5; "
                       "now at 8")


def test_a_pin_without_text_a_loose_reference_and_a_missing_file_fail(tmp_path):
    repo, vllm = product(tmp_path, "Built at `distributed/comm.py:4`.\nSee comm.py:5 or `:4`.\n"
                                   "Gone: `distributed/gone.py:1 x`.\n")
    failures = pins.check(repo, vllm)["failures"]
    assert any("`distributed/comm.py:4` has no text" in f for f in failures)
    assert any(f.startswith("docs/page.md:2: 'comm.py:5' is not a pin") for f in failures)
    assert any(f.startswith("docs/page.md:2: '`:4`' is not a pin") for f in failures)
    assert any("gone.py" in f and "no such file in the installed vLLM" in f for f in failures)


def test_a_pin_whose_range_is_far_longer_than_its_text_fails(tmp_path):
    body = "def make_group_name():\n" + "    x = 1\n" * 60 + "    return 'cpushm'\n"
    repo, vllm = product(tmp_path, "Whole: `distributed/comm.py:1-62 return 'cpushm'`.\n"
                                   "Near: `distributed/comm.py:22-62 return 'cpushm'`.\n")
    (vllm / "distributed" / "comm.py").write_text(body)
    (failure,) = pins.check(repo, vllm)["failures"]
    assert failure == ("docs/page.md:1: `distributed/comm.py:1-62` spans 62 lines for a text of 1: narrow it to the "
                       "lines the claim is about (at most 40 more than the text's)")


def test_without_the_vllm_environment_the_checker_says_so_and_does_not_agree(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLAINER_VLLM_VENV", str(tmp_path / "none"))
    (row,) = pins.rows()
    assert row.agree is False and row.vllm["pins"] == 0
    assert all("not checked: no vLLM environment at" in f for f in row.vllm["failures"])


def test_the_span_of_a_text_is_its_first_and_last_line_layout_ignored():
    lines = ["a = 1", "raise NotImplementedError(", '    "Pipeline parallelism "', '    "is not supported"', ")"]
    assert pins.span_of("Pipeline parallelism is not supported", lines) == (3, 4)
    assert pins.span_of("raise NotImplementedError(", lines) == (2, 2)
    assert pins.span_of("nowhere", lines) is None
