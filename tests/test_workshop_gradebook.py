"""A gradebook no hand-in can break, and what the instructor sees is only what the grader says.

Hostile hand-ins: notebooks whose JSON is valid but not shaped like a notebook, file names that are not UTF-8,
hold newlines, tabs, escape sequences, bidirectional overrides or spreadsheet formulas, and code whose
exception messages and prints carry terminal escape sequences. Every file ends as one row (graded or skipped
with its reason), the table, the JSON and the CSV name every file, and no learner byte reaches them live."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explainer.errors import UsageError
from explainer.workshop import grading, learner, panel
from explainer.workshop.report import Check, LearnerError, Report, verdict
from explainer.workshop.shown import csv_cell, inert

REPO = Path(__file__).resolve().parents[1]
WRONG = "def entropy_bound_accept(entropy, bound):\n    return entropy < 0\n"
ESC = "\x1b[2J\x1b[H\x1b[32mEVERYONE PASS\x1b[0m\rfake"
HOSTILE_NAMES = ["=HYPERLINK(\"http:evil\",\"x\").py", "@SUM(1+1).py", "+1.py", "-2.py", "fake\nalice.py  pass  0.1\nx.py",
                 "tab\there.py", "bidi\u202eyp.txt.py", "zero\u200bwidth.py", "esc\x1b[31mred.py", "csi\x9b31m.py"]


def _live(text: str) -> list[str]:
    """Characters a terminal or a spreadsheet would act on."""
    return [ch for ch in text if not ch.isprintable() and ch not in "\n"]


# ---- the escaping itself ------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, shown", [
    ("plain name.py", "plain name.py"), ("a\x1b[2Jb", "a\\x1b[2Jb"), ("l1\nl2\r", "l1\\nl2\\r"),
    ("rtl\u202eevil", "rtl\\u202eevil"), ("zw\u200bj", "zw\\u200bj"), ("c1\x9b", "c1\\x9b"), ("bell\x07", "bell\\x07"),
    (os.fsdecode(b"latin1-\xe9\xff.py"), "latin1-\\xe9\\xff.py"), ("ls\u2028ps\u2029", "ls\\u2028ps\\u2029"),
    ("émoji 🎉 ok", "émoji 🎉 ok")])
def test_inert_shows_every_non_printable_character_as_its_escape(raw, shown):
    assert inert(raw) == shown
    assert inert(inert(raw)) == shown                       # idempotent: shown twice is shown the same
    assert not _live(inert(raw))


@pytest.mark.parametrize("cell, out", [("=1+1", "'=1+1"), ("+1", "'+1"), ("-2", "'-2"), ("@SUM(A1)", "'@SUM(A1)"),
                                       ("\tx", "\\tx"), ("\r=1", "\\r=1"), ("fine", "fine"), ("a=b", "a=b")])
def test_a_csv_cell_is_never_a_formula(cell, out):
    assert csv_cell(cell) == out


# ---- malformed notebooks: an error with the reason, never a traceback ----------------------------------------
def _nb(**over) -> str:
    cell = {"cell_type": "code", "metadata": {"tags": ["exercise:accept"]}, "source": WRONG}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    for k, v in over.items():
        if k.startswith("cell_"):
            cell[k[5:]] = v
        else:
            nb[k] = v
    return json.dumps(nb)


@pytest.mark.parametrize("text", [
    _nb(cells=None), _nb(cells="x"), _nb(cells=[1, 2]), _nb(cell_metadata="x"), _nb(cell_source=[1, None]),
    _nb(cell_source={"a": 1}), "[1, 2, 3]", "null", "{", "[" * 100_000 + "]" * 100_000, json.dumps({"metadata": "x"})])
def test_a_malformed_notebook_is_not_a_notebook(text):
    with pytest.raises(LearnerError) as err:
        learner.notebook_cell(text, "accept", "hand-in.ipynb")
    assert err.value.kind == "not-a-notebook" and "is not a notebook" in str(err.value)


def test_a_well_formed_notebook_gives_its_tagged_cell():
    assert learner.notebook_cell(_nb(), "accept", "x.ipynb") == WRONG
    assert learner.notebook_cell(_nb(cell_source=WRONG.splitlines(True)), "accept", "x.ipynb") == WRONG


# ---- the gradebook: every file one row, whatever the name and the verdict's text --------------------------
def _hostile_folder(tmp_path: Path) -> Path:
    d = tmp_path / "handins"
    d.mkdir()
    for name in HOSTILE_NAMES:
        (d / name).write_text(WRONG)
    with open(os.path.join(os.fsencode(d), b"latin1-\xe9\xff.py"), "w") as f:
        f.write(WRONG)
    (d / "cells_null.ipynb").write_text(_nb(cells=None))
    (d / "notes.txt").write_text("not a submission")
    os.symlink("/etc/hostname", d / "link.py")
    os.mkfifo(d / "pipe.py")
    return d


def _fake_check(exercise_id: str, path: str) -> Report:
    """What a hostile submission can make a report say: its own text in the reason, a check's detail, the output."""
    name = os.path.basename(path)
    if name.startswith("crash"):
        raise RuntimeError("an internal failure \x1b[2J")
    try:
        code = learner.from_file(path, "entropy_bound_accept", exercise_id)
    except LearnerError as exc:                             # as check_file does
        return Report.error(exercise_id, exc.kind, str(exc), source=path)
    report = verdict(exercise_id, [Check("distinct values", False, f"your function returned {ESC}")])
    report.source, report.output = code.origin, ESC + "\nline 2\x1b[1A"
    return report


