"""The pin checker: every ``FILE:LINES TEXT`` pin the product shows, looked up within its lines in the installed vLLM.

A pin is one code span holding a file, a line or a range, and the short text (a symbol, a phrase of code) the
lines hold, e.g. ``config/model.py:1560-1562 Pipeline parallelism is not supported``. The file is vLLM 0.32.0's,
relative to its package folder (``vllm/`` in front is allowed; a unique tail such as ``cpu_communicator.py`` is
enough), or this repository's (``explainer/...``). ``check`` reads every place the product shows pins (``PLACES``:
SOURCES.md, the docs, the notebooks, the package's docstrings and comments) and, for each pin, looks for its text
with layout ignored (``drift.normalize``) inside the cited lines. A pin fails when its file is missing or ambiguous,
when a span names a file and line but no text, or when the text is not inside the lines: then the failure says
where the text is now (its line range in the installed file), so the next vLLM release says what to update. A pin
also fails when its range holds more than ``MAX_SLACK`` lines beyond its text's: the text would be found, but the
range would cover far more than the claim is about (a whole function for one condition inside it).
A line reference outside a pin (a file name, a colon and a line number loose in prose, or a colon and a number
alone in a code span) fails too: it would escape the check. Reads files only: runs in this venv, not in vLLM's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from explainer import vllm_env
from explainer.conformance.drift import normalize, vllm_root
from explainer.conformance.rows import Row

PIN = re.compile(r"(?P<q>`{1,2})(?P<file>(?:[\w.-]+/)*[\w.-]+\.(?:py|cpp|h)):(?P<a>\d+)(?:-(?P<b>\d+))?"
                 r"(?: (?P<text>[^`]+?))?(?P=q)")
LOOSE = re.compile(r"(?<![\w/.-])(?:[\w.-]+/)*[\w-]+\.(?:py|cpp|h):\d+|`:\d+(?:-\d+)?`")
OWN = ("explainer/", "tests/", "scripts/")    # pins into this repository, checked against its own files
MAX_SLACK = 40    # lines a pin's range may hold beyond its text's: a longer range hides what the claim is about
PLACES = ("SOURCES.md", "README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "docs/*.md", "notebooks/*.md", "notebooks/*.ipynb",
          "notebooks/workshop/*.ipynb", "explainer/**/*.py", "scripts/*")


@dataclass(frozen=True)
class Pin:
    where: str                  # the product file and line that shows the pin
    file: str
    first: int
    last: int
    text: str | None


def texts_of(path: Path) -> list[tuple[str, str]]:
    """(label, text) of each part of a product file a reader sees: a notebook's cells, any other file whole."""
    if path.suffix != ".ipynb":
        return [("", path.read_text(errors="replace"))]
    cells = json.loads(path.read_text())["cells"]
    return [(f" cell {i}", "".join(c["source"])) for i, c in enumerate(cells)]


def scan(root: Path) -> tuple[list[Pin], list[str]]:
    """Every pin in the product, and every line reference that is not one (``where: what``)."""
    pins, loose = [], []
    files = sorted({p for pattern in PLACES for p in root.glob(pattern) if p.is_file()})
    for path in files:
        for label, text in texts_of(path):
            for line_no, line in enumerate(text.splitlines(), 1):
                where = f"{path.relative_to(root)}{label}:{line_no}"
                for m in PIN.finditer(line):
                    first = int(m["a"])
                    pins.append(Pin(where, m["file"], first, int(m["b"] or first), m["text"]))
                rest = PIN.sub("", line)
                loose += [f"{where}: {m.group(0)!r} is not a pin (`FILE:LINES TEXT`)" for m in LOOSE.finditer(rest)]
    return pins, loose


