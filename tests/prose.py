"""Sentence figures of the notebooks' teaching prose (median words per sentence, share over 25 words, longest),
and where each term and code name is first used and whether it is defined or linked there.

What counts as teaching prose: every markdown cell of a notebook, minus what a reader does not read as
sentences: fenced code, tables, headings, HTML `<details>` folds (answers, the "What was checked" note) and
HTML tags. Each paragraph and each list item ends a sentence, so a bullet without a full stop still counts
as one. Words are whitespace-separated tokens holding a letter or a digit (a lone `=` or `→` is not a word).

The term check reads the same teaching text, headings left out. A term is a word of the glossary
(notebooks/glossary.md, plurals and hyphen-for-space included) or a code name (a backticked identifier, dotted
name or file name). Its first use must be inside a link (a glossary link must name a word the glossary has)
or inside `<dfn>…</dfn>`, the HTML mark of the sentence that defines it. Names a reader who knows PyTorch
already knows are in KNOWN_NAMES.

    python tests/prose.py [NOTEBOOK ...]   # prints the figures per notebook (all notebooks by default)
    python tests/prose.py --terms [NOTEBOOK ...]   # prints each term's first use and how it is introduced
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(REPO.glob("notebooks/*.ipynb")) + sorted(REPO.glob("notebooks/workshop/*.ipynb"))

GOAL_MEDIAN = 16
GOAL_LONG = 25  # words; at most GOAL_LONG_SHARE of the sentences may be longer
GOAL_LONG_SHARE = 0.10
GOAL_MAX = 40

FOLD = re.compile(r"<details\b.*?</details>", re.S | re.I)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
TAG = re.compile(r"<[^>]+>")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # [text](target) reads as its text
# A sentence ends at . ! ? (optionally closed by ** or a quote or bracket) before whitespace.
END = re.compile(r"(?<=[.!?])[*_\"')\]]*\s+")
ABBREV = ("e.g.", "i.e.", "vs.", "etc.", "cf.", "approx.")
WORD = re.compile(r"[A-Za-z0-9]")


def teaching_text(markdown: str) -> list[str]:
    """The paragraphs and list items of one markdown cell a reader reads as sentences."""
    text = FENCE.sub("", FOLD.sub("", markdown))
    blocks: list[str] = []
    current: list[str] = []

    def close():
        if current:
            blocks.append(" ".join(current))
            current.clear()

    for raw in text.splitlines():
        line = re.sub(r"^(\s*>)+", "", raw).strip()  # a quoted box reads as prose
        if not line or line.startswith("#") or line.startswith("|"):
            close()
            continue
        item = re.match(r"^([*+-]|\d+[.)])\s+", line)
        if item:
            close()
            line = line[item.end():]
        current.append(line)
    close()
    return [LINK.sub(r"\1", TAG.sub("", b)) for b in blocks]


def sentences(block: str) -> list[str]:
    protected = block
    for i, abbr in enumerate(ABBREV):
        protected = protected.replace(abbr, f"\x00{i}\x00")
    out = []
    for part in END.split(protected):
        for i, abbr in enumerate(ABBREV):
            part = part.replace(f"\x00{i}\x00", abbr)
        if words(part):
            out.append(part.strip())
    return out


def words(sentence: str) -> int:
    return sum(1 for token in sentence.split() if WORD.search(token))


@dataclass
class Figures:
    name: str
    count: int
    median: float
    long_share: float
    longest: int
    longest_text: str

    def meets_goal(self) -> bool:
        return self.median <= GOAL_MEDIAN and self.long_share <= GOAL_LONG_SHARE and self.longest <= GOAL_MAX

    def line(self) -> str:
        return (f"{self.name}: {self.count} sentences, median {self.median:g} words, "
                f"{self.long_share:.0%} over {GOAL_LONG}, longest {self.longest}")


def notebook_sentences(path: Path) -> list[str]:
    cells = json.loads(Path(path).read_text())["cells"]
    found: list[str] = []
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for block in teaching_text("".join(cell["source"])):
                found.extend(sentences(block))
    return found


def figures(path: Path) -> Figures:
    found = notebook_sentences(path)
    lengths = [words(s) for s in found]
    longest = max(range(len(found)), key=lambda i: lengths[i]) if found else None
    return Figures(
        name=str(Path(path).relative_to(REPO)) if Path(path).is_relative_to(REPO) else Path(path).name,
        count=len(found),
        median=statistics.median(lengths) if lengths else 0,
        long_share=sum(n > GOAL_LONG for n in lengths) / len(lengths) if lengths else 0.0,
        longest=lengths[longest] if longest is not None else 0,
        longest_text=found[longest] if longest is not None else "",
    )


# ---- terms at their first use ----------------------------------------------------------------------------
GLOSSARY = REPO / "notebooks" / "glossary.md"
ANCHOR = re.compile(r'<a id="term-([^"]+)"></a>\s*\n\s*#+ ([^\n]+)')
ANY_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]*)\)")
GLOSSARY_TARGET = re.compile(r"^(?:\.\./)*glossary\.md#term-(.+)$")
DFN = re.compile(r"<dfn>(.*?)</dfn>", re.S)
CODE = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"^[A-Za-z_][\w.]*(\(\))?$")
# Names a reader who knows Python and PyTorch already knows: they need no definition.
KNOWN_NAMES = frozenset({
    "True", "False", "None", "bool", "int", "float", "dict", "list", "str", "print", "assert", "getattr",
    "hasattr", "torch", "torch.Generator", "torch.manual_seed", "torch.distributed", "torch.sort", "torch.cumsum",
    "multinomial", "argmax", "softmax", "rand", "int32", "int64", "float32", "fp32", "bfloat16", "nn.Module",
    "forward", "state_dict", "numpy", "pip", "pytest", "os", "sys", "json", "subprocess", "pickle",
    "AssertionError", "NotImplementedError", "ValueError", "RuntimeError", "AttributeError", "TypeError", "KeyError",
    "OSError", "TimeoutError", "Exception",
})


@dataclass
class FirstUse:
    term: str          # the glossary word or the code name
    kind: str          # "glossary" or "code"
    cell: int          # index of the markdown cell
    how: str           # "linked", "defined" or "" (neither: a failure)
    context: str       # the text around it

    def line(self) -> str:
        return (f"cell {self.cell}: {self.kind} {self.term!r} {self.how or 'NEITHER DEFINED NOR LINKED'}: "
                f"…{self.context}…")


def glossary_words() -> dict[str, str]:
    """anchor (after `term-`) -> the word, from the glossary's own anchors."""
    return {m.group(1): m.group(2).strip() for m in ANCHOR.finditer(GLOSSARY.read_text(encoding="utf-8"))}


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def term_text(markdown: str) -> tuple[str, list[tuple[int, int, str]]]:
    """A markdown cell as the term check reads it: folds, fenced code, headings, link targets and HTML tags
    blanked out (positions kept), and the regions where a term counts as introduced: (start, end, how), how
    being "linked", "linked:ANCHOR" for a glossary link, or "defined" for a <dfn>."""
    text = FENCE.sub(lambda m: " " * len(m.group(0)), FOLD.sub(lambda m: " " * len(m.group(0)), markdown))
    text = re.sub(r"^\s*#.*$", lambda m: " " * len(m.group(0)), text, flags=re.M)
    regions = []
    for m in ANY_LINK.finditer(text):
        target = GLOSSARY_TARGET.match(m.group(2))
        regions.append((m.start(1), m.end(1), f"linked:{target.group(1)}" if target else "linked"))
    for m in reversed(list(ANY_LINK.finditer(text))):
        text = _blank(text, m.end(1), m.end())              # "](target)": not words of the text
    for m in DFN.finditer(text):
        regions.append((m.start(1), m.end(1), "defined"))
    text = re.sub(r"<[^>]+>", lambda m: " " * len(m.group(0)), text)
    return text, regions


