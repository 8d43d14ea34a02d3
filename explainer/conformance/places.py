"""Where a quoted text sits in one of vLLM's files: every occurrence, layout ignored, each with its context.

A quote matches with layout ignored (``normalize``): adjacent string literals are joined, runs of whitespace are one
space, no space after ``(`` or before ``)``, no trailing comma before ``)``. ``places`` lists every occurrence of a
text in a file as a ``Place``: its first and last line and its context, the innermost function or class around its
first line (``GroupCoordinator.irecv_tensor_dict``; ``""`` at module level), read with ``ast``. A pin is a text and
its context: the same text in another function is another place, and a text that occurs twice in one context
identifies no place (``identify``).
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

# (pattern, replacement), in order; the replacement of a match stands at the match's start, ")" at its end
STEPS = ((re.compile(r"\s+"), " "), (re.compile(r'" f?"'), ""), (re.compile(r"\(\s+"), "("),
         (re.compile(r",?\s+\)"), ")"))


@dataclass(frozen=True)
class Place:
    first: int                  # 1-based lines of the file
    last: int
    context: str                # "Class.method", "function", "" (module level)

    def lines(self) -> str:
        return f"{self.first}" + (f"-{self.last}" if self.last != self.first else "")


def normalize(text: str) -> str:
    return normalize_mapped(text)[0]


def normalize_mapped(text: str) -> tuple[str, list[int]]:
    """The normalized text and, for each of its characters, the offset in ``text`` it came from."""
    chars, offsets = text, list(range(len(text)))
    for pattern, repl in STEPS:
        out, out_offsets, last = [], [], 0
        for m in pattern.finditer(chars):
            out.append(chars[last:m.start()])
            out_offsets.extend(offsets[last:m.start()])
            out.append(repl)
            out_offsets.extend([offsets[m.end() - 1 if repl == ")" else m.start()]] * len(repl))
            last = m.end()
        out.append(chars[last:])
        out_offsets.extend(offsets[last:])
        chars, offsets = "".join(out), out_offsets
    start = len(chars) - len(chars.lstrip())
    end = len(chars.rstrip())
    return chars[start:end], offsets[start:end]


@dataclass(frozen=True)
class Scope:
    first: int
    last: int
    name: str


def scopes(source: str) -> list[Scope] | None:
    """Every function and class of a Python file with its lines, outermost first; None if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    out: list[Scope] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append(Scope(first, child.end_lineno or child.lineno, name))
                walk(child, name)
            else:
                walk(child, prefix)
    walk(tree, "")
    return out


def context_at(found: list[Scope] | None, line: int) -> str:
    """The innermost function or class holding ``line`` (``""`` at module level or when the file does not parse)."""
    inside = [s for s in found or [] if s.first <= line <= s.last]
    return max(inside, key=lambda s: s.first).name if inside else ""


class File:
    """One source file, normalized once, for any number of look-ups."""

    def __init__(self, text: str, python: bool = True):
        self.text = text
        self.norm, self.offsets = normalize_mapped(text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.scopes = scopes(text) if python else None

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def places(self, text: str) -> list[Place]:
        """Every occurrence of ``text`` (layout ignored), in file order."""
        want, out, at = normalize(text), [], -1
        if not want:
            return []
        while (at := self.norm.find(want, at + 1)) >= 0:
            first = self.line_of(self.offsets[at])
            out.append(Place(first, self.line_of(self.offsets[at + len(want) - 1]), context_at(self.scopes, first)))
        return out


def identify(found: list[Place], first: int, last: int) -> tuple[Place | None, str | None]:
    """The one place of a text within lines ``first``-``last`` and its context, or why the text identifies none:
    not within those lines, twice within them, or its context holds it more than once."""
    inside = [p for p in found if first <= p.first and p.last <= last]
    if not inside:
        return None, "not within its lines"
    if len(inside) > 1:
        return None, f"too common: {len(inside)} times within its lines"
    place = inside[0]
    twins = [p for p in found if p.context == place.context]
    if len(twins) > 1:
        where = f"in {place.context}" if place.context else "at module level"
        return None, (f"too common: {len(twins)} times {where} (lines {', '.join(p.lines() for p in twins)}), so it "
                      f"identifies no place: quote more of the line")
    return place, None