def test_every_entry_is_one_row_and_nothing_live_reaches_table_json_or_csv(tmp_path):
    folder = _hostile_folder(tmp_path)
    (folder / "crash.py").write_text(WRONG)
    rows = grading.grade(_fake_check, "accept", grading.survey(folder))
    entries = sorted(os.listdir(os.fsencode(folder)))
    assert len(rows) == len(entries) == len(HOSTILE_NAMES) + 6
    assert [r.name for r in rows] == [inert(os.fsdecode(e)) for e in entries]
    by_name = {r.name: r for r in rows}
    assert by_name["cells_null.ipynb"].skipped.endswith("is not a notebook (no list of cells)")
    assert "symlink" in by_name["link.py"].skipped and by_name["pipe.py"].skipped == "not a regular file"
    assert by_name["notes.txt"].skipped.startswith("not a .py or .ipynb file")
    assert by_name["crash.py"].report.status == "error" and "the grader failed on this file" in \
        by_name["crash.py"].report.reason

    text = grading.table(rows)
    lines = text.splitlines()
    assert len(lines) == len(rows) + 3 and not _live(text)            # header, rule, one line per entry, count
    assert lines[-1] == f"0/{len(HOSTILE_NAMES) + 2} passed, 4 skipped"
    assert "fake\\nalice.py  pass  0.1\\nx.py" in text and "\\x1b[2J" in text

    data = grading.summary_json("accept", rows)
    assert len(data["files"]) + len(data["skipped"]) == len(rows)
    shown = json.dumps(data, ensure_ascii=False)
    assert not _live(shown) and "\\udc" not in json.dumps(data)        # no lone surrogate, no live byte

    book = tmp_path / "book.csv"
    grading.write_csv(book, "accept", rows)
    raw = book.read_bytes().decode("utf-8")                            # always valid UTF-8
    with open(book, newline="", encoding="utf-8") as f:
        table_rows = list(csv.reader(f))
    assert len(table_rows) == len(rows) + 1
    cells = [c for r in table_rows for c in r]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@"))]
    assert "'=HYPERLINK(\"http:evil\",\"x\").py" in cells and not _live(raw.replace("\r\n", ""))
    assert {r[0] for r in table_rows[1:]} >= {"latin1-\\xe9\\xff.py", "bidi\\u202eyp.txt.py", "'+1.py"}


def test_the_terminal_report_and_the_panel_show_learner_text_inert():
    report = verdict("accept", [Check("distinct values", False, f"returned {ESC}")])
    report.source, report.output = f"hand{ESC}.py", f"{ESC}\nsecond line\u202e"
    text = report.text()
    assert not _live(text) and "  | \\x1b[2J" in text and "  | second line\\u202e" in text
    assert all(line.startswith("  | ") for line in text.split("printed during the check:\n")[1].splitlines()[:2])
    html = panel.panel_html(report)
    assert "\x1b" not in html and "\u202e" not in html and "\\x1b[2J" in html
    assert not _live(json.dumps(report.to_json(), ensure_ascii=False))


def test_an_unwritable_gradebook_is_one_line_naming_the_file(tmp_path):
    rows = [grading.Row("a.py", skipped="x")]
    with pytest.raises(UsageError) as err:
        grading.write_csv(tmp_path / "no" / "such" / "book.csv", "accept", rows)
    assert "cannot write the gradebook" in str(err.value) and "book.csv" in str(err.value)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_command_grades_a_hostile_folder_into_a_complete_gradebook(tmp_path):
    """The real command on hostile names and contents: exit 1, one row per entry, the CSV complete."""
    d = tmp_path / "handins"
    d.mkdir()
    (d / "escape_msg.py").write_text(f"def entropy_bound_accept(entropy, bound):\n    raise ValueError({ESC!r})\n")
    (d / "=cmd.py").write_text(WRONG)
    (d / "cells_null.ipynb").write_text(_nb(cells=None))
    (d / "meta_str.ipynb").write_text(_nb(metadata="x", cell_metadata="x"))
    with open(os.path.join(os.fsencode(d), b"latin1-\xe9.py"), "w") as f:
        f.write(WRONG)
    book = tmp_path / "book.csv"
    proc = subprocess.run([sys.executable, "-m", "explainer", "workshop", "check", "accept", str(d), "--csv",
                           str(book)], capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "EXPLAINER_WORKSHOP_BUDGET": "3"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not _live(proc.stdout) and not _live(proc.stderr)
    with open(book, newline="", encoding="utf-8") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"escape_msg.py", "'=cmd.py", "cells_null.ipynb", "meta_str.ipynb", "latin1-\\xe9.py"}
    assert rows["escape_msg.py"]["verdict"] == "error" and "\\x1b[2J" in rows["escape_msg.py"]["reason"]
    assert rows["cells_null.ipynb"]["verdict"] == rows["meta_str.ipynb"]["verdict"] == "skipped"
    assert rows["latin1-\\xe9.py"]["verdict"] == rows["'=cmd.py"]["verdict"] == "fail"
