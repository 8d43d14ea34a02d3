"""The pin checker: every ``RELEASE FILE:LINES TEXT`` pin the product shows, found within its lines of that release.

A pin is one code span holding a vLLM release, a file, a line or a range, and the short text (a symbol, a phrase of
code) the lines hold, e.g. ``0.32.0 config/model.py:1560-1562 Pipeline parallelism is not supported``. The release
is one of ``explainer.vllm_release.RELEASES``; the file is relative to that release's ``vllm/`` package folder
(``vllm/`` in front is allowed; a unique tail such as ``cpu_communicator.py`` is enough). A pin into this repository
(``explainer/...``, ``tests/...``, ``scripts/...``) names no release. ``check`` reads every place the product shows
pins (``PLACES``: SOURCES.md, the docs, the notebooks, the package's docstrings and comments) and looks each pin up
in its release's source (``vllm_source``: the vLLM environment's package or the release's wheel), layout ignored.

A pin fails when it names no release, when its file is missing or ambiguous, when a span names a file and line but
no text, when the text is not within the cited lines (the failure lists every place it is, with its context), or
when the text identifies no place: it occurs twice within the lines, or twice in its context, the function or class
around it (``places.identify``; ``handle.wait()`` alone is such a text). A pin also fails when its range holds more
than ``MAX_SLACK`` lines beyond its text's. A line reference outside a pin (a file name, a colon and a line number
loose in prose, or a colon and a number alone in a code span) fails too: it would escape the check.
Reads files only: runs in this venv, not in vLLM's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from explainer import vllm_env, vllm_release
from explainer.conformance import vllm_source
from explainer.conformance.places import File, Place, identify
from explainer.conformance.rows import Row, skipped
from explainer.errors import UsageError

PIN = re.compile(r"(?P<q>`{1,2})(?:(?P<release>\d+\.\d+\.\d+) )?(?P<file>(?:[\w.-]+/)*[\w.-]+\.(?:py|cpp|h))"
                 r":(?P<a>\d+)(?:-(?P<b>\d+))?(?: (?P<text>[^`]+?))?(?P=q)")
LOOSE = re.compile(r"(?<![\w/.-])(?:[\w.-]+/)*[\w-]+\.(?:py|cpp|h):\d+|`:\d+(?:-\d+)?`")
OWN = ("explainer/", "tests/", "scripts/")    # pins into this repository, checked against its own files
MAX_SLACK = 40    # lines a pin's range may hold beyond its text's: a longer range hides what the claim is about
PLACES = ("SOURCES.md", "README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "docs/*.md", "notebooks/*.md", "notebooks/*.ipynb",
          "notebooks/workshop/*.ipynb", "explainer/**/*.py", "scripts/*")


@dataclass(frozen=True)
class Pin:
    where: str                  # the product file and line that shows the pin
    release: str | None         # the vLLM release it names (None: a pin into this repository)
    file: str
    first: int
    last: int
    text: str | None

    def cited(self) -> str:
        lines = f"{self.first}" + (f"-{self.last}" if self.last != self.first else "")
        return f"{self.release + ' ' if self.release else ''}{self.file}:{lines}"

    def key(self) -> tuple:
        return self.release, self.file, self.first, self.last, self.text


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
                    pins.append(Pin(where, m["release"], m["file"], first, int(m["b"] or first), m["text"]))
                rest = PIN.sub("", line)
                loose += [f"{where}: {m.group(0)!r} is not a pin (`RELEASE FILE:LINES TEXT`)"
                          for m in LOOSE.finditer(rest)]
    return pins, loose


def resolve(src: vllm_source.Source, name: str) -> tuple[str | None, str | None]:
    """The file of ``src`` a pin names, or why not (missing, ambiguous)."""
    found = src.find(name)
    if len(found) == 1:
        return found[0], None
    return None, (f"no such file in vLLM {src.release}" if not found else
                  f"ambiguous in vLLM {src.release}, {len(found)} files end so: give more of the path")


def home(pin: Pin, src: vllm_source.Source) -> tuple[str | None, Place | None, str | None]:
    """A vLLM pin's file and place in its own release, or why it identifies none."""
    rel, why = resolve(src, pin.file)
    if rel is None:
        return None, None, why
    found = src.file(rel).places(pin.text or "")
    place, why = identify(found, pin.first, pin.last)
    if place is None and why == "not within its lines":
        at = "; ".join(f"{p.lines()}" + (f" ({p.context})" if p.context else "") for p in found[:4])
        why = f"{pin.text!r} is not within lines {pin.first}-{pin.last}; " + (f"it is at {at}" if at else
                                                                             "nowhere in the file")
    return rel, place, why


