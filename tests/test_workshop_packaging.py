"""A correct answer written in a notebook cell passes ``check()`` as it passes the command line: decorated answers
(``@torch.no_grad()``, ``@functools.cache``) and float constants (``INF = float('inf')``) travel right.

The cells are a module of their own here (a file, as a notebook's cells are a module of their own there), so
``inspect.getsource`` reads them as it reads a notebook's. Each is first packaged (``learner.from_function``) and
its source run outside any jail against the original on a real case; then graded by ``check()`` for real."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from explainer.workshop import check, learner

RULE = """
    h, order = torch.sort(entropy, dim=-1)
    keep = torch.cumsum(h, dim=-1) - h <= min(bound, INF)
    return torch.zeros_like(keep).scatter_(-1, order, keep)
"""
CELLS = {
    "no_grad": "import torch\nINF = 1e30\n\n@torch.no_grad()\ndef entropy_bound_accept(entropy, bound):" + RULE,
    "cache": "import functools\nimport torch\nINF = 1e30\n\n@functools.cache\ndef entropy_bound_accept(entropy, bound):"
             + RULE,
    "inf": "import torch\nINF = float('inf')\n\ndef entropy_bound_accept(entropy, bound):" + RULE,
    "stacked": "import functools\nimport torch as T\ntorch = T\nLIMITS = {'inf': float('inf'), 'zero': -0.0}\n"
               "INF = LIMITS['inf']\n\n@functools.lru_cache(maxsize=None)\n@T.no_grad()\n"
               "def entropy_bound_accept(entropy, bound):" + RULE,
    "decorated helper": "import torch\nINF = float('inf')\n\n@torch.no_grad()\ndef ascending(h):\n"
                        "    return torch.sort(h, dim=-1)\n\n\ndef entropy_bound_accept(entropy, bound):"
                        + RULE.replace("torch.sort(entropy, dim=-1)", "ascending(entropy)"),
}


def _cell(name: str, tmp_path):
    path = tmp_path / f"cell_{name.replace(' ', '_')}.py"
    path.write_text(CELLS[name])
    spec = importlib.util.spec_from_file_location(f"notebook_cell_{name.replace(' ', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.entropy_bound_accept


@pytest.mark.parametrize("name", list(CELLS))
def test_a_decorated_answer_or_a_float_constant_is_packaged_right(name, tmp_path):
    fn = _cell(name, tmp_path)
    code = learner.from_function(fn, "entropy_bound_accept")
    scope: dict = {}
    exec(compile(code.source, code.filename, "exec"), scope)
    h = torch.tensor([[0.5, 0.05, 0.3, 0.02, 0.9]])
    assert torch.equal(scope["entropy_bound_accept"](h, 0.1), fn(h, 0.1)), code.source


@pytest.mark.slow
@pytest.mark.parametrize("name", ["no_grad", "cache", "inf"])
def test_a_decorated_answer_or_a_float_constant_passes_check(name, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLAINER_WORKSHOP_BUDGET", "5")
    report = check("accept", _cell(name, tmp_path))
    assert report.passed, report.reason
