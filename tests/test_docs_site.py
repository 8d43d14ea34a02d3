"""The docs site (`make docs`): built with warnings as errors, internal links intact, and every notebook page
working from disk with the network blocked.

1. Build the site exactly as `make docs` does (`sphinx-build -E -W --keep-going`) into a temp dir.
2. Walk the built HTML: every internal link, script, stylesheet and picture resolves to a file of the site
   (and every #anchor to an id on its page); no page loads anything from outside the site.
3. Open every page in Debian's Chromium from file://, as a reader does (no flag: Chromium refuses a page on disk
   every CORS fetch, a script with `crossorigin` among them), with every request outside the site's folder blocked
   and recorded: no console error, no failed or blocked request. On every notebook page: each diagram of the
   notebook renders (one picture per stored SVG output, with alt text), each stepper steps (the slider moves
   the frame; ▶ Play plays), and ▶/⏸ are drawn by CSS (no web font needed). Every character a page shows is in
   a font this machine has (no missing-glyph box). A page whose widget manager does not load says in one line
   how to open the site through a local server.
4. Every stream output stored in a notebook is on its page, exactly and in order: the site shows the
   outputs nbval checks (tests/test_docs_notebooks.py shows nbval failing when one of them changes).
5. Read at a glance: at 1280 and 700 px no output block is wider than its column; the Next links walk the
   workshop route; Run controls, which need a kernel, are visibly disabled on the static pages with the reason.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from explainer.workshop.catalog import EXERCISES

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
JS = Path(os.environ.get("EXPLAINER_JS_DIR", Path(sys.prefix) / "share" / "explainer-js"))
ARTIFACTS = REPO / "test-artifacts"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (JS / "dist" / "embed-amd.js").exists(), reason="html-manager not set up (make test does it)"),
]


def build_site(srcdir: Path, outdir: Path, warnings_are_errors: bool = True) -> subprocess.CompletedProcess:
    """`make docs`'s command: srcdir is a repository root, the configuration is the repository's docs/."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-q", "-c", str(REPO / "docs"),
           "-d", str(outdir / "doctrees"), *(["-W", "--keep-going"] if warnings_are_errors else []),
           str(srcdir), str(outdir / "html")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=srcdir)


@pytest.fixture(scope="module")
def site():
    out = Path(tempfile.mkdtemp(prefix="explainer-docs-"))
    try:
        done = build_site(REPO, out)
        assert done.returncode == 0, f"sphinx-build failed:\n{done.stderr[-4000:]}"
        assert "WARNING" not in done.stderr, done.stderr[-4000:]
        yield out / "html"
    finally:
        shutil.rmtree(out, ignore_errors=True)


def pages(site: Path) -> list[Path]:
    """The site's pages (the theme also copies template fragments ending in .html into _static/)."""
    return sorted(p for p in site.rglob("*.html") if p.relative_to(site).parts[0] not in ("_static", "_sources"))


def notebook_pages(site: Path) -> list[tuple[Path, Path]]:
    """(notebook, its page) for every notebook the site renders."""
    nbs = [*sorted(REPO.glob("notebooks/*.ipynb")), *sorted(REPO.glob("notebooks/workshop/*.ipynb"))]
    return [(nb, site / nb.relative_to(REPO).with_suffix(".html")) for nb in nbs]


def shown_cells(nb: Path) -> list[dict]:
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    return [c for c in cells if not {"remove-cell", "remove-output"} & set(c.get("metadata", {}).get("tags", []))]


# --- 2. links, offline -------------------------------------------------------------------------------

class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key):
                self.refs.append((tag, a.get("rel"), a[key]))


def _parse(page: Path) -> _Refs:
    p = _Refs()
    p.feed(page.read_text(encoding="utf-8"))
    return p


def test_every_page_is_built_and_the_notebooks_are_pages(site):
    for nb, page in notebook_pages(site):
        assert page.is_file(), f"{nb.name} has no page"
    for name in ("index", "glossary", "api", "contributing"):
        assert (site / "docs" / f"{name}.html").is_file()
    assert (site / "SOURCES.html").is_file() or (site / "docs" / "sources.html").is_file()
    assert 'url=docs/index.html' in (site / "index.html").read_text()


