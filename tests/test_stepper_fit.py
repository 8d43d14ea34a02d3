"""The steppers fit a laptop screen, on the docs site (built as `make docs` builds it), at 1280 × 800 and 700 × 800.

For every stepper of every notebook page, scrolled so that its controls sit under the theme's header (coming from
below, as a reader scrolling back up does, which is when the theme shows its floating buttons):
- after each "jump to" button, the controls, the frame's caption and every row the frame marks as what changed
  (`data-changed`: ≠ READ cells, ↻ renoised canvas, committed tokens, an error, the output text) are inside the
  viewport, and nothing of the page covers them;
- over all frames, the frame box keeps one height (the page does not jump while playing), and that height is the
  tallest frame's (no slack beyond it);
- the play control has no ■ (ipywidgets' stop rewinds to frame 1): ▶ plays and the same button (⏸) pauses.
The scenario frames of notebook 3 (buttons, no slider) keep one height whichever scenario is shown.
Screenshots of each jump go to test-artifacts/fit/.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from test_docs_site import CHROMIUM, JS, REPO, build_site

ARTIFACTS = REPO / "test-artifacts" / "fit"
SIZES = ((1280, 800), (700, 800))
PAGES = ("01_canvas_sampler", "02_pipeline_parallel", "03_cpu_communicator", "05_two_hosts")

pytestmark = [pytest.mark.slow, pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
              pytest.mark.skipif(not (JS / "dist" / "embed-amd.js").exists(), reason="html-manager not set up")]

# the stepper `k` of the page and what a reader sees of it now
STATE = """([k]) => {
  const root = document.querySelectorAll('.xp-stepper')[k];
  // what the reader sees: the window under the theme's header, or JupyterLab's notebook panel
  const panel = root.closest('.jp-WindowedPanel-outer');
  const header = document.querySelector('.bd-header-article');
  const top = panel ? panel.getBoundingClientRect().top : header ? Math.max(0, header.getBoundingClientRect().bottom) : 0;
  const bottom = panel ? panel.getBoundingClientRect().bottom : innerHeight;
  const shown = e => e.offsetParent !== null && getComputedStyle(e).visibility === 'visible';
  const box = root.querySelector('.xp-frames');
  const frame = [...box.firstElementChild.querySelectorAll('.widget-html-content')].find(shown);
  const what = e => { const r = e.getBoundingClientRect();
    const x = (r.left + Math.min(r.right, innerWidth)) / 2, y = (r.top + r.bottom) / 2;
    const at = y >= top && y < bottom ? document.elementFromPoint(x, y) : null;
    return {top: r.top, bottom: r.bottom, text: (e.innerText || e.textContent || '').trim().slice(0, 60),
            covered: at && !e.contains(at) && !at.contains(e) ? (at.id || String(at.className) || at.tagName) : ''}; };
  let content = 0;
  for (const c of frame.children) content = Math.max(content, c.getBoundingClientRect().bottom - frame.getBoundingClientRect().top);
  return {top, height: bottom, box: box.getBoundingClientRect().height, content,
          caption: what([...frame.querySelectorAll('.xp-caption')].find(shown)),
          controls: what(root.querySelector('.xp-controls')),
          changed: [...frame.querySelectorAll('[data-changed]')].filter(shown).map(what),
          stops: [...root.querySelectorAll('.widget-play button')].filter(shown).length,
          // anything of the page floating over the frame box (the theme's fixed buttons, pop-ups)
          over: [...document.querySelectorAll('body *')].filter(e => {
            const cs = getComputedStyle(e);
            if (cs.position !== 'fixed' || cs.display === 'none' || cs.visibility !== 'visible') return false;
            const r = e.getBoundingClientRect(), b = box.getBoundingClientRect();
            return r.width > 0 && r.height > 0 && r.left < b.right && r.right > b.left
                   && r.top < Math.min(b.bottom, bottom) && r.bottom > Math.max(b.top, top);
          }).map(e => e.id || String(e.className))};
}"""


def _place(page, k: int) -> None:
    """Scroll the stepper's top to the top of what the reader sees (under the theme's header, or the top of
    JupyterLab's notebook panel), arriving from below: a scroll up, which is when the theme shows its floating
    "Back to top" button."""
    page.evaluate("""([k]) => new Promise(done => {
      const root = document.querySelectorAll('.xp-stepper')[k];
      const panel = root.closest('.jp-WindowedPanel-outer');
      const scroller = panel || document.scrollingElement;
      const header = document.querySelector('.bd-header-article');
      const top = panel ? panel.getBoundingClientRect().top : header ? header.getBoundingClientRect().height : 0;
      scroller.scrollTo({top: scroller.scrollTop + root.getBoundingClientRect().top - top + 300, behavior: 'instant'});
      requestAnimationFrame(() => { scroller.scrollBy({top: -300, behavior: 'instant'}); requestAnimationFrame(done); });
    })""", [k])
    page.wait_for_timeout(150)


def jump_problems(page, k: int, where: str, shots: Path | None = None) -> list[str]:
    """Press each jump button of stepper ``k``; what the reader cannot see afterwards (empty: all fine)."""
    bad = []
    root = page.locator(".xp-stepper").nth(k)
    for button in root.locator(".xp-jump .widget-toggle-button >> visible=true").all():
        label = button.inner_text()
        _place(page, k)
        button.click()
        page.wait_for_timeout(300)
        s = page.evaluate(STATE, [k])
        at = f"{where}, stepper {k}, after '{label}'"
        if shots is not None:
            shot = shots / f"{where.replace(' ', '-')}-s{k}-{''.join(c for c in label if c.isalnum())}.png"
            page.screenshot(path=str(shot))
            at += f" ({shot.name})"
        if s["over"]:
            bad.append(f"{at}: page elements float over the frame: {s['over']}")
        if not s["changed"]:
            bad.append(f"{at}: the frame marks nothing as changed")
        for item in [s["controls"], s["caption"], *s["changed"]]:
            if not _inside(item, s):
                bad.append(f"{at}: {item['text']!r} at {round(item['top'])}..{round(item['bottom'])} "
                           f"(visible {round(s['top'])}..{round(s['height'])}), covered by {item['covered'] or '-'}")
    return bad


def _frame_no(page, k: int) -> int:
    return int(page.evaluate("""([k]) => +/frame (\\d+) of/.exec([...document.querySelectorAll('.xp-stepper')[k]
        .querySelectorAll('.xp-frames .xp-caption')].find(e => e.offsetParent !== null
        && getComputedStyle(e).visibility === 'visible').innerText)[1]""", [k]))


def _inside(item: dict, s: dict) -> bool:
    return item["top"] >= s["top"] - 1 and item["bottom"] <= s["height"] + 1 and not item["covered"]


@pytest.fixture(scope="module")
def site():
    out = Path(tempfile.mkdtemp(prefix="explainer-fit-"))
    try:
        done = build_site(REPO, out)
        assert done.returncode == 0, done.stderr[-3000:]
        yield out / "html"
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        br = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                args=["--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                                      "--disable-dev-shm-usage"])
        try:
            yield br
        finally:
            br.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", PAGES)
def test_every_jump_shows_the_controls_the_caption_and_what_changed(site, browser, name, size):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    try:
        ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file://", "data:", "blob:"))
                  else r.abort())
        page = ctx.new_page()
        page.goto((site / "notebooks" / f"{name}.html").as_uri())
        page.wait_for_load_state("networkidle")
        steppers = page.locator(".xp-stepper")
        if name != "03_cpu_communicator":
            steppers.first.wait_for(timeout=30_000)
        bad = []
        for k in range(steppers.count()):
            root = steppers.nth(k)
            handle = root.locator(".noUi-handle")
            last = int(float(handle.get_attribute("aria-valuemax")))
            _place(page, k)
            # every frame, one box height: the tallest frame's
            boxes, contents = set(), []
            for _ in range(last + 1):
                s = page.evaluate(STATE, [k])
                boxes.add(round(s["box"]))
                contents.append(s["content"])
                handle.press("ArrowRight")
            assert len(boxes) == 1, f"{name} stepper {k}: the box height changes while stepping: {sorted(boxes)}"
            assert abs(boxes.pop() - max(contents)) <= 12, f"{name} stepper {k}: box vs tallest frame {max(contents)}"
            handle.press("Home")
            bad += jump_problems(page, k, f"{name} {size[0]}x{size[1]}", ARTIFACTS)
            assert page.evaluate(STATE, [k])["stops"] == 1, "the play control shows more than ▶/⏸ (a ■ rewinds)"
        assert not bad, "\n".join(bad)
        # notebook 3's scenario frames: one height whichever scenario is shown
        scenario_boxes = page.locator(".xp-frames:not(.xp-stepper .xp-frames)").all()
        assert scenario_boxes or name != "03_cpu_communicator", "notebook 3 shows no scenario frames"
        for frames in scenario_boxes:
            heights = set()
            for button in frames.locator("xpath=..").locator(".widget-toggle-button").all():
                button.click()
                page.wait_for_timeout(200)
                heights.add(round(frames.bounding_box()["height"]))
            assert len(heights) == 1, f"{name}: the scenario frames change height: {sorted(heights)}"
    finally:
        ctx.close()


def test_play_pauses_where_it_is(site, browser):
    """▶ plays; pressing the same button (now ⏸) stops on the frame reached, not back on frame 1."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = ctx.new_page()
        page.goto((site / "notebooks" / "02_pipeline_parallel.html").as_uri())
        page.wait_for_load_state("networkidle")
        root = page.locator(".xp-stepper").first
        root.wait_for(timeout=30_000)
        _place(page, 0)
        play = root.locator(".widget-play button >> visible=true")
        assert play.count() == 1
        play.click()
        page.wait_for_function("() => /frame [3-9] of|frame \\d\\d+ of/.test(document.querySelector('.xp-stepper "
                               ".xp-frames').innerText)", timeout=15_000)
        play.click()                                     # ⏸
        at = _frame_no(page, 0)
        page.wait_for_timeout(2500)                      # about three intervals of 900 ms
        assert _frame_no(page, 0) == at and at > 1
    finally:
        ctx.close()
