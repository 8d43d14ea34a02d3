"""The room on one machine: a JupyterHub whose learners sign in with their name and the room code (``hub serve``).

``state`` is the hub's own folder (the room code, its settings, what a restart keeps); ``accounts`` the learners'
names and their Unix accounts; ``limits`` what one learner's server may use (cgroups, else resource limits);
``authenticator`` and ``spawner`` are what JupyterHub loads (``config`` wires them); ``board_auth`` lets the room
board (``explainer.room.board``) run as a hub service that knows each learner by their hub name; ``serve`` starts
and stops it all. JupyterHub itself is imported only by ``authenticator``, ``spawner``, ``config`` and
``board_auth``, which run inside the hub's venv (``make hub``).
"""
