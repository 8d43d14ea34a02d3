"""What the instructor sees is only what the grader says: learner text made inert before it is shown.

A learner controls a file's name, what its code prints and the messages of its exceptions. Before any of
it reaches a terminal, a table, a notebook panel, the JSON or the CSV gradebook it goes through ``inert``:

* every character that is not printable (control characters such as ESC, which starts a terminal escape
  sequence, CR, BEL, the C1 controls, bidirectional overrides such as U+202E that reorder a line, zero-width
  and other format characters, line and paragraph separators) is written as its escape, ``\\x1b``,
  ``\\u202e``, so it is visible and does nothing;
* a byte of a file name that is not UTF-8 (Python keeps it as a lone surrogate) is written ``\\xe9``;
* a newline is ``\\n`` unless the text is shown as lines (``newlines=True``: the learner's printed output,
  each line then prefixed by the caller).

``csv_cell`` also applies OWASP's CSV-injection rule: a cell that starts with ``=``, ``+``, ``-``, ``@``,
a tab or a carriage return is prefixed with a single quote, so a spreadsheet shows it as text instead of
running it as a formula (``=HYPERLINK(...)``).
"""

from __future__ import annotations

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:                    # a non-UTF-8 byte kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def inert(text, newlines: bool = False) -> str:
    """``text`` with every non-printable character written as its escape (see the module's docstring)."""
    text = str(text)
    if text.isprintable():
        return text
    if newlines:
        return "\n".join(inert(line) for line in text.split("\n"))
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def inert_data(value):
    """JSON-like data with every string (keys too) inert."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {inert(k) if isinstance(k, str) else k: inert_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert_data(v) for v in value]
    return value


def csv_cell(value) -> str:
    """One gradebook cell: inert, and never a formula (OWASP: a leading = + - @ tab or CR gets a quote)."""
    text = inert(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def clip(text: str, width: int) -> str:
    """At most ``width`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= width else text[:width - 1] + "…"
