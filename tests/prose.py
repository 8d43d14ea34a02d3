"""Sentence figures of the notebooks' teaching prose: median words per sentence, share over 25 words, longest.

What counts as teaching prose: every markdown cell of a notebook, minus what a reader does not read as
sentences: fenced code, tables, headings, HTML `<details>` folds (answers, the "What was checked" note) and
HTML tags. Each paragraph and each list item ends a sentence, so a bullet without a full stop still counts
as one. Words are whitespace-separated tokens holding a letter or a digit (a lone `=` or `→` is not a word).

    python tests/prose.py [NOTEBOOK ...]   # prints the figures per notebook (all notebooks by default)
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


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or NOTEBOOKS
    for path in paths:
        print(figures(path).line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
