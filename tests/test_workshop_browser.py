"""A learner in JupyterLab: open the exercise notebook, run the stub's check (it fails), write the solution
into the stub cell, run it and the check cell again, see the panel pass (Debian Chromium via Playwright)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labserver import CHROMIUM, REPO, TOKEN, chromium_page, jupyter_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed")]

NB = REPO / "notebooks" / "workshop" / "exercises.ipynb"
ARTIFACTS = REPO / "test-artifacts"
SOLUTION = '''import torch


def entropy_bound_accept(entropy, bound):
    sorted_h, order = torch.sort(entropy, dim=-1)
    keep = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.zeros_like(keep).scatter_(-1, order, keep)
'''


def _run(page, cell) -> None:
    cell.locator(".jp-InputArea").click()
    page.keyboard.press("Escape")                      # command mode on this cell
    page.keyboard.press("Control+Enter")               # run it, stay on it


def _panel(cell, status: str, timeout: float = 120_000):
    return cell.locator(f'.xp-ws[data-exercise="accept"][data-status="{status}"]').wait_for(timeout=timeout)


def test_learner_writes_the_solution_and_the_check_passes():
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab([NB]) as (base, work), chromium_page() as page:
        page.goto(f"{base}/lab/tree/{NB.name}?token={TOKEN}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=90_000)
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        setup = cells.filter(has_text="from explainer.workshop import check")
        stub = cells.filter(has_text="def entropy_bound_accept")
        check = cells.filter(has_text='check("accept", entropy_bound_accept)')
        stored = check.locator('.xp-ws[data-exercise="accept"]')
        assert stored.count() == 0 or not stored.first.is_visible(), "the stub's stored check is not folded"
        for cell in (setup, stub, check):              # the stub as stored: its check fails (running unfolds it)
            _run(page, cell)
        _panel(check, "fail")
        assert "✗ FAIL" in check.locator(".xp-ws").inner_text()

        stub.locator(".cm-content").click()            # the learner replaces the stub with the solution
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(SOLUTION)
        _run(page, stub)
        _run(page, check)
        _panel(check, "pass")
        text = check.locator(".xp-ws").inner_text()
        assert "✓ PASS" in text and "whole generation" in text and "FAIL" not in text
        check.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "workshop-accept-pass.png"))
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        assert errors == 0, "a cell wrote to stderr in the browser run"
