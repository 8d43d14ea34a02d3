"""The room board in Debian's Chromium (Playwright) against a real server on loopback: 30 seats posted at once
through the product's own client, the board shows the summary and one row per seat, a new report appears live
(no reload), symbols and words beside the colours, nothing loaded from outside, a restart keeps the board."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from labserver import CHROMIUM, chromium_page
from roomserver import ONE_MACHINE_ROOM, SIMULATED, expected_summary, fill_room, room_server

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed")]


def _card(page, exercise: str) -> str:
    return page.locator(f'article.ex[data-exercise="{exercise}"]').inner_text()


def test_the_board_shows_the_room_and_updates_live(tmp_path, monkeypatch):
    db = tmp_path / "room.sqlite3"
    expected = expected_summary()
    with room_server(db, *ONE_MACHINE_ROOM) as board, chromium_page() as page:
        outside, errors = [], []
        page.on("request", lambda r: None if r.url.startswith("http://127.0.0.1") else outside.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        fill_room(board, tmp_path)
        assert board.summary() == expected
        page.goto(board.url)
        page.wait_for_function("() => document.body.dataset.seq !== '-1'", timeout=20_000)
        assert page.locator("tbody tr").count() == 30
        accept = expected["exercises"]["accept"]
        text = _card(page, "accept")
        assert f"✓ {accept['passed']} passed" in text and f"✗ {accept['tried'] - accept['passed']} not yet" in text
        assert f"– {30 - accept['tried']} not started" in text and "9 seats: distinct values" in text
        assert "4 seats: two nodes: delivers" in _card(page, "tensor-dict-gate")
        row = page.locator('tr[data-seat="seat-15"]')
        assert row.locator('td[data-exercise="accept"]').inner_text().startswith("✗ distinct values")
        assert row.locator('td[data-exercise="tensor-dict-gate"]').inner_text() == "– not started"
        assert page.locator('td[data-state="pass"]').first.inner_text().startswith("✓ passed")
        assert "● live" in page.locator("#status").inner_text()

        seq = int(page.evaluate("() => document.body.dataset.seq"))          # a learner fixes the gate: live
        monkeypatch.setenv("EXPLAINER_ROOM", board.url)
        from explainer.workshop import catalog
        from explainer.workshop.report import Check, verdict
        catalog.report_verdict(verdict("tensor-dict-gate", [Check("two nodes: delivers", True, "ok")]),
                                seat="seat-22", wait=True)
        page.wait_for_function(f"() => Number(document.body.dataset.seq) > {seq}", timeout=10_000)
        cell = page.locator('tr[data-seat="seat-22"] td[data-exercise="tensor-dict-gate"]')
        assert cell.inner_text().startswith("✓ passed") and cell.get_attribute("data-state") == "pass"
        assert "3 seats: two nodes: delivers" in _card(page, "tensor-dict-gate")
        shot = os.environ.get("EXPLAINER_ROOM_SHOT")
        if shot:
            page.screenshot(path=shot, full_page=True)
        assert not outside and not errors, (outside, errors)

        assert page.goto(board.url.replace("token=", "token=wrong")).status == 403
        assert page.goto(board.base + "/").status == 401

    with room_server(db, *ONE_MACHINE_ROOM) as again, chromium_page() as page:         # a restart keeps the board
        page.goto(again.url)
        page.wait_for_function("() => document.body.dataset.seq !== '-1'", timeout=20_000)
        assert page.locator("tbody tr").count() == 30
        assert int(page.evaluate("() => document.body.dataset.seq")) == sum(len(p) for p in SIMULATED.values()) + 4 + 1
        assert re.search(r"3 seats: two nodes: delivers", _card(page, "tensor-dict-gate"))
