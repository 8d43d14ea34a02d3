"""Session set-up shared by every test file.

A runner that starts the suite in the background of a non-interactive shell (`cmd &`) starts it with
SIGINT ignored, and an ignored signal stays ignored across exec: every process a test starts would then
shrug off the Ctrl-C that the interrupt tests send. Give SIGINT its usual meaning again here, so the
processes the tests start get the default disposition, as in a terminal.
"""

import signal

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# This user's settings and state (the joined room, its seat keys, the board's default database) live under
# XDG_CONFIG_HOME and XDG_STATE_HOME: point both at a folder of this run, so no test reads or writes the
# machine's own (a room joined on this machine must not receive the tests' reports).
import atexit  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

_HOME = tempfile.mkdtemp(prefix="explainer-tests-xdg-")
atexit.register(shutil.rmtree, _HOME, True)
os.environ["XDG_CONFIG_HOME"] = os.path.join(_HOME, "config")
os.environ["XDG_STATE_HOME"] = os.path.join(_HOME, "state")
for _var in ("EXPLAINER_ROOM", "EXPLAINER_SEAT"):
    os.environ.pop(_var, None)
