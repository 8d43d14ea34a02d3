"""The render layer: pure functions from a run (a ``Trace``, a recorder, a scenario's records) to HTML strings,
graphviz DOT source and SVG; no widgets, no state of their own."""
