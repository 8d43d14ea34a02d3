"""The room past one machine: the same sign-in and board inside Zero to JupyterHub's hub pod (``deploy/kubernetes``).

The chart's ``hub.extraConfig`` calls ``configure(c)`` in the hub pod (an image ``FROM`` the chart's hub image
with this package added: ``deploy/kubernetes/hub.Dockerfile``). What differs from ``config.configure``, the room
on one machine:

- the state folder is ``EXPLAINER_HUB_STATE`` on the hub's own volume (the chart's ``/srv/jupyterhub``, kept
  across hub restarts): the room code, the instructor's code, the names (``learners.json``), the board's database;
- ``PodRoomCodeAuthenticator``: the same login form, room code, name rules and buckets as ``RoomCodeAuthenticator``,
  but no Unix account per learner: each learner's server is a pod of its own (KubeSpawner), running as the image's
  user, with a volume of its own as home; the pod, not an account, is what keeps learners apart;
- the board (``python -m explainer hub board``) runs in the hub pod as the chart's managed service ``board`` and
  listens on ``BOARD_PORT`` on every address of the pod: the proxy reaches it through the hub's Service (an
  extra port), a learner's pod reaches it for reports (``EXPLAINER_ROOM``); the hub's network policy admits
  those two on that port only;
- limits, the idle culler, the image, the home volume and the notebooks' first copy are the chart's values
  (``deploy/kubernetes/values.yaml``), not set here.
"""

from __future__ import annotations

import os

from explainer.hub.authenticator import RoomCodeAuthenticator
from explainer.hub.config import TEMPLATES
from explainer.hub.spawner import BOARD_PATH
from explainer.hub.state import Settings, State

BOARD_PORT = 10101
STATE = "/srv/jupyterhub/explainer"           # on the chart's hub volume (hub.db.type: sqlite-pvc)
BOARD_URL = f"http://hub:{BOARD_PORT}{BOARD_PATH}"    # through the chart's Service ``hub`` in front of the hub pod


class PodRoomCodeAuthenticator(RoomCodeAuthenticator):
    """``RoomCodeAuthenticator`` without Unix accounts: a name is kept in the registry only."""

    async def add_user(self, user):
        if user.name not in self.learners.by_name:
            self.learners.add(user.name, None)
        return super(RoomCodeAuthenticator, self).add_user(user)

    def delete_user(self, user):
        """The admin deleted a user: the name is free again (their home volume is the cluster's to delete)."""
        if self.learners.by_name.pop(user.name, None) is not None:
            self.learners.by_skeleton = {k: v for k, v in self.learners.by_skeleton.items() if v != user.name}
            self.learners.save()
        return super(RoomCodeAuthenticator, self).delete_user(user)


def room_state(path: str) -> State:
    """The state folder with its settings (written once: a restarted hub pod reads the same ones back)."""
    state = State(path)
    if not state.file("settings.json").exists():
        state.save_settings(Settings(prefix="/nonexistent", homes="/nonexistent", listen="0.0.0.0", port=8000,
                                     board_port=BOARD_PORT, max_learners=200, extra={"board_listen": "0.0.0.0"}))
    state.room_code()
    state.instructor_code()
    return state


def seat(spawner) -> None:
    """KubeSpawner's ``pre_spawn_hook``: the learner's server knows the learner's hub name (as on one machine)."""
    spawner.environment["EXPLAINER_SEAT"] = spawner.user.name


def configure(c, state_dir: str | None = None) -> None:
    path = state_dir or os.environ.setdefault("EXPLAINER_HUB_STATE", STATE)
    state = room_state(path)
    s = state.settings()
    c.JupyterHub.authenticator_class = PodRoomCodeAuthenticator
    c.PodRoomCodeAuthenticator.state_dir = str(state.path)
    c.Authenticator.allow_all = True              # authenticate() decides: the room code and the name rules
    c.Authenticator.admin_users = {s.instructor}
    c.JupyterHub.template_paths = [TEMPLATES]
    c.JupyterHub.template_vars = {"announcement_login": "Type your name and the room code shown on the projector."}
    c.KubeSpawner.pre_spawn_hook = seat          # EXPLAINER_ROOM (BOARD_URL) is the chart's singleuser.extraEnv
