"""Rewrite notebooks in the stored form that JupyterLab leaves unchanged (``explainer.notebook_file.normalize``).

Usage: python scripts/normalize_notebooks.py [--check] notebooks/*.ipynb notebooks/workshop/*.ipynb
``scripts/execute_notebooks.py`` already writes this form; run this after re-executing any other way.
With --check nothing is written: exit 1 and one line per notebook that is not in that form.
"""

import sys
from pathlib import Path

import nbformat

from explainer.notebook_file import normalize


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"]
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    changed = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        new = nbformat.writes(nbformat.from_dict(normalize(nb)), version=nbformat.NO_CONVERT) + "\n"   # as nbformat.write
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    for path in changed:
        print(f"{path}: {'not in the stored form' if check else 'rewritten in the stored form'}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
