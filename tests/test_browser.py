"""Real browser: JupyterLab on loopback + Debian Chromium (Playwright), and the static HTML export.

1. Open notebook 2 in JupyterLab, run all cells, move the rank stepper forward with the keyboard and check
   that the highlighted divergent fields change exactly as the trace says (expected values come from the
   library's own run of the same scenario). A screenshot is saved under test-artifacts/.
2. Export notebook 2 (stored outputs + widget state) to static HTML with a local html-manager and step the
   same stepper with no kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labserver import CHROMIUM, REPO, TOKEN, chromium_page, jupyter_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed")]

NB2 = REPO / "notebooks" / "02_pipeline_parallel.ipynb"
ARTIFACTS = REPO / "test-artifacts"
JS = Path(sys.prefix) / "share" / "explainer-js"
FRAME = "div.xp-pp[id^=xp-pp-frame-] >> visible=true"
BOX = """k => document.querySelector('#xp-pp-frame-' + k).closest('.xp-frames').getBoundingClientRect().height"""


@pytest.fixture(scope="module")
def expected() -> list[str]:
    """data-diverged per slider position, from the library's own run of the scenario the notebook steps."""
    from explainer import scenario
    from explainer.render.pp_trace import diverged_fields
    from explainer.widgets.pp import frame_events

    trace = scenario.run("pp2-pre-fix-int64").trace
    return [",".join(diverged_fields(trace, i)) for i, _ in frame_events(trace)]


def _shown(page) -> tuple[str, str]:
    frame = page.locator(FRAME).first          # the notebook's first rank stepper (the knob's comes later)
    return frame.get_attribute("id"), frame.get_attribute("data-diverged")


def _step_to(page, current: int, target: int) -> None:
    """Arrow-key presses on the rank stepper's slider until it reads ``target``, one at a time: each press waits
    for the slider to move before the next (a busy JupyterLab applies presses late, and a second press sent
    before the first landed would overshoot); a press it dropped is made again."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    handle = page.locator(".widget-slider .noUi-handle").first   # the rank stepper is the notebook's first slider
    now = lambda: round(float(handle.get_attribute("aria-valuenow")))      # noqa: E731
    for _ in range(2 * (target - current) + 5):
        at = now()
        if at >= target:
            break
        handle.focus()
        handle.press("ArrowRight")
        try:
            page.wait_for_function("([h, v]) => Math.round(+h.getAttribute('aria-valuenow')) > v",
                                   arg=[handle.element_handle(), at], timeout=5_000)
        except PlaywrightTimeout:                        # the press was dropped: press again
            pass
    assert now() == target


def _check_jump(page, expected: list[str]) -> None:
    """The "≠ first divergence" button (browser-side jslink, no kernel needed) shows the first divergent frame,
    under its "frame k of N" caption, in a box that kept its height (the tallest frame's)."""
    first = next(k for k, d in enumerate(expected) if d)
    shown = int(page.locator(FRAME).first.get_attribute("id").rsplit("-", 1)[1])
    before = page.evaluate(BOX, shown)
    page.locator("button.widget-toggle-button:text-is('≠ first divergence')").first.click()
    page.wait_for_selector(f"#xp-pp-frame-{first} >> visible=true", timeout=20_000)
    assert _shown(page) == (f"xp-pp-frame-{first}", expected[first])
    caption = page.locator(f".xp-caption[data-frame='{first}'] >> visible=true").first.inner_text()
    assert caption.startswith(f"frame {first + 1} of {len(expected)} · ") and "≠" in caption
    assert abs(page.evaluate(BOX, first) - before) < 2     # one box height: the page does not jump


def _check_walk(page, expected: list[str]) -> None:
    first = next(k for k, d in enumerate(expected) if d)
    page.wait_for_selector("#xp-pp-frame-0 >> visible=true", timeout=60_000)
    assert _shown(page) == ("xp-pp-frame-0", expected[0])
    # walk to the frame before the first divergence, then onto it, then to the next frame that differs
    later = next(k for k in range(first + 1, len(expected)) if expected[k] != expected[first])
    position = 0
    for target in (first - 1, first, later):
        _step_to(page, position, target)
        position = target
        page.wait_for_selector(f"#xp-pp-frame-{target} >> visible=true", timeout=20_000)
        assert _shown(page) == (f"xp-pp-frame-{target}", expected[target])
        red = page.locator(f"#xp-pp-frame-{target} td.xp-diverged").evaluate_all(
            "cells => [...new Set(cells.map(c => c.dataset.field))]")
        assert sorted(red) == sorted(f for f in expected[target].split(",") if f)


def test_lab_runs_notebook_2_and_the_stepper_follows_the_trace(expected):
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab([NB2]) as (base, _work), chromium_page() as page:
        page.goto(f"{base}/lab/tree/{NB2.name}?token={TOKEN}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=90_000)
        page.click(".lm-MenuBar-itemLabel:text-is('Run')")
        page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
        page.wait_for_selector("#xp-pp-stepper", timeout=180_000)
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=180_000)
        page.locator("#xp-pp-stepper").scroll_into_view_if_needed()
        _check_walk(page, expected)
        _check_jump(page, expected)
        page.locator(FRAME).first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "notebook2-lab-rank-stepper.png"))
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        assert errors == 0, "a cell wrote to stderr in the browser run"


