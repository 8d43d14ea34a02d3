"""The pin checker: every ``RELEASE FILE:LINES TEXT`` pin the product shows is found within its lines of that release.

With ``.venv-vllm`` (``make test`` builds it on x86_64 Linux, and fetches the newest release's wheel) every pin of
SOURCES.md, the docs, the notebooks and the package's docstrings is checked and must hold. The checker is also shown
to fail the way a maintainer needs: a pin whose text moved names its file, the old range and where the text is now;
a pin with no text or no release, a loose line reference, a missing file and a text too common to identify a place
fail; without a source for the release that runs here it says "not checked" instead of passing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from explainer import vllm_env, vllm_release
from explainer.conformance import pins, vllm_source
from explainer.conformance.places import File, Place

NEEDS_VLLM = pytest.mark.skipif(vllm_env.missing_reason() is not None, reason=str(vllm_env.missing_reason()))


@NEEDS_VLLM
def test_every_pin_the_product_shows_holds_in_the_release_it_names():
    result = pins.check()
    if set(result["not_checked"]) == {vllm_release.NEWEST} and "no network" in result["not_checked"][vllm_release.NEWEST]:
        pytest.skip(result["not_checked"][vllm_release.NEWEST])
    assert result["failures"] == [] and result["not_checked"] == {}, "\n".join(result["failures"])
    assert result["pins"] == result["checked"] >= 90


@NEEDS_VLLM
def test_the_conformance_command_runs_the_pin_checker_alone_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "explainer", "conformance", "--pins"], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "✓ agree  source: every file:line pin the product shows" in proc.stdout, proc.stdout


RUNS = vllm_release.RUNS
COMM = "import os\n\n\ndef make_group_name():\n    return 'cpushm'\n"


def product(tmp_path, text: str, comm: str = COMM):
    """A repository with one product file holding ``text``, and the release's source with one file."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "page.md").write_text(text)
    files = {"distributed/comm.py": comm}
    return repo, {RUNS: vllm_source.Source(RUNS, "made up", list(files), files.__getitem__)}


def test_a_pin_whose_text_moved_names_the_file_the_old_range_and_where_it_is_now(tmp_path):
    text = f"The name is built at `{RUNS} distributed/comm.py:4-5 return 'cpushm'`.\n"
    repo, sources = product(tmp_path, text)
    assert pins.check(repo, sources)["failures"] == []
    repo, sources = product(tmp_path / "b", text, "# a new release adds\n# three lines\n# on top\n" + COMM)
    (failure,) = pins.check(repo, sources)["failures"]
    assert failure == (f"docs/page.md:1: `{RUNS} distributed/comm.py:4-5`: \"return 'cpushm'\" is not within lines "
                       "4-5; it is at 8 (make_group_name)")


def test_a_pin_without_text_or_release_a_loose_reference_and_a_missing_file_fail(tmp_path):
    repo, sources = product(tmp_path, f"Built at `{RUNS} distributed/comm.py:4`.\nSee comm.py:5 or `:4`.\n"
                                      f"Gone: `{RUNS} distributed/gone.py:1 x`. No release: `distributed/comm.py:5 "
                                      f"return`. Unknown: `0.1.0 distributed/comm.py:5 return`.\n")
    failures = pins.check(repo, sources)["failures"]
    assert any(f"`{RUNS} distributed/comm.py:4` has no text" in f for f in failures)
    assert any(f.startswith("docs/page.md:2: 'comm.py:5' is not a pin") for f in failures)
    assert any(f.startswith("docs/page.md:2: '`:4`' is not a pin") for f in failures)
    assert any("gone.py" in f and f"no such file in vLLM {RUNS}" in f for f in failures)
    assert any(f"`distributed/comm.py:5`: name the vLLM release it was read in: `{RUNS} distributed/comm.py:...`" in f
               for f in failures)
    assert any("0.1.0 is not a release the package is read against" in f for f in failures)


def test_a_text_too_common_to_identify_a_place_fails(tmp_path):
    comm = "def f():\n    x.wait()\n    y = 1\n    x.wait()\n\n\ndef g():\n    x.wait()\n"
    repo, sources = product(tmp_path, f"`{RUNS} distributed/comm.py:2-3 x.wait()` `{RUNS} distributed/comm.py:8 "
                                      f"x.wait()`", comm)
    (failure,) = pins.check(repo, sources)["failures"]
    assert failure == (f"docs/page.md:1: `{RUNS} distributed/comm.py:2-3`: too common: 2 times in f (lines 2, 4), so "
                       "it identifies no place: quote more of the line")


def test_a_pin_whose_range_is_far_longer_than_its_text_fails(tmp_path):
    body = "def make_group_name():\n" + "    x = 1\n" * 60 + "    return 'cpushm'\n"
    repo, sources = product(tmp_path, f"Whole: `{RUNS} distributed/comm.py:1-62 return 'cpushm'`.\n"
                                      f"Near: `{RUNS} distributed/comm.py:22-62 return 'cpushm'`.\n", body)
    (failure,) = pins.check(repo, sources)["failures"]
    assert failure == (f"docs/page.md:1: `{RUNS} distributed/comm.py:1-62`: spans 62 lines for a text of 1: narrow it "
                       "to the lines the claim is about (at most 40 more than the text's)")


def test_without_a_source_for_the_release_that_runs_the_checker_says_so_and_does_not_agree(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLAINER_VLLM_VENV", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")     # port 9 (discard): nothing listens here
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    row = pins.rows()[0]
    assert row.agree is False and row.vllm["pins"] < row.toy["pins"]
    assert any(f.startswith("not checked: no network") for f in row.vllm["failures"]), row.vllm["failures"]


def test_places_are_found_layout_ignored_with_their_lines_and_context():
    lines = "a = 1\nclass C:\n    def f(self):\n        raise NotImplementedError(\n" \
            '            "Pipeline parallelism "\n            "is not supported"\n        )\n'
    found = File(lines)
    assert found.places("Pipeline parallelism is not supported") == [Place(5, 6, "C.f")]
    assert found.places("raise NotImplementedError(") == [Place(4, 4, "C.f")]
    assert found.places("a = 1") == [Place(1, 1, "")]
    assert found.places("nowhere") == []
