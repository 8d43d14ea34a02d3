"""The notebooks as a learner first meets them: JupyterLab served from the venv that `make lab` builds
(`make test` builds it as .venv-lab and sets EXPLAINER_LAB_VENV), in a real browser.

For each notebook (notebooks/*.ipynb and notebooks/workshop/*.ipynb), opened WITHOUT running a cell:
- every stored diagram renders as a picture (`.jp-RenderedSVG img`), never as `<graphviz.sources.Source at 0x…>`;
- stored HTML keeps its `<style>` (JupyterLab strips it from untrusted notebooks);
- an output stored folded (the exercises' stub checks) stays folded: JupyterLab shows its placeholder;
- every stored widget renders from the notebook's saved widget state, never as `VBox(children=…)` text, and
  every stepper (a Stack whose selected_index is jslinked to a slider or buttons, read from that state) steps;
- no news pop-up.
Then the autosave: with its interval at 1 s, the notebook is never marked modified and the file is never
written; saved anyway (File > Save Notebook: the same save the autosave makes), the file is byte for byte what
it was, stored widget state included. Closed, its kernel shut down, reopened: every widget and picture renders
again from the file and the steppers step (screenshot `test-artifacts/<name>-reopened.png`).
Trust, the news setting, the widget-state setting and the server's pre-save hook come from set-up
(scripts/setup.sh) in that venv; this test adds only the autosave interval and the windowing mode.
Then, for the five story notebooks, Kernel > Restart Kernel and Run All Cells: every cell runs, no error or
stderr output (the workshop notebooks' runs are tests/test_workshop_browser.py's).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

from labserver import CHROMIUM, REPO, TOKEN, chromium_page, jupyter_lab

ENV_VENV = os.environ.get("EXPLAINER_LAB_VENV")
LAB_VENV = Path(ENV_VENV or REPO / ".venv-lab")
LAB_PY = LAB_VENV / "bin" / "python"
STORIES = sorted((REPO / "notebooks").glob("*.ipynb"))
NOTEBOOKS = STORIES + sorted((REPO / "notebooks" / "workshop").glob("*.ipynb"))
AUTOSAVE_SECONDS = 1
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
ARTIFACTS = REPO / "test-artifacts"

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
              pytest.mark.skipif(not ENV_VENV and not LAB_PY.exists(),
                                 reason="no lab venv: `make test` builds .venv-lab (VENV=.venv-lab scripts/setup.sh lab)")]


def stored(nb: Path) -> dict:
    """What the notebook file holds: SVG and widget outputs, styled HTML, and its steppers with their control."""
    data = json.loads(nb.read_text())
    folded = [c for c in data["cells"] if c["cell_type"] == "code" and c.get("outputs")
              and c.get("metadata", {}).get("jupyter", {}).get("outputs_hidden")]
    outputs = [o for c in data["cells"] if c["cell_type"] == "code" and not any(c is f for f in folded)
               for o in c.get("outputs", [])]                 # what shows; a folded output renders when unfolded
    state = data["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    ref = lambda v: v[len("IPY_MODEL_"):]                                       # noqa: E731
    driver = {}                                         # Stack model id -> model name of the control linked to it
    for m in state.values():
        if m["model_name"] == "LinkModel" and m["state"]["target"][1] == "selected_index":
            driver[ref(m["state"]["target"][0])] = state[ref(m["state"]["source"][0])]["model_name"]

    def controls(mid: str) -> set[str]:
        found = {driver[mid]} if mid in driver else set()
        for child in state.get(mid, {}).get("state", {}).get("children", []):
            found |= controls(ref(child))
        return found

    views = [o["data"][WIDGET_VIEW]["model_id"] for o in outputs if WIDGET_VIEW in o.get("data", {})]
    hidden = sum(bool(c.get("metadata", {}).get("jupyter", {}).get("source_hidden"))
                 for c in data["cells"] if c["cell_type"] == "code")
    return {"hidden_code_cells": hidden, "folded_outputs": len(folded), "svg": sum("image/svg+xml" in o.get("data", {}) for o in outputs),
            "styled_html": any("<style" in "".join(o.get("data", {}).get("text/html", "")) for o in outputs),
            "views": views, "steppers": {k: controls(mid) for k, mid in enumerate(views) if controls(mid)}}


def frame_text(output) -> str:
    return "\n".join(output.locator(".widget-html-content").all_inner_texts())


def step(page, output, control: str) -> None:
    """One step of a stepper, by its own control; the frame text must change. A key press or click that
    JupyterLab takes while it is still busy is made again (at most three times)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    before = frame_text(output)
    for attempt in range(3):
        if "IntSliderModel" in control:
            # the stepper's slider is the output's last one (a knob's own sliders, e.g. the entropy bound, come first)
            handle = output.locator(".widget-slider .noUi-handle").last
            handle.focus()                              # a stepper stored on its last frame steps back
            at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
            handle.press("ArrowLeft" if at_end else "ArrowRight")
        elif "ToggleButtonsModel" in control:
            output.locator(".widget-toggle-button").nth(1).click()
        else:
            raise AssertionError(f"a stepper driven by {control}: teach this test how to step it")
        try:
            page.wait_for_function("([el, before]) => [...el.querySelectorAll('.widget-html-content')]"
                                   ".map(e => e.innerText).join('\\n') !== before",
                                   arg=[output.element_handle(), before], timeout=7_000)
            return
        except PlaywrightTimeout:
            if attempt == 2:
                raise


