"""Sphinx configuration of the explainer site (`make docs`).

The source directory is the repository root (`sphinx-build -c docs . OUT`), so the notebooks are read
where nbval reads them (`notebooks/*.ipynb`), nothing is copied or symlinked, and only the files listed
in `include_patterns` become pages. The notebooks are rendered from their stored outputs: MyST-NB never
executes them (`nb_execution_mode = "off"`).

Offline: the widget manager (npm `@jupyter-widgets/html-manager`), require.js and the widgets' icon
fonts are served from the site itself (see `_widget_assets`), never from a CDN.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))  # explainer_site

import explainer  # noqa: E402  (the version, and autodoc imports it anyway)

project = "explainer"
author = "the explainer authors"
copyright = "the explainer authors, Apache-2.0"
release = version = explainer.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "explainer_site",
]

# --- which files are pages --------------------------------------------------------------------------
root_doc = "docs/index"
# Pages other parts of the repo may add (docs/instructor-guide.md, notebooks/workshop/*.ipynb, a SOURCES.md
# at the root that replaces docs/sources.md) join the table of contents when they exist: explainer_site
# fills `% optional-pages` and `% sources-page` in index.md, so an absent page never breaks the build.
include_patterns = [
    "docs/*.md",
    "notebooks/*.ipynb",
    "notebooks/workshop/*.ipynb",
    "SOURCES.md",
]
exclude_patterns = [
    ".venv",
    "build",
    ".git",
    "**/.ipynb_checkpoints",
    "docs/_build",
    "docs/_static",
    "docs/_templates",
]

# --- MyST / MyST-NB ---------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # render what nbval checked; never re-run the notebooks here
nb_merge_streams = True  # as nbval compares them: one stdout block per cell
nb_output_stderr = "show"
# The widget manager from the site itself (keys are relative to _static/), not MyST-NB's CDN default. No
# `crossorigin` attribute: it makes the browser fetch the script with CORS, which a page opened from disk (origin
# "null") cannot pass, so Chromium refused it and no stepper rendered. Plain <script> tags load from file://.
nb_ipywidgets_js = {
    "widgets/require.js": {},
    "widgets/assets-path.js": {},
    "widgets/dist/embed-amd.js": {"data-jupyter-widgets-cdn": ""},
}
# No page needs math, so no page loads MathJax (Sphinx adds it only to pages with math). A page that
# starts to (a text/latex output) would load it from a CDN, and tests/test_docs_site.py fails on that.
suppress_warnings = ["mystnb.unknown_mime_type"]  # e.g. image/png next to its text/plain repr

# --- autodoc ----------------------------------------------------------------------------------------
autodoc_default_options = {"members": False}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
toc_object_entries_show_parents = "hide"  # the page contents list `VOCAB`, not `explainer.model.task.VOCAB`
napoleon_google_docstring = True

# --- HTML -------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "explainer"
html_static_path = ["_static"]
html_css_files = ["explainer.css"]
html_js_files = [("fa-config.js", {"priority": 100}), "diagram-focus.js",  # fa-config before the theme's fontawesome.js
                 "widgets-fallback.js"]
html_extra_path = ["_extra"]  # index.html at the site root: a link to docs/index.html
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "use_download_button": False,
    "use_fullscreen_button": False,
    # Notebook pages give the right-hand column to their outputs (wide diagrams, steppers); their sections
    # are listed in the left navigation instead.
    "secondary_sidebar_items": {"docs/*": ["page-toc"], "SOURCES": ["page-toc"], "notebooks/**": []},
    "show_navbar_depth": 1,
    "navbar_persistent": [],  # one search field (in the sidebar), not a second one in a top bar
}
# "Open in Binder" needs the public repository's address, e.g.
# DOCS_REPOSITORY_URL=https://github.com/OWNER/explainer make docs
_repo = os.environ.get("DOCS_REPOSITORY_URL", "").rstrip("/")
if _repo:
    html_theme_options.update(
        repository_url=_repo,
        repository_branch=os.environ.get("DOCS_REPOSITORY_BRANCH", "main"),
        use_repository_button=True,
        launch_buttons={"binderhub_url": "https://mybinder.org", "notebook_interface": "jupyterlab"},
    )
html_context = {"binder_repository": _repo, "default_mode": "light"}


def _widget_assets(app, exception):
    """Copy the widget manager, require.js and the icon fonts into _static/widgets/."""
    if exception or app.builder.format != "html":
        return
    src = Path(os.environ.get("EXPLAINER_JS_DIR", Path(sys.prefix) / "share" / "explainer-js"))
    dest = Path(app.outdir) / "_static" / "widgets"
    dist = dest / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / "require.js", dest / "require.js")
    for f in (src / "dist").iterdir():
        # the AMD bundle and the icon fonts its CSS names (woff2, with woff/ttf fallbacks; the .eot and .svg
        # fonts are for browsers that predate woff)
        if f.name == "embed-amd.js" or f.suffix in {".woff2", ".woff", ".ttf"}:
            shutil.copy2(f, dist / f.name)


def _check_widget_assets(app, config):
    src = Path(os.environ.get("EXPLAINER_JS_DIR", Path(sys.prefix) / "share" / "explainer-js"))
    if not (src / "dist" / "embed-amd.js").is_file() or not (src / "require.js").is_file():
        from sphinx.errors import ConfigError

        raise ConfigError(
            f"the widget manager is missing from {src}: run `scripts/setup.sh test` "
            "(it fetches @jupyter-widgets/html-manager and requirejs from npm), "
            "or set EXPLAINER_JS_DIR"
        )


def setup(app):
    app.connect("config-inited", _check_widget_assets)
    app.connect("build-finished", _widget_assets)
    return {"parallel_read_safe": True}
