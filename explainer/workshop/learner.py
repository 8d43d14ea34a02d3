"""The learner's code: read from a file or taken from a notebook function, checked statically in the
caller, executed only in a process the check starts (``child.py``).

A function defined in a notebook cell travels as source (``inspect.getsource``) together with what it
uses from the notebook's globals: modules become ``import`` lines, plain constants their ``repr``, other
notebook functions their own source. Anything else is an error that says to define it inside the function.
"""

from __future__ import annotations

import ast
import dis
import importlib
import inspect
import linecache
import os
import signal
import sys
import textwrap
import traceback
import types
from dataclasses import asdict, dataclass
from pathlib import Path

from explainer.workshop.report import LearnerError


CONSTANTS = (bool, int, float, str, bytes, type(None))


class LearnerTimeout(Exception):
    """The learner's code did not return within its budget (a fail, not bad input)."""


@dataclass
class LearnerCode:
    source: str
    filename: str        # as the learner knows it: the file's name, or "<cell: NAME>"
    function: str        # the function the exercise calls
    origin: str          # shown in reports: the path, or "function NAME"
    directory: str = ""  # a file's folder (its sibling modules may be imported)

    def to_json(self) -> dict:
        return asdict(self)


def from_file(path: str | os.PathLike, function: str) -> LearnerCode:
    p = Path(path)
    if not p.is_file():
        raise LearnerError("missing-file", f"no such file: {str(path)!r} (give a .py file that defines "
                                           f"{function}, or a folder of them)")
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LearnerError("missing-file", f"cannot read {str(path)!r}: {exc}") from None
    code = LearnerCode(source, p.name, function, str(path), str(p.resolve().parent))
    static_check(code)
    return code


def from_function(fn, function: str) -> LearnerCode:
    """A function object (e.g. defined in a notebook cell) -> its source plus what it uses."""
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


def _literal(v) -> bool:
    """A value its ``repr`` rebuilds: numbers, strings, and lists/tuples/sets/dicts of them."""
    if isinstance(v, CONSTANTS):
        return True
    if isinstance(v, (list, tuple, set, frozenset, dict)):
        try:
            return ast.literal_eval(repr(v)) == v if v else True
        except (ValueError, SyntaxError, RecursionError):
            return False
    return False


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
    for name in sorted(_global_loads(fn.__code__)):
        if name not in g:
            continue                                              # a builtin (or undefined: fails when run)
        v = g[name]
        if isinstance(v, types.ModuleType):
            parts[f"import {name}"] = (f"import {v.__name__}" if v.__name__ == name
                                       else f"import {v.__name__} as {name}")
        elif _literal(v):
            parts[f"const {name}"] = f"{name} = {v!r}"
        elif isinstance(v, types.FunctionType) and v.__module__ == fn.__module__:
            _bundle(v, parts, seen)
        elif _importable(v, fn.__module__):
            parts[f"import {name}"] = (f"from {v.__module__} import {v.__name__}"
                                       + ("" if v.__name__ == name else f" as {name}"))
        else:
            raise LearnerError("missing-function", f"{fn.__name__} uses {name!r} ({type(v).__name__}) from "
                                                   f"elsewhere in the notebook; define it inside the function")
    parts[f"def {fn.__name__}"] = src


def static_check(code: LearnerCode) -> None:
    """Before any work: the source compiles and defines ``code.function`` at top level."""
    try:
        tree = ast.parse(code.source, code.filename)
    except SyntaxError as exc:
        where = f"{code.filename} line {exc.lineno}" + (f": {exc.text.strip()}" if exc.text else "")
        raise LearnerError("syntax-error", f"syntax error in {where} ({exc.msg})") from None
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if code.function not in names:
        defined = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
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


def load(code: LearnerCode):
    """Execute the learner's module in this process and return its function (child side only)."""
    module = types.ModuleType("learner_solution")
    module.__file__ = code.filename
    linecache.cache[code.filename] = (len(code.source), None, code.source.splitlines(True), code.filename)
    if code.directory:
        if code.directory not in sys.path:
            sys.path.append(code.directory)
    try:
        with time_limit(budget(), f"running the top level of {code.filename}"):
            exec(compile(code.source, code.filename, "exec"), module.__dict__)
    except LearnerTimeout:
        raise
    except BaseException as exc:                          # noqa: BLE001 - anything the learner's code raised
        raise LearnerError("exception", f"running {code.filename} raised {describe(exc, code.filename)}") from None
    fn = module.__dict__.get(code.function)
    if not callable(fn):
        raise LearnerError("missing-function", f"{code.origin}: {code.function} is a "
                                               f"{type(fn).__name__}, not a function")
    return fn


def budget() -> float:
    """Seconds the learner's code may take per call (``EXPLAINER_WORKSHOP_BUDGET``, default 10)."""
    try:
        return max(0.5, float(os.environ.get("EXPLAINER_WORKSHOP_BUDGET", "10")))
    except ValueError:
        return 10.0


class time_limit:
    """SIGALRM after ``seconds`` raises ``LearnerTimeout`` in the main thread (pure-Python hangs); the parent's
    watchdog ends the process for anything SIGALRM cannot interrupt."""

    def __init__(self, seconds: float, what: str):
        self.seconds, self.what = seconds, what

    def _fire(self, signum, frame):
        raise LearnerTimeout(f"{self.what} did not return within {self.seconds:g} s (an endless loop or a wait?)")

    def __enter__(self):
        self.prev = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.prev)
        return False


def call(fn, *args, filename: str, what: str):
    """Call the learner's function under the time limit; its exceptions become ``LearnerError`` (exit 2)."""
    try:
        with time_limit(budget(), what):
            return fn(*args)
    except LearnerTimeout:
        raise
    except BaseException as exc:                          # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise LearnerError("exception", f"{what} raised {describe(exc, filename)}") from None
