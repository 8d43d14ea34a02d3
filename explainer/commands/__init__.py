"""Subcommands of ``python -m explainer``; each module is discovered by ``explainer.cli``."""
