"""Errors shared by every layer.

``UsageError`` is bad input from a person: the CLI prints its message on one line and exits with 2.
It derives from ``ValueError`` so library callers can catch it the ordinary way.
"""


class UsageError(ValueError):
    """Bad input; the message names the bad value and the accepted range."""