def test_internal_links_and_anchors_resolve_and_nothing_is_loaded_from_outside(site):
    parsed = {p: _parse(p) for p in pages(site)}
    broken, outside = [], []
    for page, refs in parsed.items():
        for tag, rel, ref in refs.refs:
            parts = urlsplit(ref)
            if parts.scheme in ("http", "https", "mailto") or ref.startswith("//"):
                # a link the reader may follow is fine; a resource the page loads from outside is not
                if tag in ("script", "img", "iframe") or (tag == "link" and rel in ("stylesheet", "preload", "icon")):
                    outside.append(f"{page.relative_to(site)}: {ref}")
                continue
            if parts.scheme in ("data", "javascript"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_file() and not (target / "index.html").is_file():
                broken.append(f"{page.relative_to(site)}: {ref}")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)}: {ref} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(broken[:40])
    assert not outside, "resources loaded from outside the site:\n" + "\n".join(outside[:40])
    # the widget manager and its fonts came with the site
    assert (site / "_static" / "widgets" / "dist" / "embed-amd.js").is_file()
    assert list((site / "_static" / "widgets" / "dist").glob("*.woff2"))


def test_the_api_page_documents_every_name_the_notebooks_use(site):
    sys.path.insert(0, str(REPO / "docs" / "_ext"))
    try:
        from explainer_site import notebook_api_names
    finally:
        sys.path.pop(0)
    names = notebook_api_names(nb for nb, _ in notebook_pages(site))
    assert "explainer.scenario.run" in names and "explainer.widgets.pp.rank_stepper" in names
    ids = _parse(site / "docs" / "api.html").ids
    assert not sorted(names - ids), f"missing from the API page: {sorted(names - ids)}"


def test_pictures_have_alt_text_from_the_diagram_itself(site):
    for nb, page in notebook_pages(site):
        for m in re.finditer(r"<img [^>]*>", page.read_text(encoding="utf-8")):
            alt = re.search(r'alt="([^"]*)"', m.group(0))
            assert alt and alt.group(1).strip(), f"{page.name}: picture without alt text: {m.group(0)[:120]}"
            assert "_images/" not in alt.group(1), f"{page.name}: alt text is a file name: {alt.group(1)}"
    svg_pages = [p for _, p in notebook_pages(site) if ".svg" in p.read_text(encoding="utf-8")]
    assert svg_pages
    text = svg_pages[0].read_text(encoding="utf-8")
    assert re.search(r'<img alt="Diagram: [^"]+ boxes[^"]*" class="xp-diagram"', text)
    # a diagram that highlights the path taken names it in its alt text, and its scroll box opens on it
    for _, page in notebook_pages(site):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r'<a class="xp-diagram-link" href="([^"]+)"( data-focus="([\d.]+)")?[^>]*><img alt="([^"]*)"', text):
            svg = (page.parent / m.group(1)).read_text(encoding="utf-8")
            if re.search(r'class="node taken"', svg):
                assert "path taken:" in m.group(4) and m.group(3) and 0 <= float(m.group(3)) <= 1, m.group(0)[:200]