def slack(pin: Pin, place: Place) -> str | None:
    if pin.last - pin.first - (place.last - place.first) > MAX_SLACK:
        return (f"spans {pin.last - pin.first + 1} lines for a text of {place.last - place.first + 1}: narrow it to "
                f"the lines the claim is about (at most {MAX_SLACK} more than the text's)")
    return None


def check_own(pin: Pin, repo: Path) -> str | None:
    path = repo / pin.file
    if not path.is_file():
        return f"no such file in this repository: {pin.file}"
    found = File(path.read_text(errors="replace"), python=path.suffix == ".py").places(pin.text or "")
    inside = [p for p in found if pin.first <= p.first and p.last <= pin.last]
    if not inside:
        at = ", ".join(p.lines() for p in found[:4]) or "nowhere in the file"
        return f"{pin.text!r} is not within lines {pin.first}-{pin.last}; it is at {at}"
    return slack(pin, inside[0])


def check_pin(pin: Pin, sources: dict[str, vllm_source.Source], repo: Path) -> str | None:
    """None when the pin holds in its release; else the failure, naming the pin and what is wrong."""
    head = f"{pin.where}: `{pin.cited()}`"
    if not pin.text:
        return f"{head} has no text: write `{pin.cited()} <the symbol or code it points at>`"
    if pin.file.startswith(OWN):
        why = None if pin.release is None else "a pin into this repository names no vLLM release"
        why = why or check_own(pin, repo)
        return f"{head}: {why}" if why else None
    if pin.release not in vllm_release.RELEASES:
        return (f"{head}: name the vLLM release it was read in: `{vllm_release.RUNS} {pin.file}:...`" if not pin.release
                else f"{head}: {pin.release} is not a release the package is read against "
                     f"({', '.join(vllm_release.RELEASES)})")
    _, place, why = home(pin, sources[pin.release])
    why = why or slack(pin, place)
    return f"{head}: {why}" if why else None


def load_sources(releases: set[str], progress=None) -> tuple[dict[str, vllm_source.Source], dict[str, str]]:
    """Each release's source, or why it cannot be read here (no vLLM environment and no network, ...)."""
    sources, missing = {}, {}
    for release in sorted(releases):
        try:
            sources[release] = vllm_source.source(release, progress)
        except UsageError as exc:
            missing[release] = str(exc)
    return sources, missing


def check(repo: Path | None = None, sources: dict[str, vllm_source.Source] | None = None, progress=None) -> dict:
    """Every pin of the product checked in its release: ``{"pins", "checked", "failures", "not_checked",
    "sources"}`` (``not_checked``: release -> why its source cannot be read here; its pins are not counted)."""
    repo = repo or vllm_env.package_root()
    if repo is None:
        return {"pins": 0, "checked": 0, "failures": ["not checked: the product's files (SOURCES.md, notebooks) are "
                                                      "in a checkout, and this package is installed"],
                "not_checked": {}, "sources": {}}
    pins, loose = scan(repo)
    named = {p.release for p in pins if p.release in vllm_release.RELEASES and not p.file.startswith(OWN)}
    missing: dict[str, str] = {}
    opened = sources is None
    if opened:
        sources, missing = load_sources(named, progress)
    else:
        missing = {r: f"no source for vLLM {r}" for r in named if r not in sources}
    failures, checked = list(loose), 0
    try:
        for pin in pins:
            if pin.release in missing and not pin.file.startswith(OWN):
                continue
            checked += 1
            failure = check_pin(pin, sources, repo)
            if failure:
                failures.append(failure)
    finally:
        for src in sources.values() if opened else ():
            src.close()
    return {"pins": len(pins), "checked": checked, "failures": failures, "not_checked": missing,
            "sources": {r: s.where for r, s in sources.items()}}


def rows(progress=None) -> list[Row]:
    """One conformance row: every pin found within its lines of the release it names (the failures listed). Pins
    naming a release whose source cannot be read here (no wheel cached, no network) are said, not passed."""
    result = check(progress=progress)
    how = ("explainer.conformance.pins: SOURCES.md, docs, notebooks and the package's docstrings, each pin's text "
           "looked up within its cited lines of the release it names (" +
           "; ".join(f"{r}: {w}" for r, w in sorted(result["sources"].items())) + ")")
    runs_missing = result["not_checked"].get(vllm_release.RUNS)
    failures = result["failures"] + ([f"not checked: {runs_missing}"] if runs_missing else [])
    out = [Row("source: every file:line pin the product shows", {"pins": result["pins"], "failures": []},
               {"pins": result["checked"], "failures": failures}, not failures, how, ["pins", "failures"])]
    for release, why in sorted(result["not_checked"].items()):
        if release != vllm_release.RUNS:
            out.append(skipped(f"source: the pins naming vLLM {release}", f"not checked here: {why}"))
    return out
