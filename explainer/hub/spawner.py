"""Each learner's JupyterLab: JupyterHub's ``LocalProcessSpawner``, run as the learner's own Unix account.

JupyterHub's local spawner runs a server as the Unix account named like the hub user; here the hub name is the
learner's chosen name and the account is ``accounts.Learners.account(name)`` (``exl-007``), so the account's
name, home and ids come from the registry. Before the server's process becomes the learner it joins the
learner's control groups and takes the resource limits (``limits.Limits.preexec``). Its environment: the hub's
venv first on ``PATH``, ``HOME`` the learner's home, ``SHELL`` bash (the account has no login shell; a terminal
in JupyterLab still needs one), ``EXPLAINER_ROOM`` the room board (a hub service) and ``EXPLAINER_SEAT`` the
learner's hub name; with ``JUPYTERHUB_API_TOKEN`` (the server's own token, which JupyterHub gives every server)
a check's report tells the board who the learner is.
"""

from __future__ import annotations

import os
import pwd

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import default

from explainer.hub.accounts import trust_store
from explainer.hub.limits import Limits
from explainer.hub.state import State

BOARD_PATH = "/services/board/"


class LearnerSpawner(LocalProcessSpawner):
    limits: Limits | None = None          # one per hub: set by config.configure

    @default("env_keep")
    def _env_keep(self):
        return ["LANG", "LC_ALL"]

    def account(self) -> pwd.struct_passwd:
        learners = self.authenticator.learners
        return learners.ensure_account(self.user.name)

    def user_env(self, env):
        user = self.account()
        venv = os.path.join(State(os.environ["EXPLAINER_HUB_STATE"]).settings().prefix, "venv")
        env.update(USER=user.pw_name, LOGNAME=user.pw_name, HOME=user.pw_dir, SHELL="/bin/bash",
                   PATH=f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", VIRTUAL_ENV=venv,
                   EXPLAINER_SEAT=self.user.name)
        return env

    def get_args(self):
        """The learner's own signature store: opening a notebook writes to it (the venv's is read-only to them)."""
        return [*super().get_args(), f"--NotebookNotary.db_file={trust_store(self.account().pw_dir)}"]

    def make_preexec_fn(self, name):
        user = self.account()
        become = set_user_setuid(user.pw_name)
        limit = self.limits.preexec(self.limits.prepare(user.pw_name)) if self.limits else (lambda: None)

        def preexec():
            limit()                               # as root: join the learner's groups, set the limits
            become()                              # then the learner's groups and uid, and cd to the home
        return preexec
