"""Small Sphinx additions for the explainer site.

- Optional pages: `docs/index.md` holds the line `% optional-pages`; it becomes toctree entries for the
  pages that exist (the instructor's guide, the workshop notebooks, SOURCES.md), so a missing page never
  breaks the build and a present one is never orphaned.
- Alt text: every SVG picture rendered from a notebook output gets an `alt` made from the diagram's own
  words (the graph's label, its group labels, how many boxes), read from the SVG file itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.etree import ElementTree

from docutils import nodes

SVG_NS = "{http://www.w3.org/2000/svg}"
MARKER = "% optional-pages"
SOURCES_MARKER = "% sources-page"


def _fill_optional_pages(app, docname, source):
    if MARKER in source[0]:
        source[0] = source[0].replace(MARKER, "\n".join(app.config.optional_pages))
    if SOURCES_MARKER in source[0]:
        source[0] = source[0].replace(SOURCES_MARKER, app.config.sources_page)


def svg_alt_text(svg_text: str) -> str:
    """One sentence describing a graphviz SVG from its own text: label, groups, number of boxes."""
    svg_text = re.sub(r"<!DOCTYPE[^>]*>", "", svg_text)
    root = ElementTree.fromstring(svg_text.encode("utf-8"))
    graph = next((g for g in root.iter(f"{SVG_NS}g") if g.get("class") == "graph"), None)
    if graph is None:
        return "Diagram"
    title = (graph.findtext(f"{SVG_NS}title") or "").strip()
    # the graph label is the graph's own <text> children (not those of its nodes or clusters)
    label = " ".join(t.text.strip() for t in graph.findall(f"{SVG_NS}text") if t.text)
    groups = []
    boxes = 0
    for g in graph.iter(f"{SVG_NS}g"):
        if g.get("class") == "cluster":
            words = " ".join(t.text.strip() for t in g.findall(f"{SVG_NS}text") if t.text)
            if words:
                groups.append(words)
        elif g.get("class") == "node":
            boxes += 1
    name = label or (title if title and not title.startswith("%") else "")
    text = f"Diagram: {name.replace('_', ' ')}" if name else "Diagram"
    if groups:
        text += "; groups: " + ", ".join(groups)
    return f"{text}; {boxes} boxes"


def _svg_alt(app, doctree, docname):
    for img in doctree.findall(nodes.image):
        uri = img.get("uri", "")
        if not uri.endswith(".svg") or img.get("alt"):
            continue
        path = Path(app.srcdir) / uri.lstrip("/")
        if not path.is_file():
            path = Path(app.srcdir) / Path(docname).parent / uri
        if path.is_file():
            img["alt"] = svg_alt_text(path.read_text(encoding="utf-8"))


def setup(app):
    app.add_config_value("optional_pages", [], "env")
    app.add_config_value("sources_page", "/docs/sources", "env")
    app.connect("source-read", _fill_optional_pages)
    app.connect("doctree-read", lambda app, doctree: _svg_alt(app, doctree, app.env.docname))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
