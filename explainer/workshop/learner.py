"""The learner's code: read from a file or taken from a notebook function, checked statically in the
caller, executed only in the learner's process in the jail (``jail/learner_process.py``; the check talks to it,
``jail/channel.py``).

A function defined in a notebook cell travels as source (``inspect.getsource``) together with what it
uses from the notebook's globals, in its body, its decorators, its defaults and its annotations: modules become
``import`` lines, plain constants (numbers, text, and lists, tuples, sets and dicts of them) source that rebuilds
them (``float("inf")`` for an infinity), other notebook functions their own source. A decorated function
(``@torch.no_grad()``, ``@functools.cache``) travels as the function under its decorators, with the decorator
lines, so the jail applies them again. Anything else is an error that says to define it inside the function.
"""

from __future__ import annotations

import ast
import dis
import importlib
import inspect
import json
import math
import os
import stat
import textwrap
import traceback
import types
from dataclasses import asdict, dataclass
from pathlib import Path

from explainer.workshop.report import LearnerError
from explainer.workshop.shown import inert


CONSTANTS = (bool, int, float, str, bytes, type(None))
MAX_SOURCE = 1_000_000           # bytes of a submission's source (checked before it is read)
MAX_NOTEBOOK = 8_000_000         # bytes of a handed-in notebook (its outputs count)
FORK_ABOVE = 100_000             # characters of source above which the static check compiles in a child


class LearnerLimit(Exception):
    """The learner's code hit a limit: its time budget, memory, processes, CPU time, or its process ended
    (a fail that names what happened, not bad input). ``kind``: which, in words (``report.LIMIT_KINDS``)."""

    def __init__(self, message: str, kind: str = "process ended"):
        super().__init__(message)
        self.kind = kind


@dataclass
class LearnerCode:
    source: str
    filename: str        # as the learner knows it: the file's name, or "<cell: NAME>"
    function: str        # the function the exercise calls
    origin: str          # shown in reports: the path, or "function NAME"

    def to_json(self) -> dict:
        return asdict(self)


