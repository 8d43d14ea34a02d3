"""Session set-up shared by every test file.

A runner that starts the suite in the background of a non-interactive shell (`cmd &`) starts it with
SIGINT ignored, and an ignored signal stays ignored across exec: every process a test starts would then
shrug off the Ctrl-C that the interrupt tests send. Give SIGINT its usual meaning again here, so the
processes the tests start get the default disposition, as in a terminal.
"""

import signal

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
