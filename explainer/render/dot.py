"""Writing graphviz DOT source by hand: one quoting rule for every renderer."""

from __future__ import annotations

__all__ = ["quote"]


def quote(s, newline: str = "\\n") -> str:
    """``s`` as a DOT string: backslashes and quotes escaped, each line break spelled ``newline`` (``\\n``
    centres the next line, ``\\l`` left-justifies the one before it)."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", newline) + '"'
