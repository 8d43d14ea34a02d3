"""DOT source -> an SVG picture that fits its column: natural size up to the column width, scaled below it.

``Graph(dot)`` displays in Jupyter (``_repr_svg_``) and keeps ``.source`` for the check-only cells that print
the DOT text for nbval. The SVG gets ``width="100%"`` with its natural width as ``max-width``, so a
1000 px column shows it 1:1 and a 700 px one scales it instead of cutting off the path taken.
"""

from __future__ import annotations

import re

import graphviz

__all__ = ["Graph", "fit_svg", "strip_svg"]


def strip_svg(svg: str) -> str:
    """Drop the XML prolog and comments (graphviz version, titles): smaller, and stable from run to run."""
    svg = svg[svg.find("<svg"):] if "<svg" in svg else svg
    return re.sub(r"<!--.*?-->", "", svg, flags=re.S)


def fit_svg(svg: str) -> str:
    """Graphviz SVG text -> the same drawing, responsive: prolog and comments dropped, width 100 % up to natural."""
    return re.sub(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"',
                  lambda m: f'<svg width="100%" style="max-width:{m.group(1)}pt;height:auto"', strip_svg(svg), count=1)


class Graph:
    """A DOT picture for a notebook cell; ``print(g.source)`` gives the DOT text."""

    def __init__(self, source: str):
        self.source = source

    def _repr_svg_(self) -> str:
        return fit_svg(graphviz.Source(self.source).pipe(format="svg").decode())

    def __repr__(self) -> str:
        return f"Graph({self.source.split('{', 1)[0].strip()})"
