"""The exercises, one module each (what a module declares: ``explainer/workshop/catalog.py``). Nothing here: the
catalog finds the modules in this folder."""
