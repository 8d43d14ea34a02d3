"""The room board (``python -m explainer room serve``): the instructor sees the room's workshop checks live.

``client`` is the learner's side (the standard library only; the workshop's checks call it when
``EXPLAINER_ROOM`` is set); ``board`` is the instructor's server (tornado, SQLite, the page). This package
file imports nothing, so importing the client loads neither the server nor torch.
"""