def from_file(path: str | os.PathLike, function: str, exercise: str = "") -> LearnerCode:
    """A .py file, or the exercise's cell of a handed-in notebook (the cell tagged ``exercise:ID``).
    Opened without following a symlink (it could point anywhere) and without waiting on a FIFO; the size is
    capped before anything is read. Names in messages are inert (``shown.inert``)."""
    shown, p = inert(os.fspath(path)), Path(path)
    notebook = p.suffix.lower() == ".ipynb"
    cap = MAX_NOTEBOOK if notebook else MAX_SOURCE
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if p.is_symlink():
            raise LearnerError("missing-file", f"{shown!r} is a symlink; hand in the file itself") from None
        raise LearnerError("missing-file", f"no such file: {shown!r} (give a .py file that defines {function}, "
                                           f"or a folder of them)" if not p.exists() else
                                           f"cannot read {shown!r}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise LearnerError("missing-file", f"{shown!r} is not a regular file")
        if st.st_size > cap:
            raise LearnerError("too-large", f"{shown!r} is {st.st_size / 1e6:.1f} MB; a submission may be at most "
                                            f"{cap / 1e6:g} MB")
        data = f.read(cap + 1)[:cap]
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LearnerError("missing-file", f"cannot read {shown!r}: not UTF-8 text (byte {exc.start})") from None
    if notebook:
        source = notebook_cell(source, exercise, shown)
    code = LearnerCode(source, inert(p.name), function, shown)
    static_check(code)
    return code


def notebook_cell(text: str, exercise: str, where: str) -> str:
    """The source of the code cell tagged ``exercise:ID`` (as ``exercises.ipynb`` marks each exercise). A file
    that is not shaped like a notebook (not a JSON object, ``cells`` not a list, a cell's ``metadata`` not an
    object, ``source`` not text) is ``LearnerError("not-a-notebook")`` naming what is wrong."""
    try:
        nb = json.loads(text)
    except (ValueError, RecursionError):
        raise LearnerError("not-a-notebook", f"{where!r} is not a notebook (not JSON)") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise LearnerError("not-a-notebook", f"{where!r} is not a notebook (no list of cells)")
    tag = f"exercise:{exercise}"
    for i, c in enumerate(nb["cells"]):
        if not isinstance(c, dict) or not isinstance(c.get("metadata", {}), dict):
            raise LearnerError("not-a-notebook", f"{where!r} is not a notebook (cell {i} is malformed)")
        tags = c.get("metadata", {}).get("tags") or []
        if c.get("cell_type") != "code" or not isinstance(tags, list) or tag not in tags:
            continue
        src = c.get("source", "")
        if isinstance(src, list) and all(isinstance(x, str) for x in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise LearnerError("not-a-notebook", f"{where!r} is not a notebook (the source of cell {i} is not text)")
        if len(src.encode("utf-8", "surrogatepass")) > MAX_SOURCE:
            raise LearnerError("too-large", f"{where!r}: the cell tagged {tag} is larger than {MAX_SOURCE / 1e6:g} MB")
        return src
    raise LearnerError("missing-function", f"{where!r} has no code cell tagged {tag} (the exercise notebook's "
                                           f"answer cell carries it)")


def from_function(fn, function: str) -> LearnerCode:
    """A function object (e.g. defined in a notebook cell, decorated or not) -> its source plus what it uses."""
    fn = _unwrapped(fn)                                       # under @functools.cache, @torch.no_grad(), ...
    if not isinstance(fn, types.FunctionType):
        raise LearnerError("missing-function", f"expected the function {function} (or a file path), "
                                               f"got {type(fn).__name__}")
    if fn.__name__ == "<lambda>":
        raise LearnerError("missing-function", f"give a function defined with `def {function}(...)`, not a lambda")
    parts: dict[str, str] = {}
    _bundle(fn, parts, set())
    body = "\n".join(v for k, v in parts.items() if k.startswith("import ")) + "\n\n" + \
        "\n\n".join(v for k, v in parts.items() if not k.startswith("import "))
    if fn.__name__ != function:
        body += f"\n\n{function} = {fn.__name__}\n"
    code = LearnerCode(body.strip() + "\n", f"<cell: {fn.__name__}>", function, f"function {fn.__name__}")
    static_check(code)
    return code


def _global_loads(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_loads(const)
    return names


def _unwrapped(v):
    """The function under ``v``'s decorators (``v`` itself when it has none)."""
    try:
        return inspect.unwrap(v) if callable(v) else v
    except ValueError:                                        # a cycle of __wrapped__
        return v


def _def_loads(src: str, name: str) -> set[str]:
    """Names the ``def`` line itself reads from the globals: its decorators, defaults and annotations."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)
    if node is None:
        return set()
    outside_body = [*node.decorator_list, node.args] + ([node.returns] if node.returns else [])
    return {n.id for part in outside_body for n in ast.walk(part) if isinstance(n, ast.Name)}


def value_source(v, depth: int = 0) -> str | None:
    """Source that rebuilds ``v`` (numbers, text, bytes, None, and lists/tuples/sets/dicts of them, the exact
    types), ``float("inf")`` and ``float("nan")`` included; None for anything else."""
    kind = type(v)
    if depth > 20:
        return None
    if kind is float:
        return repr(v) if math.isfinite(v) else f'float("{v}")'
    if kind in CONSTANTS:
        return repr(v)
    if kind in (list, tuple, set, frozenset):
        items = [value_source(x, depth + 1) for x in v]
        inner = None if None in items else ", ".join(items)
        return None if inner is None else {list: f"[{inner}]", tuple: f"({inner}{',' if len(items) == 1 else ''})",
                set: f"{{{inner}}}" if items else "set()", frozenset: f"frozenset({{{inner}}})"}[kind]
    if kind is dict:
        pairs = [(value_source(k, depth + 1), value_source(x, depth + 1)) for k, x in v.items()]
        return None if any(None in pair for pair in pairs) else "{" + ", ".join(f"{k}: {x}" for k, x in pairs) + "}"
    return None


def _importable(v, own_module: str) -> bool:
    """A function or class that ``from MODULE import NAME`` gives back (e.g. ``from torch import cumsum``)."""
    mod, name = getattr(v, "__module__", None), getattr(v, "__name__", None)
    if not isinstance(mod, str) or not isinstance(name, str) or mod in ("__main__", own_module):
        return False
    try:
        return getattr(importlib.import_module(mod), name, None) is v
    except Exception:                                     # noqa: BLE001 - not importable: not shippable
        return False


def _bundle(fn, parts: dict[str, str], seen: set[str]) -> None:
    if fn.__name__ in seen:
        return
    seen.add(fn.__name__)
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise LearnerError("missing-function", f"cannot read the source of {fn.__name__}; define it in a "
                                               f"notebook cell or a .py file") from None
    g = fn.__globals__
    for name in sorted(_global_loads(fn.__code__) | _def_loads(src, fn.__name__)):
        if name not in g:
            continue                                              # a builtin (or undefined: fails when run)
        v, const = g[name], value_source(g[name])
        if isinstance(v, types.ModuleType):
            parts[f"import {name}"] = (f"import {v.__name__}" if v.__name__ == name
                                       else f"import {v.__name__} as {name}")
        elif const is not None:
            parts[f"const {name}"] = f"{name} = {const}"
        elif isinstance(_unwrapped(v), types.FunctionType) and _unwrapped(v).__module__ == fn.__module__:
            _bundle(_unwrapped(v), parts, seen)                  # another cell's function (decorators and all)
        elif _importable(v, fn.__module__):
            parts[f"import {name}"] = (f"from {v.__module__} import {v.__name__}"
                                       + ("" if v.__name__ == name else f" as {name}"))
        else:
            raise LearnerError("missing-function", f"{fn.__name__} uses {name!r} ({type(v).__name__}) from "
                                                   f"elsewhere in the notebook; define it inside the function")
    parts[f"def {fn.__name__}"] = src


def static_check(code: LearnerCode) -> None:
    """Before any work: the source compiles and defines ``code.function`` at top level. A large source is
    compiled in a forked child (a 1 MB file of one-line statements peaks at ~270 MB while compiling), so the
    grading command's own memory stays what it was."""
    if len(code.source) <= FORK_ABOVE or not hasattr(os, "fork"):
        _static_check(code)
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # the child: compile, say the verdict, exit
        os.close(r)
        try:
            _static_check(code)
            msg = None
        except LearnerError as exc:
            msg = [exc.kind, str(exc)[:2000]]
        except BaseException as exc:                      # noqa: BLE001 - e.g. MemoryError, RecursionError
            msg = ["syntax-error", f"{code.filename} cannot be compiled ({type(exc).__name__})"]
        os.write(w, json.dumps(msg).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read(8192)
    os.waitpid(pid, 0)
    msg = json.loads(data) if data else ["syntax-error", f"{code.filename} cannot be compiled"]
    if msg:
        raise LearnerError(*msg)


def _static_check(code: LearnerCode) -> None:
    """Compiled to bytecode, not to Python AST objects (those cost ~2.4 kB per one-line statement)."""
    try:
        module = compile(code.source, code.filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        if not isinstance(exc, SyntaxError):
            raise LearnerError("syntax-error", f"{code.filename} cannot be compiled ({exc})") from None
        where = f"{code.filename} line {exc.lineno}" + (f": {exc.text.strip()}" if exc.text else "")
        raise LearnerError("syntax-error", f"syntax error in {where} ({exc.msg})") from None
    names = {i.argval for i in dis.get_instructions(module) if i.opname in ("STORE_NAME", "STORE_GLOBAL")}
    if code.function not in names:
        defined = sorted(c.co_name for c in module.co_consts
                         if isinstance(c, types.CodeType) and not c.co_name.startswith("<") and c.co_name in names)
        raise LearnerError("missing-function", f"{code.origin} defines no function {code.function}"
                           + (f" (it defines {', '.join(defined)})" if defined else ""))


def where(exc: BaseException, filename: str) -> str:
    """``line N: <source>`` of the innermost frame in the learner's code, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"{filename} line {f.lineno}" + (f": {f.line.strip()}" if f.line else "")


def describe(exc: BaseException, filename: str) -> str:
    at = where(exc, filename)
    msg = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{type(exc).__name__}" + (f": {msg}" if msg else "") + (f" (at {at})" if at else "")


def budget() -> float:
    """Seconds the learner's code may take per call (``EXPLAINER_WORKSHOP_BUDGET``, default 10)."""
    try:
        return max(0.5, float(os.environ.get("EXPLAINER_WORKSHOP_BUDGET", "10")))
    except ValueError:
        return 10.0