def shut_down_kernels(base: str) -> None:
    with urllib.request.urlopen(f"{base}/api/kernels?token={TOKEN}", timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(req, timeout=30)


IDLE = "text=Python 3 (ipykernel) | Idle"


@pytest.fixture(scope="module")
def lab():
    with jupyter_lab(NOTEBOOKS, python=str(LAB_PY), learner_settings=True, timeout=180,
                     user_settings={"@jupyterlab/docmanager-extension:plugin": {"autosaveInterval": AUTOSAVE_SECONDS}}
                     ) as (base, work), chromium_page() as page:
        page.on("dialog", lambda d: d.accept())          # "leave page?" when moving on from a notebook
        yield base, work, page


def open_rendered(page, base: str, nb: Path, want: dict, workspace: str):
    """Open ``nb`` in a fresh workspace, run nothing; check what it shows; step every stepper."""
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{nb.name}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_selector(IDLE, timeout=180_000)      # the widget manager restores saved state once a kernel is up
    outputs = page.locator(".jp-OutputArea-output")
    page.wait_for_function(f"document.querySelectorAll('.jp-RenderedSVG img').length >= {want['svg']}",
                           timeout=60_000)
    assert page.locator(".jp-RenderedSVG img").count() == want["svg"]
    assert page.locator(".jp-OutputPlaceholder").count() == want["folded_outputs"], f"{nb.name}: folded outputs"
    for text in ("graphviz.sources.Source at", "graphviz.graphs.Digraph at", "VBox(children=", "HBox(children=",
                 "model not found", "Error displaying widget"):
        assert outputs.filter(has_text=text).count() == 0, f"{nb.name}: an output shows {text!r} instead of rendering"
    if want["styled_html"]:
        assert page.locator(".jp-RenderedHTML style").count() > 0, \
            f"{nb.name}: stored HTML lost its <style> (notebook not trusted?)"
    widget_outputs = outputs.filter(has=page.locator(".jupyter-widgets"))
    page.wait_for_function("n => [...document.querySelectorAll('.jp-OutputArea-output')]"
                           ".filter(o => o.querySelector('.jupyter-widgets')).length >= n",
                           arg=len(want["views"]), timeout=60_000)
    assert widget_outputs.count() == len(want["views"])
    if nb.stem.startswith(("01_", "02_", "03_")):       # the three stories each step through a run
        assert want["steppers"], f"{nb.name} has no stepper in its saved widget state"
    for k, controls in want["steppers"].items():
        output = widget_outputs.nth(k)
        output.scroll_into_view_if_needed()
        step(page, output, " ".join(sorted(controls)))
    assert page.locator("text=official Jupyter news").count() == 0, "the news pop-up is showing"


def modified(page) -> bool:
    """The current notebook's tab shows JupyterLab's 'modified' mark (what makes the autosave write)."""
    return page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


def save_as_the_autosave_does(page, path: Path) -> None:
    """File > Save Notebook: the document context's save, as the autosave calls it; wait for the write.
    (Waits go through Playwright: the page's requests pass the test's route guard only while Playwright runs.)"""
    before = path.stat().st_mtime_ns
    page.click(".lm-MenuBar-itemLabel:text-is('File')")
    page.click(".lm-Menu-itemLabel:text-matches('^Save Notebook$')")
    deadline = time.monotonic() + 60
    while path.stat().st_mtime_ns == before:
        if time.monotonic() > deadline:
            page.screenshot(path=str(ARTIFACTS / f"{path.stem}-not-saved.png"))
            log = (path.parent.parent / "lab.log").read_text()[-3000:]
            raise AssertionError(f"{path.name}: not saved within 60 s; the server's log ends:\n{log}")
        page.wait_for_timeout(200)
    page.wait_for_selector(".lm-TabBar-tab.jp-mod-current:not(.jp-mod-dirty)", timeout=30_000)
    page.wait_for_timeout(500)                          # the server writes in place; let it finish


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_opens_rendered_survives_autosave_and_reopens_then_runs_all(lab, nb):
    base, work, page = lab
    want = stored(nb)
    on_disk = work / nb.name
    original, mtime = on_disk.read_bytes(), on_disk.stat().st_mtime_ns

    # --- opened, nothing run: pictures, styles, widgets from the saved state -----------------------------
    open_rendered(page, base, nb, want, nb.stem)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{nb.stem}-opened.png"))

    # --- the autosave: never triggered (nothing modified); a save writes the same bytes ---------------------
    page.wait_for_timeout(3 * AUTOSAVE_SECONDS * 1000)
    assert on_disk.stat().st_mtime_ns == mtime, \
        f"{nb.name}: the autosave wrote it (opening marked it modified): {changed(original, on_disk.read_bytes())}"
    assert not modified(page), f"{nb.name}: opening it (and stepping) marked it modified"
    save_as_the_autosave_does(page, on_disk)
    saved = on_disk.read_bytes()
    assert json.loads(saved) == json.loads(original), f"{nb.name}: saving changed {changed(original, saved)}"
    assert saved == original, f"{nb.name}: saving changed the file's bytes (same JSON)"

    # --- closed, kernel shut down, reopened: everything renders again from the file -------------------------
    page.click(".lm-TabBar-tab.jp-mod-current .lm-TabBar-tabCloseIcon")
    shut_down_kernels(base)
    open_rendered(page, base, nb, want, f"{nb.stem}-reopened")
    page.screenshot(path=str(ARTIFACTS / f"{nb.stem}-reopened.png"))
    if nb not in STORIES:
        shut_down_kernels(base)
        return

    # --- Kernel > Restart Kernel and Run All Cells ---------------------------------------------------------
    page.click(".lm-MenuBar-itemLabel:text-is('Kernel')")
    page.click(".lm-Menu-itemLabel:text-matches('^Restart Kernel and Run All Cells')")
    page.click(".jp-Dialog-button.jp-mod-accept")
    page.wait_for_selector(".jp-InputPrompt:text-is('[*]:')", timeout=60_000)
    page.wait_for_function("!document.querySelector('.jp-InputPrompt') || ![...document.querySelectorAll("
                           "'.jp-InputPrompt')].some(p => p.innerText.trim() === '[*]:')", timeout=900_000)
    page.wait_for_selector(IDLE, timeout=60_000)
    prompts = [t.strip() for t in page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()]
    # a check-only cell is stored with its input collapsed, so its prompt shows no number
    shown = [p for p in prompts if p]
    assert len(prompts) - len(shown) <= want["hidden_code_cells"], f"{nb.name}: cells not all run: {prompts}"
    assert shown and all(p[1:-2].isdigit() for p in shown), f"{nb.name}: cells not all run: {prompts}"
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert errors.count() == 0, f"{nb.name}: error output after Run All: {errors.first.inner_text()[:2000]}"
    page.screenshot(path=str(ARTIFACTS / f"{nb.stem}-run-all.png"))
    shut_down_kernels(base)


def changed(a: bytes, b: bytes) -> str:
    """Where two notebook files differ: the first few JSON paths."""
    out: list[str] = []

    def walk(x, y, path):
        if len(out) >= 5:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k, "<absent>"), y.get(k, "<absent>"), f"{path}/{k}")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}/{i}")
        elif x != y:
            out.append(f"{path}: {str(x)[:60]!r} -> {str(y)[:60]!r}")
    walk(json.loads(a), json.loads(b), "")
    return "; ".join(out)