def _page_streams(page: Path) -> list[str]:
    """Text of every stream output block on a page, as the reader sees it."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r'<div class="output (?:stream|stderr)[^"]*">\s*<div class="highlight"><pre>(.*?)</pre>',
                        text, flags=re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", b)) for b in blocks]


def _stored_streams(nb: Path) -> list[str]:
    """Stored stream outputs of the cells the site shows, merged per cell and stream as nbval compares them."""
    out = []
    for c in shown_cells(nb):
        if c["cell_type"] != "code":
            continue
        merged: dict[str, str] = {}
        for o in c["outputs"]:
            if o["output_type"] == "stream":
                merged[o["name"]] = merged.get(o["name"], "") + "".join(o["text"])
        out += list(merged.values())
    return out


def _norm(s: str) -> str:
    return s.rstrip("\n")


def test_the_site_shows_every_stored_stream_output_exactly(site):
    with_text = []
    for nb, page in notebook_pages(site):
        stored = [_norm(s) for s in _stored_streams(nb)]
        shown = [_norm(s) for s in _page_streams(page)]
        assert shown == stored, f"{page.name}: the page's output text differs from the notebook's stored outputs"
        with_text += [nb.name] if stored else []     # (the workshop solutions show only HTML panels)
    assert {"01_canvas_sampler.ipynb", "02_pipeline_parallel.ipynb", "03_cpu_communicator.ipynb"} <= set(with_text)


# --- 3. the browser, offline ---------------------------------------------------------------------------

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser(site):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="explainer-docs-chromium-")
    root = site.resolve().as_uri() + "/"
    log = {"outside": [], "failed": [], "errors": []}
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                    args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900})
        try:
            def guard(route):
                url = route.request.url
                if url.startswith((root, "data:", "blob:", "about:")):
                    return route.continue_()
                log["outside"].append(url)   # the network, or a file outside the site
                return route.abort()

            ctx.route("**/*", guard)
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.on("requestfailed", lambda r: log["failed"].append(f"{r.url} {r.failure}"))
            page.on("console", lambda m: m.type == "error" and log["errors"].append(m.text))
            page.on("pageerror", lambda e: log["errors"].append(f"page error: {e}"))
            yield page, log
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def _open(page, log, path: Path):
    for v in log.values():
        v.clear()
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")


def _clean(log, where, page=None):
    if page is not None:   # let every request of this page finish before judging it (and leaving it)
        page.wait_for_load_state("networkidle")
        page.evaluate("document.fonts.ready.then(() => true)")
    assert not log["outside"], f"{where}: requests that left the site: {log['outside'][:5]}"
    assert not log["failed"], f"{where}: failed requests: {log['failed'][:5]}"
    assert not log["errors"], f"{where}: console errors: {log['errors'][:5]}"


def test_every_page_loads_offline_without_errors(site, browser):
    page, log = browser
    for path in pages(site):
        if path.parent.name == "notebooks" or path.parent.parent.name == "notebooks":
            continue   # the notebook pages get the full check below
        _open(page, log, path)
        page.wait_for_timeout(300)
        _clean(log, path.relative_to(site), page)


PLAY_ICONS = """() => {
  const icons = [...document.querySelectorAll('.widget-play button i')].filter(i => i.closest('button').offsetParent);
  return icons.map(i => {
    const b = getComputedStyle(i, '::before');
    return {cls: i.className, content: b.content, width: parseFloat(b.width), height: parseFloat(b.height),
            drawn: b.borderLeftStyle === 'solid' && parseFloat(b.borderLeftWidth) > 0 || b.backgroundImage !== 'none'};
  });
}"""


def _steppers(page):
    return page.locator(".widget-vbox:has(> .widget-hbox > .widget-play)")


def _frame(stepper) -> str:
    return stepper.evaluate("box => box.lastElementChild.innerText")


def _k(stepper) -> int:
    """The frame shown, from its caption "frame k of N" (the slider has no numeric readout)."""
    return int(re.search(r"frame (\d+) of \d+", _frame(stepper)).group(1))


@pytest.mark.browser
def test_notebook_pages_render_their_diagrams_and_step_offline(site, browser):
    page, log = browser
    ARTIFACTS.mkdir(exist_ok=True)
    checked = 0
    for nb, path in notebook_pages(site):
        _open(page, log, path)
        cells = shown_cells(nb)
        state = json.loads(nb.read_text(encoding="utf-8"))["metadata"].get("widgets", {})
        models = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        plays = sum(m["model_name"] == "PlayModel" for m in models.values())

        # diagrams: one rendered picture per stored SVG output of a shown cell
        svgs = sum("image/svg+xml" in o.get("data", {}) for c in cells if c["cell_type"] == "code"
                   for o in c["outputs"])
        page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30_000)
        drawn = page.evaluate("""() => [...document.querySelectorAll('img.xp-diagram')]
            .map(i => i.naturalWidth > 0 && i.getBoundingClientRect().width > 0)""")
        assert len(drawn) == svgs and all(drawn), f"{path.name}: {svgs} SVG outputs, drawn: {drawn}"
        wide = page.evaluate("""() => [...document.querySelectorAll('img.xp-diagram')]
            .filter(i => i.closest('.xp-diagram-box').getBoundingClientRect().right > innerWidth).length""")
        assert wide == 0, f"{path.name}: a diagram's box is cut off at 1280 px"

        # steppers: as many as the notebook displayed, each steps from the keyboard
        if plays:
            page.wait_for_selector(".widget-play", timeout=60_000)
        steppers = _steppers(page)
        assert steppers.count() == plays, f"{path.name}: {plays} Play widgets stored, {steppers.count()} on the page"
        for k in range(plays):
            stepper = steppers.nth(k)
            stepper.scroll_into_view_if_needed()
            before, k_before = _frame(stepper), _k(stepper)
            handle = stepper.locator(".noUi-handle")
            handle.focus()
            handle.press("ArrowRight")
            page.wait_for_function("([box, f]) => box.lastElementChild.innerText !== f",
                                   arg=[stepper.element_handle(), before], timeout=10_000)
            assert _k(stepper) == k_before + 1
        if plays:
            # ▶ Play advances the first stepper by itself; the same button (⏸ while playing) pauses it
            stepper = steppers.nth(0)
            start = _k(stepper)
            total = int(re.search(r"frame \d+ of (\d+)", _frame(stepper)).group(1))
            stepper.locator(".widget-play button").nth(0).click()          # a short stepper has fewer frames left
            page.wait_for_function("box => +/frame (\\d+) of/.exec(box.lastElementChild.innerText)[1] >= %d"
                                   % min(start + 2, total), arg=stepper.element_handle(), timeout=15_000)
            stepper.locator(".widget-play button").nth(0).click()
            icons = page.evaluate(PLAY_ICONS)       # drawn by the site's CSS: no glyph of an icon font
            assert icons and all(i["drawn"] and i["width"] > 0 and i["height"] > 0 and i["content"] == '""'
                                 for i in icons), f"{path.name}: icons {icons}"
            assert any("fa-play" in i["cls"] for i in icons), icons
            stepper.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"docs-{path.stem}-stepper.png"))
            checked += 1
            assert page.locator(".xp-open-hint").count() == 0, f"{path.name}: says its steppers did not load"
        _clean(log, path.name, page)
    assert checked >= 1, "no notebook page with a stepper was checked"


@pytest.mark.browser
def test_a_page_whose_widget_manager_does_not_load_says_how_to_open_the_site_and_that_works(site, browser, tmp_path):
    """The widget manager refused (as a browser that will not run it from disk would): the page says in one line
    how to open the site; that command, run as printed (on a free port), serves the page with its steppers. The
    site sits on a stick mounted at a path with a space (the page's own URL spells it %20)."""
    page, log = browser
    site = shutil.copytree(site, tmp_path / "USB STICK" / "site")
    path = site / "notebooks" / "01_canvas_sampler.html"
    stick = site.resolve().as_uri() + "/**"
    page.route(stick, lambda route: route.continue_())         # the copy is the site here (the guard: no other file)
    page.route("**/embed-amd.js", lambda route: route.abort())  # routed last, so it wins over the line above
    try:
        _open(page, log, path)
        hint = page.wait_for_selector(".xp-open-hint", timeout=15_000).inner_text()
    finally:
        page.unroute("**/embed-amd.js")
        page.unroute(stick)
    assert page.locator(".widget-play").count() == 0
    m = re.search(r"(python3 -m http\.server .*? 8000), then (http://127\.0\.0\.1:8000/(\S+))", hint)
    assert m and "\n" not in hint.strip(), hint
    assert m.group(3) == "notebooks/01_canvas_sampler.html" and f"'{site.resolve()}'" in m.group(1), hint
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, *shlex.split(m.group(1))[1:-1], str(port)]   # this Python may sit at a path with a space
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = m.group(2).replace(":8000/", f":{port}/")
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.1)
        page.route(f"http://127.0.0.1:{port}/**", lambda route: route.continue_())
        page.goto(url)
        page.wait_for_selector(".widget-play", timeout=60_000)
        assert _steppers(page).count() >= 1 and page.locator(".xp-open-hint").count() == 0
    finally:
        page.unroute(f"http://127.0.0.1:{port}/**")
        server.terminate()
        server.wait(timeout=10)


