"""Errors shared by the in-process PP group and the real ``GroupCoordinator``."""


class BroadcastMismatchError(RuntimeError, ValueError):
    """A receiver pre-allocated another dtype/shape than the sender broadcasts (NCCL would corrupt or hang)."""
