"""Small Sphinx additions for the explainer site.

- Optional pages: `docs/index.md` holds the line `% optional-pages`; it becomes toctree entries for the
  pages that exist (the instructor's guide, the workshop notebooks, SOURCES.md), so a missing page never
  breaks the build and a present one is never orphaned.
- The workshop route: `docs/index.md` holds the line `% workshop-route`; it becomes the route's toctree entries,
  each notebook an exercise follows and then that exercise's page (`docs/exercise-ID.md`), in the catalog's
  order (`explainer.workshop.catalog`: one module per exercise), so a new exercise joins the route by itself.
- API completeness: any `explainer` name a notebook uses that `docs/api.md` does not document yet is
  appended to that page (autodoc), so the reference never misses what the notebooks call.
- Glossary: one file, `notebooks/glossary.md`, plain Markdown with an `<a id="term-ID">` anchor per word, so
  JupyterLab (served from `notebooks/`) opens a notebook's link `[text](glossary.md#term-ID)` rendered and
  scrolled to the word. On the site, `docs/glossary.md` holds the line `% glossary-terms`; it becomes a Sphinx
  glossary made from that file, and every glossary link (in the notebooks and inside the definitions) becomes
  the `{term}` role, so Sphinx checks that the term exists.
- Pictures: every SVG rendered from a notebook output gets an `alt` made from the diagram's own words
  (label, groups, number of boxes, the path taken), read from the SVG file itself, and its own scroll
  box: it shrinks with the column down to 75 % of its size, then scrolls. Plots get their section's title.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import re
from pathlib import Path
from xml.etree import ElementTree

from docutils import nodes
from sphinx.util import logging

from explainer.workshop.catalog import EXERCISES

logger = logging.getLogger(__name__)

SVG_NS = "{http://www.w3.org/2000/svg}"
MARKER = "% optional-pages"
SOURCES_MARKER = "% sources-page"
ROUTE_MARKER = "% workshop-route"


def workshop_route() -> list[str]:
    """The route's toctree entries: each notebook an exercise follows, then its exercises' pages."""
    route = []
    for ex in EXERCISES.values():
        if f"/notebooks/{ex.follows}" not in route:
            route.append(f"/notebooks/{ex.follows}")
        route.append(f"exercise-{ex.id}")
    return route


def _optional_pages(app, config):
    """Which optional pages exist in this source tree; one sources page, never two."""
    root = Path(app.srcdir)
    has_sources = (root / "SOURCES.md").exists()
    app.env_optional = [
        *(["/docs/instructor-guide"] if (root / "docs" / "instructor-guide.md").exists() else []),
        *("/notebooks/workshop/" + p.stem for p in sorted((root / "notebooks" / "workshop").glob("*.ipynb"))),
    ]
    app.env_sources = "/SOURCES" if has_sources else "/docs/sources"
    config.exclude_patterns = [*config.exclude_patterns, "docs/sources.md" if has_sources else "SOURCES.md"]


def _fill_optional_pages(app, docname, source):
    if MARKER in source[0]:
        source[0] = source[0].replace(MARKER, "\n".join(app.env_optional))
    if SOURCES_MARKER in source[0]:
        source[0] = source[0].replace(SOURCES_MARKER, app.env_sources)
    if ROUTE_MARKER in source[0]:
        source[0] = source[0].replace(ROUTE_MARKER, "\n".join(workshop_route()))


GLOSSARY = Path("notebooks") / "glossary.md"
GLOSSARY_MARKER = "% glossary-terms"
# a notebook's link to a glossary word: glossary.md#term-ID from notebooks/, ../glossary.md from notebooks/workshop/;
# inside the glossary itself, #term-ID
# (and the older ../docs/glossary.md#term-ID, which JupyterLab cannot open from notebooks/)
GLOSSARY_LINK = re.compile(r"\[([^\]\[\n\"]+)\]\((?:(?:\.\./)*(?:docs/)?glossary\.md)?#term-([^)\s]+)\)")
GLOSSARY_ENTRY = re.compile(r'<a id="term-([^"]+)"></a>\s*\n\s*#+ ([^\n]+)\n(.*?)(?=<a id="term-|\Z)', re.S)


def glossary_entries(root: Path) -> list[tuple[str, str, str]]:
    """(anchor id without `term-`, the term, its definition) of every word in the glossary, in order."""
    text = (root / GLOSSARY).read_text(encoding="utf-8")
    return [(m.group(1), m.group(2).strip(), m.group(3).strip()) for m in GLOSSARY_ENTRY.finditer(text)]


def glossary_terms(root: Path) -> dict[str, str]:
    """Anchor id (`term-` + the term, spaces as dashes, as Sphinx makes it) -> the term."""
    return {anchor: term for anchor, term, _ in glossary_entries(root)}


def _term_roles(text: str, terms: dict[str, str], where: str) -> str:
    def role(m):
        label, anchor = m.group(1).replace("`", ""), m.group(2)
        if anchor not in terms:
            logger.warning(f"{where}: glossary link to unknown term #term-{anchor}")
            return m.group(0)
        return f"{{term}}`{label} <{terms[anchor]}>`"
    return GLOSSARY_LINK.sub(role, text)


def _glossary_links(app, docname, source):
    root = Path(app.srcdir)
    if not (root / GLOSSARY).is_file():
        if docname.startswith("notebooks/") or GLOSSARY_MARKER in source[0]:
            logger.warning(f"{docname}: {GLOSSARY} is missing: the glossary's words and the notebooks' links need it")
        return
    if docname.startswith("notebooks/"):
        source[0] = _term_roles(source[0], glossary_terms(root), docname)
    elif GLOSSARY_MARKER in source[0]:
        entries = glossary_entries(root)
        terms = {anchor: term for anchor, term, _ in entries}
        for anchor, term, _ in entries:
            if anchor != term.replace(" ", "-"):
                logger.warning(f"{GLOSSARY}: anchor term-{anchor} does not match its word {term!r} (Sphinx's id)")
        body = "\n\n".join(f"{term}\n" + "\n".join(f"  {line}" if line.strip() else "" for line in
                                                  _term_roles(text, terms, str(GLOSSARY)).splitlines())
                         for _, term, text in entries)
        source[0] = source[0].replace(GLOSSARY_MARKER, f"```{{glossary}}\n{body}\n```")


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def notebook_api_names(notebooks) -> set[str]:
    """Dotted ``explainer`` names the notebooks' code cells import or use as ``module.attribute``."""
    used = set()
    for path in notebooks:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        code = "\n".join(
            line for cell in nb["cells"] if cell["cell_type"] == "code"
            for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
        tree = ast.parse(code)
        modules = {}  # local name -> explainer module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("explainer"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if _is_module(full):
                        modules[a.asname or a.name] = full
                    else:
                        used.add(full)
            elif isinstance(node, ast.Import):
                modules.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("explainer")})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                used.add(f"{modules[node.value.id]}.{node.attr}")
    return used