FONTS_HAVE = {}


def in_a_font_here(ch: str) -> bool:
    """Whether a font installed here (fontconfig, where Chromium looks) has a glyph for ``ch``."""
    if ch not in FONTS_HAVE:
        out = subprocess.run(["fc-list", f":charset={ord(ch):x}", "family"], capture_output=True, text=True, timeout=30)
        FONTS_HAVE[ch] = bool(out.stdout.strip())
    return FONTS_HAVE[ch]


@pytest.mark.browser
@pytest.mark.skipif(shutil.which("fc-list") is None, reason="no fontconfig here")
def test_every_character_the_site_shows_is_in_a_font_of_this_machine(site, browser):
    """Debian's fonts (set-up installs fonts-dejavu-core for the tests): a character none of them has is a box."""
    page, log = browser
    missing: dict[str, set[str]] = {}
    for path in pages(site):
        if 'http-equiv="refresh"' in path.read_text(encoding="utf-8"):
            continue                                                # the root's redirect to docs/index.html
        _open(page, log, path)
        if "application/vnd.jupyter.widget-view+json" in path.read_text(encoding="utf-8"):
            page.wait_for_selector(".jupyter-widgets", timeout=60_000)
        text = page.evaluate("() => document.body.innerText")
        for ch in {c for c in text if ord(c) > 0x7e and not c.isspace() and unicodedata.category(c)[0] != "C"}:
            if not in_a_font_here(ch):
                missing.setdefault(f"U+{ord(ch):04X} {ch} {unicodedata.name(ch, '?')}", set()).add(path.name)
    assert not missing, "characters no font here has (a box on the page):\n" + "\n".join(
        f"{k}: {sorted(v)[:4]}" for k, v in sorted(missing.items()))


