import sys

# Minute 0 may be an old interpreter: say so in one line, before importing code written for 3.10 (this file
# stays parseable by any Python).
if sys.version_info < (3, 10):
    sys.exit("explainer needs Python 3.10 or newer; this is Python %s (%s). Install Python 3.11 (python.org, "
             "brew install python@3.11, or apt-get install python3.11) and run: python3.11 -m explainer doctor"
             % (sys.version.split()[0], sys.executable))

from explainer.cli import main  # noqa: E402

raise SystemExit(main())
