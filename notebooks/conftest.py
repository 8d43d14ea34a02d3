"""nbval settings for the notebooks: SVG is never compared (the DOT source is printed and compared instead)."""


def pytest_collectstart(collector):
    if str(getattr(collector, "path", "")).endswith(".ipynb"):
        collector.skip_compare += ("image/svg+xml", "image/png")
