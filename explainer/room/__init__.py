"""The room board (``python -m explainer room serve``): the instructor sees the room's workshop checks live.

``client`` is the learner's side (the standard library only; ``join`` once, then the workshop's checks report
to the joined room); ``board`` is the instructor's server (tornado, SQLite, the page). This package file imports
only the client, so ``from explainer.room import join`` in a notebook loads neither the server nor torch.
"""

from explainer.room.client import join

__all__ = ["join"]