def resolve(pin: Pin, vllm: Path | None, repo: Path) -> tuple[Path | None, str | None]:
    """The file a pin names, or why not (missing, ambiguous, no vLLM here)."""
    if pin.file.startswith(OWN):
        path = repo / pin.file
        return (path, None) if path.is_file() else (None, f"no such file in this repository: {pin.file}")
    if vllm is None:
        return None, "not checked: " + (vllm_env.missing_reason() or "no vllm package in the vLLM environment")
    rel = pin.file.removeprefix("vllm/")
    if (vllm / rel).is_file():
        return vllm / rel, None
    found = [p for p in vllm.rglob(Path(rel).name) if p.as_posix().endswith("/" + rel)]
    if len(found) == 1:
        return found[0], None
    return None, (f"{pin.file}: " + ("no such file in the installed vLLM" if not found else
                                      f"ambiguous, {len(found)} files end so: give more of the path"))


def span_of(text: str, lines: list[str]) -> tuple[int, int] | None:
    """The first and last line (1-based) of the first place ``text`` appears, layout ignored; None if nowhere.
    Containment grows with the prefix and shrinks with the start, so both ends are found by bisection."""
    want = normalize(text)

    def holds(a: int, b: int) -> bool:
        return want in normalize("\n".join(lines[a:b]))
    if not holds(0, len(lines)):
        return None
    lo, hi = 1, len(lines)                       # the shortest prefix that holds it ends the first occurrence
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(0, mid) else (mid + 1, hi)
    end, lo, hi = lo, 0, lo - 1                  # the latest start that still holds it begins that occurrence
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if holds(mid, end) else (lo, mid - 1)
    return lo + 1, end


def check_pin(pin: Pin, vllm: Path | None, repo: Path) -> str | None:
    """None when the pin's text is within its lines; else the failure, naming the file, the range and where now."""
    cited = f"{pin.file}:{pin.first}" + (f"-{pin.last}" if pin.last != pin.first else "")
    if not pin.text:
        return f"{pin.where}: `{cited}` has no text: write `{cited} <the symbol or code it points at>`"
    path, why = resolve(pin, vllm, repo)
    if path is None:
        return f"{pin.where}: `{cited}`: {why}"
    lines = path.read_text(errors="replace").splitlines()
    if normalize(pin.text) in normalize("\n".join(lines[pin.first - 1:pin.last])):
        a, b = span_of(pin.text, lines[pin.first - 1:pin.last])
        if pin.last - pin.first - (b - a) > MAX_SLACK:
            return (f"{pin.where}: `{cited}` spans {pin.last - pin.first + 1} lines for a text of {b - a + 1}: "
                    f"narrow it to the lines the claim is about (at most {MAX_SLACK} more than the text's)")
        return None
    now = span_of(pin.text, lines)
    at = "nowhere in the file" if now is None else f"now at {now[0]}" + (f"-{now[1]}" if now[1] != now[0] else "")
    return f"{pin.where}: `{cited}`: {pin.text!r} is not within lines {pin.first}-{pin.last}; {at}"


def check(repo: Path | None = None, vllm: Path | None = None) -> dict:
    """Every pin of the product checked: ``{"pins", "checked", "failures", "vllm"}``."""
    repo = repo or vllm_env.package_root()
    if repo is None:
        return {"pins": 0, "checked": 0, "failures": ["not checked: the product's files (SOURCES.md, notebooks) are "
                                                      "in a checkout, and this package is installed"], "vllm": None}
    vllm = vllm if vllm is not None else vllm_root()
    pins, loose = scan(repo)
    failures = [f for f in (check_pin(p, vllm, repo) for p in pins) if f] + loose
    return {"pins": len(pins), "checked": len(pins) - sum("not checked:" in f for f in failures),
            "failures": failures, "vllm": str(vllm) if vllm else None}


def rows() -> list[Row]:
    """One conformance row: every pin found within its lines (the failures listed)."""
    result = check()
    return [Row("source: every file:line pin the product shows", {"pins": result["pins"], "failures": []},
                {"pins": result["checked"], "failures": result["failures"]}, not result["failures"] and
                result["checked"] == result["pins"], "explainer.conformance.pins: SOURCES.md, docs, notebooks and the "
                "package's docstrings, each pin's text looked up within its cited lines", ["pins", "failures"])]