def _directive(full: str) -> str:
    module, name = full.rsplit(".", 1)
    obj = getattr(importlib.import_module(module), name)
    kind = "autoclass" if inspect.isclass(obj) else "autofunction" if callable(obj) else "py:data"
    return f".. {kind}:: {full}\n"


def _complete_api(app, docname, source):
    if docname != app.config.api_page:
        return
    root = Path(app.srcdir)
    notebooks = [*sorted(root.glob("notebooks/*.ipynb")), *sorted(root.glob("notebooks/workshop/*.ipynb"))]
    missing = sorted(n for n in notebook_api_names(notebooks) if not re.search(rf"\b{re.escape(n)}\b", source[0]))
    if missing:
        rst = "\n".join(_directive(n) for n in missing)
        source[0] += f"\n## Other names the notebooks use\n\n```{{eval-rst}}\n{rst}```\n"


def _texts(g) -> list[str]:
    return [t.text.strip() for t in g.findall(f"{SVG_NS}text") if t.text and t.text.strip()]


def svg_alt_text(svg_text: str) -> str:
    """One sentence describing a graphviz SVG from its own words: label, groups, boxes, the path taken."""
    svg_text = re.sub(r"<!DOCTYPE[^>]*>", "", svg_text)
    root = ElementTree.fromstring(svg_text.encode("utf-8"))

    def has(g, cls):
        return cls in (g.get("class") or "").split()

    graph = next((g for g in root.iter(f"{SVG_NS}g") if has(g, "graph")), None)
    if graph is None:
        return "Diagram"
    title = (graph.findtext(f"{SVG_NS}title") or "").strip()
    label = " ".join(_texts(graph))  # the graph's own label, not its nodes' or clusters'
    groups = [" ".join(_texts(g)) for g in graph.iter(f"{SVG_NS}g") if has(g, "cluster") and _texts(g)]
    nodes_ = [g for g in graph.iter(f"{SVG_NS}g") if has(g, "node")]
    taken = [_texts(g)[0] for g in nodes_ if has(g, "taken") and _texts(g)]  # render.comm_dot marks the route
    name = label or (title.replace("_", " ") if title and not title.startswith("%") else "")
    text = f"Diagram: {name}" if name else "Diagram"
    if groups:
        text += "; groups: " + ", ".join(groups)
    text += f"; {len(nodes_)} boxes"
    if taken:
        text += "; path taken: " + " → ".join(taken)
    return text