def _word_pattern(word: str) -> re.Pattern:
    parts = [re.escape(w) for w in re.split(r"[\s-]+", word)]
    return re.compile(r"(?<![\w-])" + r"[\s-]+".join(parts) + r"(?:s|es)?(?![\w-])", re.I)


def term_first_uses(path: Path) -> list[FirstUse]:
    """Every glossary word and code name of a notebook's teaching text at its first use, in reading order."""
    words = glossary_words()
    cells = [c for c in json.loads(Path(path).read_text())["cells"]]
    seen: dict[tuple[str, str], FirstUse] = {}

    def how_at(pos: int, regions) -> str:
        for start, end, how in regions:
            if start <= pos < end:
                if how.startswith("linked:"):
                    return "linked" if how[7:] in words else f"linked to a missing glossary word #term-{how[7:]}"
                return how
        return ""

    for k, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text, regions = term_text("".join(cell["source"]))
        found = []
        for anchor, word in words.items():
            m = _word_pattern(word).search(text)
            links = [start for start, _, how in regions if how == f"linked:{anchor}"]   # [Stop](…#term-stop-check)
            first = min(([m.start()] if m else []) + links) if (m or links) else None
            if first is not None and ("glossary", word.lower()) not in seen:
                found.append((first, "glossary", word))
        for m in CODE.finditer(text):
            name = m.group(1).strip()
            if NAME.match(name) and name not in KNOWN_NAMES and ("code", name) not in seen:
                found.append((m.start(), "code", name))
        for pos, kind, term in sorted(found):
            key = (kind, term.lower() if kind == "glossary" else term)
            if key not in seen:
                context = " ".join(text[max(0, pos - 60):pos + 60].split())
                seen[key] = FirstUse(term, kind, k, how_at(pos, regions), context)
        for start, end, how in regions:                     # a glossary link to a word it does not have
            if how.startswith("linked:") and how[7:] not in words:
                seen[("link", how)] = FirstUse(how[7:], "glossary link", k, "", "glossary.md has no such word")
    return list(seen.values())


def main(argv: list[str]) -> int:
    terms = "--terms" in argv
    paths = [Path(a).resolve() for a in argv if a != "--terms"] or NOTEBOOKS
    for path in paths:
        print(figures(path).line())
        if terms:
            for use in term_first_uses(path):
                print("  " + use.line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
