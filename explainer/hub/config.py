"""JupyterHub's configuration for the room, from the settings ``hub serve`` wrote (``state.Settings``).

``hub serve`` starts ``jupyterhub -f STATE/jupyterhub_config.py``, a two-line file that calls ``configure(c)``.
What it sets, in JupyterHub's terms:

- the public proxy (configurable-http-proxy from ``make hub``) on ``listen:port``; the hub's own API and the
  proxy's API on loopback ports of their own; the hub's database, cookie secret and the proxy's pid file in the
  state folder (a restart keeps the database and the sign-in cookies);
- ``RoomCodeAuthenticator`` (name + room code) with the instructor as the one admin; ``LearnerSpawner`` (each
  learner's JupyterLab as their own account, with limits), opening the notebooks the learner's home holds;
- services: ``board`` (the room board, ``python -m explainer hub board``, at ``/services/board/``; reports carry
  the learner's token, the page is the instructor's), ``idle-culler`` (``jupyterhub-idle-culler``: a server idle
  ``cull_after`` seconds is stopped; its files stay) and ``explainer-admin`` (no process: its token, in the state
  folder, lets ``hub serve`` and the bench use the hub's REST API).
"""

from __future__ import annotations

import os
import sys

from explainer.hub.authenticator import RoomCodeAuthenticator
from explainer.hub.limits import Limits, group_for
from explainer.hub.spawner import BOARD_PATH, LearnerSpawner
from explainer.hub.state import State

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
ADMIN_SCOPES = ["admin:users", "admin:servers", "tokens", "list:users", "read:users", "read:servers",
                "access:servers", "read:hub", "access:services", "list:services", "read:services"]
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]


def configure(c) -> None:
    state = State(os.environ["EXPLAINER_HUB_STATE"])
    s = state.settings()
    venv = str(s.venv)
    python = os.path.join(venv, "bin", "python")
    hub_env = {"EXPLAINER_HUB_STATE": str(state.path), "PATH": f"{venv}/bin:/usr/bin:/bin"}

    c.JupyterHub.ip, c.JupyterHub.port = s.listen, s.port
    c.JupyterHub.hub_ip, c.JupyterHub.hub_port = "127.0.0.1", s.hub_port
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s.proxy_api_port}"
    c.ConfigurableHTTPProxy.command = [os.path.join(s.prefix, "proxy", "node_modules", ".bin",
                                                    "configurable-http-proxy")]
    c.ConfigurableHTTPProxy.pid_file = str(state.file("proxy.pid"))
    c.JupyterHub.db_url = f"sqlite:///{state.file('jupyterhub.sqlite')}"
    c.JupyterHub.cookie_secret_file = str(state.file("jupyterhub_cookie_secret"))
    c.JupyterHub.pid_file = str(state.file("jupyterhub.pid"))
    c.JupyterHub.cleanup_servers = True          # a stopped hub stops the learners' servers (their files stay)
    c.JupyterHub.cleanup_proxy = True
    c.JupyterHub.concurrent_spawn_limit = 20
    c.JupyterHub.template_paths = [TEMPLATES]       # the login form in the room's words: name, room code
    c.JupyterHub.template_vars = {"announcement_login": "Type your name and the room code shown on the projector."}

    c.JupyterHub.authenticator_class = RoomCodeAuthenticator
    c.Authenticator.allow_all = True              # authenticate() decides: the room code and the name rules
    c.Authenticator.admin_users = {s.instructor}

    limits = Limits(s.memory, s.processes, group_for(s.account_prefix))
    LearnerSpawner.limits = limits
    c.JupyterHub.spawner_class = LearnerSpawner
    c.Spawner.cmd = [os.path.join(venv, "bin", "jupyterhub-singleuser")]
    c.Spawner.notebook_dir = "~"
    c.Spawner.default_url = "/lab/tree/notebooks/workshop/exercises.ipynb"
    c.Spawner.args = ["--ServerApp.terminado_settings={'shell_command': ['/bin/bash']}"]
    c.Spawner.start_timeout = 120
    c.Spawner.http_timeout = 90
    c.Spawner.environment = {"EXPLAINER_ROOM": f"http://127.0.0.1:{s.board_port}{BOARD_PATH}"}   # the board itself

    c.JupyterHub.services = [
        {"name": "board", "url": f"http://127.0.0.1:{s.board_port}", "display": True, "oauth_no_confirm": True,
         "command": [python, "-m", "explainer", "hub", "board"], "environment": hub_env},
        {"name": "idle-culler", "environment": hub_env,
         "command": [python, "-m", "jupyterhub_idle_culler", f"--timeout={s.cull_after}", "--cull-every=60"]},
        {"name": "explainer-admin", "api_token": state.admin_token()},
    ]
    c.JupyterHub.load_roles = [
        {"name": "explainer-admin", "scopes": ADMIN_SCOPES, "services": ["explainer-admin"]},
        {"name": "idle-culler", "scopes": CULLER_SCOPES, "services": ["idle-culler"]},
    ]
    print(f"explainer hub: limits per learner: {limits.describe()}", file=sys.stderr, flush=True)
