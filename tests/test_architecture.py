"""The house: the package's import graph, counted with every import inside functions, has no circle; every
import left inside a function defers a heavy or optional library (and says which); no private name crosses a
module or reaches a notebook; each module is one concept (its row in ARCHITECTURE.md's map names it: a reviewer's
rule) and functions stay small; the lesson (what a learner is sent to read) keeps to its budget and never imports
the kit; ARCHITECTURE.md draws the layers of the import-linter contract (``pyproject.toml``, run by ``make lint``),
says which folders are the lesson and which the kit, and maps every module that exists.

The graph is this file's own ``ast`` walk (grimp, which ``lint-imports`` uses, sees function-level imports too;
the walk also tells a function-level import from a module-level one). The checkers are tested on small
synthetic packages first, so each check is shown to fail when its rule is broken.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "explainer"
# Third-party libraries worth deferring: big (torch, transformers, diffusers, matplotlib) or optional
# (the notebook and test extras). Nothing else justifies an import inside a function.
HEAVY = {"torch", "transformers", "diffusers", "matplotlib", "ipywidgets", "IPython", "playwright", "tornado", "vllm"}

# Every import left inside a function, and why (module, imported module) -> reason. The rule below checks
# that each one really defers a HEAVY library the importing module does not load at its top.
FUNCTION_LEVEL = {
    ("explainer.cli", "explainer.distributed.device_communicators.comm_config"):
        "the parser stays free of torch; the communicator's knobs are checked only when a command runs",
    ("explainer.commands.accuracy", "explainer.config"): "commands are imported to build the parser: torch loads "
                                                         "only when the command runs",
    ("explainer.commands.accuracy", "explainer.model"): "as above (the task)",
    ("explainer.commands.accuracy", "explainer.model.registry"): "as above",
    ("explainer.commands.accuracy", "explainer.scenario.accuracy"): "as above (the engine)",
    ("explainer.commands.generate", "torch"): "as above",
    ("explainer.commands.generate", "explainer.model"): "as above (the task; also for --show-canvas glyphs)",
    ("explainer.commands.generate", "explainer.model.cached_lm"): "as above",
    ("explainer.commands.generate", "explainer.model.checkpoint"): "as above",
    ("explainer.commands.generate", "explainer.sampler"): "as above",
    ("explainer.commands.train", "explainer.model.train"): "as above (the training script)",
    ("explainer.commands.conformance", "explainer.conformance"): "as above (the toy's stories)",
    ("explainer.vllm_side.torchvision_ops", "torch"): "imported by a .pth line at every start of .venv-vllm's "
                                                       "interpreter: torch loads only when torchvision is imported",
    ("explainer.vllm_side.comm_pair", "explainer.vllm_side.bench"): "the launcher of the two vLLM ranks stays light; "
                                                                    "torch and vLLM load in the rank processes",
    ("explainer.vllm_side.comm_pair", "explainer.vllm_side.comm_rank"): "as above",
    ("explainer.vllm_side.kernels", "torch"): "imported with explainer.vllm_side by every vLLM-side process, the "
                                              "light pair launcher too: torch loads only for the ISA override or "
                                              "the report",
    ("explainer.vllm_side.kernels", "vllm.platforms"): "as above (vLLM)",
    ("explainer.commands.version", "torch"): "as above",
    ("explainer.commands.room", "explainer.room.board"): "tornado is the room extra (explainer[room]), needed on "
                                                         "the instructor's machine only",
    ("explainer.commands.hub", "explainer.hub"): "the hub's board service: JupyterHub and tornado, "
                                                           "in the hub's venv only (make hub)",
    ("explainer.commands.hub", "explainer.room.board"): "as above (tornado)",
    ("explainer.doctor.check", "torch"): "the doctor runs on a bare Python (minute 0): a missing or broken torch "
                                         "is a row, and the rows that need torch say 'not checked yet'",
        ("explainer.doctor.rows", "torch"): "as above",
    ("explainer.doctor.rows", "torch.distributed"): "as above",
    ("explainer.doctor.rows", "explainer.distributed.launch"): "as above (the launcher imports torch)",
    ("explainer.doctor.rows", "explainer.distributed.device_communicators.comm_config"):
        "as above (the engine's EXPLAINER_* settings, checked before the gloo row starts ranks)",
    ("explainer.doctor.rows", "explainer.model"): "as above (the task)",
    ("explainer.doctor.rows", "explainer.model.cached_lm"): "as above",
    ("explainer.doctor.rows", "explainer.model.checkpoint"): "as above",
    ("explainer.doctor.rows", "explainer.sampler"): "as above",
    ("explainer.hf", "transformers"): "transformers is an optional extra (explainer[hf])",
    ("explainer.model.hf_tiny", "transformers"): "as above",
    ("explainer.bench.sampler", "transformers.models.diffusion_gemma.generation_diffusion_gemma"):
        "the sampler benchmark's baseline is transformers' own sampler (optional extra)",
    ("explainer.render.comm", "matplotlib.figure"): "matplotlib is in the notebooks extra; only the benchmark "
                                                    "figure needs it",
    ("explainer.scenario.registry", "explainer.scenario"): "listing the scenarios stays light (the command line's "
                                                           "parser); the stories load torch when one runs",
    ("explainer.commands.workshop", "explainer.distributed.device_communicators.comm_config"):
        "the engine's settings are checked once the jail is starting (the import loads torch beside it)",
    ("explainer.commands.workshop", "explainer.workshop.grader"): "`workshop list` and bad input stay light; torch, "
                                                                  "the exercises and the jail load only to grade",
    ("explainer.workshop.grader_process", "explainer.workshop.grader"): "the notebook kernel's side stays light (no "
                                                                        "torch); its grader process loads them",
}
# Imports by name (importlib), on purpose: plugin-style discovery the graph cannot see.
BY_NAME = {
    "explainer.cli": "every module of explainer.commands is a subcommand (pkgutil)",
    "explainer.commands.bench": "the benchmark areas (explainer.bench.<area>) chosen on the command line",
    "explainer.workshop.jail.learner_process": "the modules an exercise lists to import before the learner's code "
                                               "(its PRELOAD)",
    "explainer.workshop.catalog": "the exercise modules found in explainer/workshop/exercises/ (one module, one "
                                  "exercise): imported to grade, never to list them",
    "explainer.render.annotated": "the toy object a Fix names by its dotted path, read with inspect",
    "explainer.workshop.learner": "whether a learner's global is importable from its own module (then it is not "
                                  "bundled into the check)",
}
MAX_FUNCTION_LINES = 60
# What a learner is sent to read (the lesson) and the tools around it (the kit), by top-level name in explainer/.
# ARCHITECTURE.md's "Lesson and kit" table says the same; the import-linter contract "lesson-never-imports-kit" keeps
# the kit on top. The budget is the lesson's lines as `wc -l` counts them.
LESSON = ("__init__", "errors", "vocab", "vllm_release", "validation", "trace", "sampler", "model", "hf", "config",
          "worker", "distributed", "engine", "scenario", "render", "widgets", "vllm_env")
KIT = ("workshop", "room", "doctor", "bench", "conformance", "vllm_side", "commands", "hub", "cli", "__main__",
       "notebook_file", "notebook_kernel")
LESSON_BUDGET = 10_000     # #35's goal for the lesson
LESSON_CEILING = 11_750    # what it is now: the lesson may not grow; lower this as it shrinks, to LESSON_BUDGET
# (module, function) -> the vLLM function of that size it mirrors (its docstring must name it). None today.
LONG_ON_PURPOSE: dict[tuple[str, str], str] = {}
# (module, private member) read from an object that is not the package's, though a module of the package has a member
# of that name too -> whose it is.
FOREIGN_PRIVATE = {
    ("explainer.vllm_side.sampler", "_sampled"): "the real vLLM DiffusionSampler's int32 buffer (the toy mirrors it)",
    ("explainer.vllm_side.comm_rank", "_C"): "torch.ops._C, the real vLLM's kernel library",
}


# ---- the import graph --------------------------------------------------------------------------------
class Module:
    def __init__(self, name: str, path: Path, is_pkg: bool):
        self.name, self.path, self.is_pkg = name, path, is_pkg
        self.top: list[tuple[int, str, list[str]]] = []        # (line, module, names) at module/class level
        self.inner: list[tuple[int, str, list[str]]] = []      # inside a def
        self.functions: list[tuple[str, int]] = []
        self.by_name: list[int] = []                          # lines calling importlib.import_module
        self.attr_uses: list[tuple[str, str, int]] = []
        self.lines = 0


def _walk(mod: Module, tree: ast.AST) -> None:
    def visit(node, depth, qual):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = ".".join(qual + [child.name])
                mod.functions.append((name, child.end_lineno - child.lineno + 1))
                visit(child, depth + 1, qual + [child.name])
            elif isinstance(child, ast.ClassDef):
                visit(child, depth, qual + [child.name])
            else:
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    if isinstance(child, ast.Import):
                        entries = [(a.name, [a.asname or a.name]) for a in child.names]
                    else:
                        base = _resolve(mod, child.module or "", child.level)
                        entries = [(base, [a.name for a in child.names])]
                    for target, names in entries:
                        (mod.inner if depth else mod.top).append((child.lineno, target, names))
                elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                        and child.func.attr == "import_module":
                    mod.by_name.append(child.lineno)
                elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
                    mod.attr_uses.append((child.value.id, child.attr, child.lineno))
                visit(child, depth, qual)
    visit(tree, 0, [])


def _resolve(mod: Module, name: str, level: int) -> str:
    if not level:
        return name
    base = mod.name.split(".")[: None if mod.is_pkg else -1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def load_package(root: Path) -> dict[str, Module]:
    """Every module of the package at ``root`` (a folder with ``__init__.py``), parsed."""
    mods = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_pkg else parts)
        m = Module(name, path, is_pkg)
        src = path.read_text()
        m.lines = len(src.splitlines())
        _walk(m, ast.parse(src))
        mods[name] = m
    return mods


def targets(mods: dict[str, Module], target: str, names: list[str]) -> list[str]:
    """The package modules an import statement loads (a ``from pkg import sub`` loads ``pkg.sub``)."""
    out = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
    if target in mods and len(out) < len(names):
        out.append(target)
    return out


def edges(mods: dict[str, Module], inner: bool = True) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in mods}
    for name, m in mods.items():
        for _, target, names in m.top + (m.inner if inner else []):
            g[name].update(t for t in targets(mods, target, names) if t != name)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def loads(mods: dict[str, Module], name: str, _seen=None) -> set[str]:
    """The third-party top-level packages importing ``name`` loads (module-level imports, parents included)."""
    seen = set() if _seen is None else _seen
    out: set[str] = set()
    parts = name.split(".")
    for k in range(1, len(parts) + 1):                     # importing a.b.c runs a and a.b first
        mod = ".".join(parts[:k])
        if mod in seen or mod not in mods:
            continue
        seen.add(mod)
        for _, target, names in mods[mod].top:
            inside = targets(mods, target, names)
            if inside:
                for t in inside:
                    out |= loads(mods, t, seen)
            elif target.split(".")[0] != parts[0]:
                out.add(target.split(".")[0])
    return out


def unjustified_function_imports(mods: dict[str, Module]) -> list[str]:
    """Function-level imports that defer nothing heavy the importing module does not already load."""
    bad = []
    for name, m in mods.items():
        mine = loads(mods, name)
        for line, target, names in m.inner:
            inside = targets(mods, target, names)
            brings = set().union(*(loads(mods, t) for t in inside)) if inside else {target.split(".")[0]}
            if not (brings & HEAVY) - mine:
                bad.append(f"{name}:{line} imports {target} inside a function, deferring nothing heavy")
    return bad


def private_imports(mods: dict[str, Module]) -> list[str]:
    """``from pkg.mod import _name`` and ``mod._name`` across modules of the package."""
    bad = []
    for name, m in mods.items():
        aliases = {}
        for line, target, names in m.top + m.inner:
            for n in names:
                full = f"{target}.{n}"
                if full in mods:
                    aliases[n] = full
                elif target in mods and target != name and n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}:{line} imports {target}.{n}")
            if target in mods and names == [target.split(".")[0]]:
                aliases[target.split(".")[0]] = target
        for alias, attr, line in m.attr_uses:
            if alias in aliases and aliases[alias] != name and attr.startswith("_") and not attr.startswith("__"):
                bad.append(f"{name}:{line} uses {aliases[alias]}.{attr}")
    return bad


def notebook_private_imports(notebooks: list[Path]) -> list[str]:
    bad = []
    for nb in notebooks:
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] != "code":
                continue
            code = "\n".join(ln for ln in "".join(cell["source"]).splitlines() if not ln.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("explainer"):
                    bad += [f"{nb.name} cell {i}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return bad


def private_members(mods: dict[str, Module]) -> dict[str, set[str]]:
    """The ``_private`` members each module defines: names it assigns (``self._x = ...``, ``_x = ...``), defines
    (``def _x``, ``class _X``) or lists in ``__slots__``."""
    out = {}
    for name, m in mods.items():
        own = set()
        for node in ast.walk(ast.parse(m.path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                own.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                own.add(node.value)                                    # __slots__ entries
        out[name] = {n for n in own if n.startswith("_") and not n.startswith("__")}
    return out


def foreign_private_reads(mods: dict[str, Module]) -> list[str]:
    """``obj._x`` read in a module that does not define ``_x`` while another module of the package does: a class
    reading its base's (or a collaborator's) private member. Private names of libraries are not the package's."""
    own = private_members(mods)
    everyone = set().union(*own.values())
    bad = []
    for name, m in mods.items():
        for node in ast.walk(ast.parse(m.path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in everyone \
                    and node.attr not in own[name] and (name, node.attr) not in FOREIGN_PRIVATE:
                bad.append(f"{name}:{node.lineno} reads .{node.attr}, a private member of "
                           f"{', '.join(sorted(n for n, o in own.items() if node.attr in o))}")
    return sorted(bad)


# ---- the checkers, on synthetic packages: each rule fails when broken ---------------------------------
def _make(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        p = tmp_path / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return load_package(tmp_path / "pkg")


def test_a_circle_through_an_import_inside_a_function_is_found(tmp_path):
    mods = _make(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n",
                            "b.py": "def f():\n    from pkg.a import x\n"})
    assert cycles(edges(mods, inner=False)) == []
    assert cycles(edges(mods)) == [["pkg.a", "pkg.b"]]


def test_a_function_level_import_of_a_light_module_is_not_justified(tmp_path):
    mods = _make(tmp_path, {"__init__.py": "", "light.py": "import json\n", "heavy.py": "import torch\n",
                            "user.py": "def f():\n    from pkg import light\n\ndef g():\n    from pkg import heavy\n",
                            "torchy.py": "import torch\n\ndef h():\n    from pkg import heavy\n"})
    assert unjustified_function_imports(mods) == [
        "pkg.torchy:4 imports pkg inside a function, deferring nothing heavy",
        "pkg.user:2 imports pkg inside a function, deferring nothing heavy"]


def test_private_names_across_modules_are_found(tmp_path):
    mods = _make(tmp_path, {"__init__.py": "", "a.py": "def _x():\n    pass\n_Y = 1\n",
                            "b.py": "from pkg.a import _x\nfrom pkg import a\nprint(a._Y, a.__name__)\n"})
    assert private_imports(mods) == ["pkg.b:1 imports pkg.a._x", "pkg.b:3 uses pkg.a._Y"]


def test_a_private_member_read_from_another_module_is_found(tmp_path):
    mods = _make(tmp_path, {"__init__.py": "",
                            "base.py": "class Base:\n    def __init__(self):\n        self._ctrl = 1\n",
                            "sub.py": "from pkg.base import Base\n\nclass Sub(Base):\n    def f(self):\n"
                                      "        self._own = 2\n        return self._ctrl + self._own\n",
                            "lib.py": "import os\nos._exit\n"})
    assert foreign_private_reads(mods) == ["pkg.sub:6 reads ._ctrl, a private member of pkg.base"]


# ---- the package ----------------------------------------------------------------------------------------
MODS = load_package(PACKAGE)


def test_no_import_circle_counting_imports_inside_functions():
    assert cycles(edges(MODS)) == []


def test_every_function_level_import_is_listed_with_its_reason_and_defers_something_heavy():
    assert unjustified_function_imports(MODS) == []
    found = {(name, target) for name, m in MODS.items() for _, target, _ in m.inner}
    assert found - set(FUNCTION_LEVEL) == set(), "a new import inside a function: say why in FUNCTION_LEVEL"
    assert set(FUNCTION_LEVEL) - found == set(), "FUNCTION_LEVEL lists an import that is gone"


def test_imports_by_name_are_the_listed_ones():
    assert {name for name, m in MODS.items() if m.by_name} == set(BY_NAME)


def test_no_private_name_crosses_a_module_or_reaches_a_notebook():
    assert private_imports(MODS) == []
    assert foreign_private_reads(MODS) == []
    notebooks = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    assert notebooks and notebook_private_imports(notebooks) == []


def test_functions_stay_small():
    long = [f"{n}:{f} {k}" for n, m in MODS.items() for f, k in m.functions
            if k > MAX_FUNCTION_LINES and (n, f) not in LONG_ON_PURPOSE]
    assert long == []


def side_lines(names: tuple[str, ...]) -> int:
    """Lines (newlines, as ``wc -l`` counts them) of the modules of ``names`` (top-level names in explainer/)."""
    return sum(m.path.read_text().count("\n") for n, m in MODS.items() if top_name(n) in names)


def top_name(module: str) -> str:
    """``explainer.worker.outputs`` -> ``worker``; the package itself -> ``__init__``."""
    return (module.split(".") + ["__init__"])[1]


def test_every_module_is_lesson_or_kit_and_the_lesson_keeps_its_budget():
    tops = {top_name(n) for n in MODS}
    assert tops - set(LESSON) - set(KIT) == set(), "a new top-level module: say in LESSON or KIT which side it is"
    assert not set(LESSON) & set(KIT)
    lesson, kit = side_lines(LESSON), side_lines(KIT)
    print(f"\nlesson {lesson} lines (ceiling {LESSON_CEILING}, budget {LESSON_BUDGET}), kit {kit} lines")
    assert lesson <= LESSON_CEILING, f"the lesson is {lesson} lines, over its ceiling of {LESSON_CEILING}"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["id"] == "lesson-never-imports-kit")
    assert {m.removeprefix("explainer.") for m in contract["source_modules"]} == set(LESSON) - {"__init__"}
    assert {m.removeprefix("explainer.") for m in contract["forbidden_modules"]} == {k for k in KIT if k in tops}


def test_architecture_says_which_folders_are_lesson_and_which_kit():
    table = re.search(r"## Lesson and kit\n.*?\n(\|.*?)\n\n", _architecture(), re.S)
    assert table, "ARCHITECTURE.md: a '## Lesson and kit' section with one table"
    sides = {}
    for row in table.group(1).splitlines()[2:]:
        side, names = [c.strip() for c in row.strip("|").split("|")[:2]]
        sides[side] = {re.sub(r"(^explainer/|/$|\.py$)", "", x) for x in re.findall(r"`([^`]+)`", names)}
    assert sides == {"lesson": set(LESSON) - {"__init__"}, "kit": set(KIT)}


# ---- ARCHITECTURE.md against the code ---------------------------------------------------------------------
def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    return [" | ".join(p.strip().removeprefix("explainer.") for p in layer.split("|")) for layer in layers]


def _architecture() -> str:
    return (ROOT / "ARCHITECTURE.md").read_text()


def test_the_layer_picture_is_the_import_linter_contract():
    text = _architecture()
    block = re.search(r"## Layers.*?```text\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md: a '## Layers' section with a ```text block, one layer per line"
    picture = [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.group(1).splitlines()]
    assert [ln for ln in picture if ln] == _contract_layers()


def _module_map() -> dict[str, list[str]]:
    """Folder -> the module file names its ``### `explainer/...` `` table lists (first column)."""
    out: dict[str, list[str]] = {}
    for folder, table in re.findall(r"^### `(explainer/[\w/]*)`[^\n]*\n(.*?)(?=^#|\Z)", _architecture(), re.S | re.M):
        rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
        out[folder.rstrip("/")] = [re.match(r"\| `([\w./*]+)`", r).group(1) for r in rows]
    return out


def test_the_module_map_lists_every_module_and_only_modules_that_exist():
    """A row ``*.py`` stands for every module of its folder (one exercise per module: the catalog lists them)."""
    listed = {f"{folder}/{name}" for folder, names in _module_map().items() for name in names}
    for pattern in [p for p in listed if p.endswith("/*.py")]:
        listed.remove(pattern)
        listed |= {str(p.relative_to(ROOT)) for p in ROOT.glob(pattern) if p.name != "__init__.py"} or {pattern}
    actual = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(actual - listed) == [], "modules missing from ARCHITECTURE.md's map"
    assert sorted(listed - actual) == [], "ARCHITECTURE.md maps modules that do not exist"


def test_every_layer_of_the_contract_exists():
    for layer in _contract_layers():
        for part in layer.split(" | "):
            assert f"explainer.{part}" in MODS, part


# ---- each vocabulary defined once, and what it names exists --------------------------------------------------
def test_the_state_field_vocabulary_is_the_runner_state():
    from explainer.vocab import FIRST_RANK_ONLY_FIELDS, REQUEST_STATE_FIELDS, STATE_SYNC_FIELDS, VIEW_FIELDS
    from explainer.worker.states import request_state_fields
    assert REQUEST_STATE_FIELDS == request_state_fields()
    assert set(STATE_SYNC_FIELDS) | set(FIRST_RANK_ONLY_FIELDS) | set(VIEW_FIELDS) - {"step"} <= set(REQUEST_STATE_FIELDS)


def test_the_renderers_draw_exactly_the_synced_fields():
    from explainer.render.pp_style import FIELD_SHAPE, READER, STATE_FIELDS
    from explainer.vocab import STATE_SYNC_FIELDS
    assert set(STATE_FIELDS) == set(READER) == set(FIELD_SHAPE) == set(STATE_SYNC_FIELDS)


def test_every_scenario_names_a_story_function():
    from explainer.scenario.registry import SCENARIOS, story_function
    assert all(callable(story_function(name)) for name in SCENARIOS)


@pytest.mark.parametrize("vocabulary", ["PP_MODES", "PP_SCHEDULES", "SAMPLER_DRAWS", "SELF_CONDITIONING_MODES",
                                        "EXECUTOR_BACKENDS", "COMM_GATES"])
def test_no_module_spells_a_vocabulary_again(vocabulary):
    from explainer import vocab
    names = getattr(vocab, vocabulary)
    spelled = []
    for name, m in MODS.items():
        if name == "explainer.vocab":
            continue
        for node in ast.walk(ast.parse(m.path.read_text())):
            if isinstance(node, ast.Tuple) and len(node.elts) >= 2 and all(
                    isinstance(e, ast.Constant) for e in node.elts) and set(e.value for e in node.elts) == set(names):
                spelled.append(f"{name}:{node.lineno}")
    assert spelled == []