@pytest.mark.skipif(not (JS / "dist" / "embed-amd.js").exists(), reason="html-manager not set up (make test does it)")
def test_static_html_export_steps_without_a_kernel(expected, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(NB2), "--output-dir", str(tmp_path),
                    f"--HTMLExporter.widget_renderer_url=file://{JS}/dist/embed-amd.js",
                    f"--HTMLExporter.require_js_url=file://{JS}/require.js"],
                   check=True, capture_output=True, timeout=120, env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    html = tmp_path / (NB2.stem + ".html")
    with chromium_page(allow_file=True) as page:
        page.goto(html.as_uri())
        _check_walk(page, expected)
        _check_jump(page, expected)
        page.locator(FRAME).first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "notebook2-static-rank-stepper.png"))
    shutil.copy(html, ARTIFACTS / html.name)


GLOSSARY = REPO / "notebooks" / "glossary.md"
NB1 = REPO / "notebooks" / "01_canvas_sampler.ipynb"


def test_a_glossary_link_opens_the_word_rendered_in_jupyterlab():
    """JupyterLab serves notebooks/ (make lab): a notebook's glossary link opens notebooks/glossary.md rendered
    (Markdown Preview, not a text editor), scrolled to the word; and <dfn> marks survive JupyterLab's sanitizer."""
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab([NB1, GLOSSARY]) as (base, _work), chromium_page() as page:
        page.goto(f"{base}/lab/tree/{NB1.name}?token={TOKEN}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_selector(".jp-RenderedMarkdown dfn", timeout=30_000)
        assert page.locator(".jp-RenderedMarkdown dfn").count() >= 5
        link = page.locator(".jp-RenderedMarkdown a[href*='/files/glossary.md'][href$='#term-stop-check']").first
        link.click()
        page.wait_for_selector(".jp-MarkdownViewer [data-jupyter-id='term-stop-check']", state="attached", timeout=30_000)
        page.wait_for_timeout(1000)
        assert page.locator(".jp-FileEditor").count() == 0            # not opened as a text file
        where = page.evaluate("""() => { const a = document.querySelector(".jp-MarkdownViewer [data-jupyter-id='term-stop-check']");
            const view = a.closest('.jp-MarkdownViewer').getBoundingClientRect(); const r = a.getBoundingClientRect();
            return [r.top - view.top, view.height]; }""")
        assert 0 <= where[0] < 0.25 * where[1], f"the word is not at the top of the glossary view: {where}"
        heading = page.locator(".jp-MarkdownViewer h3:text-is('stop check')")
        assert heading.is_visible()
        page.screenshot(path=str(ARTIFACTS / "glossary-link-in-lab.png"))


LAB_VENV = Path(os.environ.get("EXPLAINER_LAB_VENV") or REPO / ".venv-lab")


@pytest.mark.skipif(not (LAB_VENV / "bin" / "python").exists(), reason="no lab venv (make test builds .venv-lab)")
def test_steppers_fit_the_screen_in_jupyterlab():
    """Opened in JupyterLab as `make lab` serves it (its file browser open, nothing run), at 1280 × 800 and
    700 × 800: after each jump button the controls, the caption and what the frame changed are in the notebook
    panel (tests/test_stepper_fit.py checks the same on the docs site, and the box height over every frame)."""
    from test_stepper_fit import jump_problems

    notebooks = [REPO / "notebooks" / f"{n}.ipynb" for n in ("01_canvas_sampler", "02_pipeline_parallel", "05_two_hosts")]
    shots = ARTIFACTS / "fit"
    shots.mkdir(parents=True, exist_ok=True)
    bad = []
    with jupyter_lab(notebooks, python=str(LAB_VENV / "bin" / "python"), learner_settings=True, timeout=180) as (
            base, _work), chromium_page() as page:
        for width in (1280, 700):
            page.set_viewport_size({"width": width, "height": 800})
            for nb in notebooks:
                page.goto(f"{base}/lab/workspaces/fit-{width}-{nb.stem[:2]}/tree/{nb.name}?token={TOKEN}")
                page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=180_000)
                page.wait_for_selector(".xp-stepper .widget-play", timeout=60_000)
                page.wait_for_timeout(1000)
                for k in range(page.locator(".xp-stepper").count()):
                    bad += jump_problems(page, k, f"lab {nb.stem} {width}x800", shots)
    assert not bad, "\n".join(bad)
