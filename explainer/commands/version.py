"""``python -m explainer version``."""

import platform

import explainer


HELP = "print the package, torch and Python versions"


def configure(parser):
    pass


def run(args):
    import torch          # the parser imports every command: torch loads only when this one runs
    print(f"explainer {explainer.__version__}  torch {torch.__version__}  python {platform.python_version()}")
    return 0