def svg_focus(svg_text: str) -> float | None:
    """Where the path taken is, as a fraction of the diagram's width (the mean x of its highlighted boxes)."""
    svg_text = re.sub(r"<!DOCTYPE[^>]*>", "", svg_text)
    root = ElementTree.fromstring(svg_text.encode("utf-8"))
    view = (root.get("viewBox") or "").split()
    xs = [float(t.get("x")) for g in root.iter(f"{SVG_NS}g") if {"node", "taken"} <= set((g.get("class") or "").split())
          for t in g.findall(f"{SVG_NS}text") if t.get("x")]
    if len(view) != 4 or not xs or float(view[2]) <= 0:
        return None
    return min(max(sum(xs) / len(xs) / float(view[2]), 0.0), 1.0)


def svg_css_width(svg_text: str) -> float | None:
    """The SVG's own width in CSS pixels (graphviz writes points: 1 pt = 4/3 px)."""
    m = re.search(r'<svg[^>]*\swidth="([\d.]+)(pt|px)?"', svg_text)
    if not m:
        return None
    return float(m.group(1)) * (4 / 3 if m.group(2) == "pt" else 1)


def _section_title(node) -> str:
    while node is not None and not isinstance(node, nodes.section):
        node = node.parent
    return node.next_node(nodes.title).astext() if node is not None else ""


def _pictures(app, doctree, docname):
    """Alt text for every picture from a notebook output; SVG diagrams get their own scroll box."""
    for img in list(doctree.findall(nodes.image)):
        uri = img.get("uri", "")
        path = Path(app.srcdir) / uri.lstrip("/")
        if not path.is_file():
            path = Path(app.srcdir) / Path(docname).parent / uri
        if uri.endswith(".svg") and path.is_file():
            if not img.get("alt"):
                img["alt"] = svg_alt_text(path.read_text(encoding="utf-8"))
            box = nodes.container(classes=["xp-diagram-box"])
            img.replace_self(box)
            box += img
            img["classes"].append("xp-diagram")
        elif not img.get("alt"):
            # a plot (PNG): its own words are not in the file; name the section it illustrates
            img["alt"] = f"Figure: {_section_title(img) or docname}"


MIN_SCALE = 0.66  # below this a diagram's 10 pt labels get too small to read: scroll instead (the widest
                  # diagram today, 1404 px, still fits the 960 px column at 1280 px)


def _diagram_min_width(app, exception):
    """Each SVG diagram shrinks with the column down to MIN_SCALE of its own width, then scrolls in its box;
    it never grows past its own width, a click opens it at full size, and a box that scrolls opens on the
    path taken (`data-focus`, read by _static/diagram-focus.js)."""
    if exception or app.builder.format != "html":
        return
    out = Path(app.outdir)
    img_re = re.compile(r'<img ([^>]*)class="([^"]*xp-diagram[^"]*)"([^>]*)src="([^"]+\.svg)"([^>]*)>')
    for page in out.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        if "xp-diagram" not in html:
            continue

        def style(m):
            svg = (page.parent / m.group(4)).resolve()
            text = svg.read_text(encoding="utf-8") if svg.is_file() else ""
            width = svg_css_width(text) if text else None
            focus = svg_focus(text) if text else None
            css = (f' style="width: min(100%, {round(width)}px); min-width: {round(width * MIN_SCALE)}px"'
                   if width else "")
            img = f'<img {m.group(1)}class="{m.group(2)}"{m.group(3)}src="{m.group(4)}"{css}{m.group(5)}>'
            at = f' data-focus="{focus:.3f}"' if focus is not None else ""
            return f'<a class="xp-diagram-link" href="{m.group(4)}"{at} title="open the diagram at full size">{img}</a>'

        page.write_text(img_re.sub(style, html), encoding="utf-8")


def setup(app):
    app.connect("config-inited", _optional_pages)
    app.add_config_value("api_page", "docs/api", "env")
    app.connect("source-read", _fill_optional_pages)
    app.connect("source-read", _complete_api)
    app.connect("source-read", _glossary_links)
    app.connect("doctree-read", lambda app, doctree: _pictures(app, doctree, app.env.docname))
    app.connect("build-finished", _diagram_min_width)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
