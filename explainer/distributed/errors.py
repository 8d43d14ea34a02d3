"""Errors shared by the in-process PP group, the real ``GroupCoordinator`` and the launcher."""


class BroadcastMismatchError(RuntimeError, ValueError):
    """A receiver pre-allocated another dtype/shape than the sender broadcasts (NCCL would corrupt or hang)."""


class PeerTimeoutError(TimeoutError):
    """A peer did not arrive or did not answer within the comm timeout (``EXPLAINER_COMM_TIMEOUT``).
    The message names the phase (rendezvous, group-setup, name-agreement, shm-setup, first-transfer,
    steady-state, shutdown) and, when the launcher knows it, the peer's rank and pid."""


class LaunchError(RuntimeError):
    """Rank processes could not be started (e.g. the forkserver was stopped or killed twice)."""
