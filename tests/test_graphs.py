import re

from explainer.render.dot_picture import Graph, fit_svg


def test_graph_svg_scales_below_its_natural_width_and_keeps_the_dot_source():
    g = Graph('digraph t { a [label="✓ yes"]; a -> b; }')
    svg = g._repr_svg_()
    assert svg.startswith("<svg") and "<!--" not in svg and "✓ yes" in svg
    natural = re.search(r'<svg width="100%" style="max-width:([\d.]+)pt;height:auto"', svg)
    assert natural and float(natural.group(1)) > 0 and ' height="' not in svg.split(">", 1)[0]
    assert g.source.startswith("digraph t") and repr(g) == "Graph(digraph t)"
    assert fit_svg('<?xml?><!-- x --><svg width="10pt" height="5pt">') == '<svg width="100%" style="max-width:10pt;height:auto">'
