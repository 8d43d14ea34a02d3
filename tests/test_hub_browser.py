"""Five browsers on the hub (Playwright, Debian's Chromium): five learners sign in on the login form, each reaches
their own JupyterLab on the exercises notebook, writes the `accept` answer into its cell and runs the check until
it passes; the board (its page in the instructor's browser, and its API) lists the five under their names,
each passed.

Screenshots (test-artifacts/hub/): the login page, a learner's JupyterLab with the passing check, the board, at
1280 px wide, each also under a deuteranopia filter (Machado et al. 2009, full severity, on the whole page).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest

import hubroom
from labserver import CHROMIUM, CHROMIUM_ARGS, REPO
from explainer.workshop import catalog

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed")]

ARTIFACTS = REPO / "test-artifacts" / "hub"
LEARNERS = ["Ada", "Bongani", "Chen Wei", "Dolores", "Émile"]
WIDTH = 1280
DEUTERANOPIA = "0.367 0.861 -0.228 0 0  0.280 0.673 0.047 0 0  -0.012 0.043 0.969 0 0  0 0 0 1 0"
FILTER = f"""() => {{
  const ns = 'http://www.w3.org/2000/svg', svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', 0); svg.setAttribute('height', 0); svg.style.position = 'absolute';
  svg.innerHTML = '<filter id="xp-cvd" color-interpolation-filters="linearRGB"><feColorMatrix type="matrix" ' +
                  'values="{DEUTERANOPIA}"/></filter>';
  document.body.appendChild(svg); document.documentElement.style.filter = 'url(#xp-cvd)';
}}"""
UNFILTER = "() => { document.documentElement.style.filter = ''; }"


def shoot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}-w{WIDTH}.png"))
    page.evaluate(FILTER)
    page.screenshot(path=str(ARTIFACTS / f"{name}-w{WIDTH}-deuteranopia.png"))
    page.evaluate(UNFILTER)


@contextlib.contextmanager
def browser():
    """One Chromium; each learner gets a context of their own (their own cookies: a browser of their own)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def context(chromium):
    ctx = chromium.new_context(viewport={"width": WIDTH, "height": 860})
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith(
        ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")) else route.abort())
    return ctx


def sign_in(page, url: str, name: str, code: str) -> None:
    if "/hub/login" not in page.url:
        page.goto(url + "hub/login", timeout=60_000)
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", code)
    page.click("#login_submit")


def write_and_check(page, answer: str) -> None:
    """In the exercises notebook: the `accept` answer over its stub, then run start(), the answer and its check."""
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=300_000)
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=300_000)
    cells = page.locator(".jp-Notebook .jp-Cell")
    cells.nth(3).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(answer)
    cells.nth(1).locator(".cm-content").click()
    for _ in range(4):                          # start(), the heading, the answer, its check
        page.keyboard.press("Shift+Enter")


def test_five_browsers_sign_in_pass_a_check_and_show_on_the_board():
    hubroom.hub_or_skip()
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    answer = catalog.load_all()["accept"].EXAMPLES["solution"].source
    hub = hubroom.Hub()
    try:
        hub.start()
        with browser() as chromium:
            pages = []
            for i, name in enumerate(LEARNERS):                # five browsers arrive and sign in at once
                page = context(chromium).new_page()
                page.goto(hub.url + "hub/login", timeout=60_000)
                page.wait_for_selector("input[name=username]")
                if i == 0:
                    shoot(page, "login")
                sign_in(page, hub.url, name, hub.code)
                pages.append(page)
            for i, page in enumerate(pages):
                try:
                    write_and_check(page, answer)
                except Exception:
                    page.screenshot(path=str(ARTIFACTS / f"failed-learner{i}.png"))
                    raise
            statuses = []
            for i, page in enumerate(pages):
                verdict = page.locator('.xp-ws[data-exercise="accept"]')
                verdict.wait_for(timeout=240_000)
                statuses.append(verdict.get_attribute("data-status"))
                if i == 0:
                    verdict.scroll_into_view_if_needed()
                    shoot(page, "lab")
            assert statuses == ["pass"] * 5

            ctx = context(chromium)
            page = ctx.new_page()
            sign_in(page, hub.url, "instructor", hub.secret("instructor-code"))
            page.wait_for_url("**/hub/**", timeout=60_000)
            page.goto(hub.url + "services/board/", timeout=60_000)
            page.wait_for_selector("h1", timeout=60_000)      # the page itself draws the five, live through the hub
            page.wait_for_function("document.querySelectorAll('#seats-body td[data-state=pass]').length === 5",
                                   timeout=60_000)
            assert "token" not in page.locator("#status").inner_text()
            assert sorted(page.locator("#seats-body th").all_inner_texts()) == sorted(LEARNERS)
            shoot(page, "board")
            ctx.close()
        status, board = hub.api("/services/board/api/board")
        assert status == 200
        seats = {r["seat"]: r for r in board["seats"]}
        assert set(seats) == set(LEARNERS)
        assert all(r["cells"]["accept"]["passed"] is True for r in seats.values())
    finally:
        hub.close()
    assert not hub.accounts()
    with contextlib.suppress(FileNotFoundError):
        assert not list(Path(tempfile.gettempdir()).glob(f"explainer-hub-*/state/{hub.account_prefix}*"))