# ---- reading at a glance: outputs fit their column, the Next links walk the workshop route ------------------
WIDTHS = (1280, 700)
# Every block of a cell's output, and what inside it could run past the column: text, tables, widget boxes.
# Diagrams are left out: they shrink to the column and below a legible scale scroll in their own box.
OVERFLOWING_OUTPUTS = """() => {
  const col = document.querySelector('article.bd-article').getBoundingClientRect();
  const bad = [];
  for (const out of document.querySelectorAll('.cell_output > *')) {
    for (const el of [out, ...out.querySelectorAll('pre, table, div, span')]) {
      const r = el.getBoundingClientRect();
      if (!r.width || !r.height || el.closest('.xp-diagram-box, .xp-diagram-link, svg')) continue;
      const cs = getComputedStyle(el);
      const scrolls = ['auto', 'scroll', 'hidden'].includes(cs.overflowX) && el.scrollWidth > el.clientWidth + 1;
      if (r.right > col.right + 1 || scrolls) {
        bad.push(`${el.tagName}.${String(el.className).slice(0, 40)} right ${Math.round(r.right)} > column `
                 + `${Math.round(col.right)} or content ${el.scrollWidth} > box ${el.clientWidth}: `
                 + JSON.stringify(el.innerText.slice(0, 70)));
        break;
      }
    }
  }
  return bad;
}"""
# each exercise right after the notebook it follows (the catalog's order), then the 'going further' notebooks
WORKSHOP_ROUTE = list(dict.fromkeys(page for ex in EXERCISES.values() for page in (
    f"notebooks/{ex.follows}.html", f"docs/exercise-{ex.id}.html"))) + ["notebooks/04_pp_today.html",
                                                                      "notebooks/05_two_hosts.html"]


@pytest.mark.browser
def test_no_output_block_is_wider_than_its_column(site, browser):
    """At 1280 and 700 px, no output of any notebook page runs past the article column or hides part of its text
    in a horizontal scroll (an outcome word or an error message past the right edge)."""
    page, log = browser
    found = []
    try:
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for _nb, path in notebook_pages(site):
                _open(page, log, path)
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(300)                      # the widgets render after load
                found += [f"{width}px {path.relative_to(site)}: {b}" for b in page.evaluate(OVERFLOWING_OUTPUTS)]
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})
    assert not found, "\n".join(found[:20])


@pytest.mark.browser
def test_the_next_links_walk_the_workshop_route(site, browser):
    """From notebook 1, the Next link of each page leads along the workshop route: each notebook, then its
    exercise, then on to the 'going further' notebooks 4 and 5."""
    page, log = browser
    _open(page, log, site / WORKSHOP_ROUTE[0])
    walked = [WORKSHOP_ROUTE[0]]
    for _ in WORKSHOP_ROUTE[1:]:
        page.locator("a.right-next").click()
        page.wait_for_load_state("load")
        walked.append(Path(unquote(urlsplit(page.url).path)).resolve().relative_to(site.resolve()).as_posix())
    assert walked == WORKSHOP_ROUTE
    for stop in (f"exercise-{ex}" for ex in EXERCISES):                                   # each stop leads on
        text = (site / "docs" / f"{stop}.html").read_text(encoding="utf-8")
        for href in ("../notebooks/workshop/exercises.html", "../notebooks/workshop/solutions.html"):
            assert f'href="{href}' in text, (stop, href)
        assert "JupyterLab" in text, stop


@pytest.mark.browser
def test_run_controls_are_disabled_on_the_static_site_with_the_reason(site, browser):
    """A Run button on a static page cannot run anything: it is greyed out, takes no clicks, and the line under it
    says why (JupyterLab shows the same widget working)."""
    page, log = browser
    for name in ("01_canvas_sampler", "02_pipeline_parallel", "03_cpu_communicator"):
        _open(page, log, site / "notebooks" / f"{name}.html")
        page.wait_for_load_state("networkidle")
        controls = page.locator(".xp-needs-kernel")
        controls.first.wait_for(state="attached", timeout=15000)
        state = controls.first.evaluate("el => [getComputedStyle(el).pointerEvents, Number(getComputedStyle(el).opacity)]")
        assert state[0] == "none" and state[1] < 0.6, (name, state)
        assert page.locator(".xp-static-only").first.is_visible(), name
        assert "needs a live kernel" in page.locator(".xp-static-only").first.inner_text(), name
