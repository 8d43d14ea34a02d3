"""The room board as a hub service: the hub starts it, and the hub says who is asking.

JupyterHub starts ``python -m explainer hub board`` with its service environment (``JUPYTERHUB_API_URL``,
``JUPYTERHUB_SERVICE_PREFIX`` = ``/services/board/``, the service's own token, its OAuth client); the board then
serves the usual routes under that prefix (``room.board.server``) with ``HubIdentity`` in place of the room token:

- ``POST api/report``: the request carries a token (``Authorization: token T``), the learner's server's
  ``JUPYTERHUB_API_TOKEN``; the hub says whose it is (``GET /hub/api/user`` with it, JupyterHub's ``HubAuth``;
  answers cached up to 5 minutes), and the report's seat must be that user's name (else 403). No token: 401; a
  token the hub does not know, or a service's: 403. No seat key: the hub's word is the proof.
- ``POST api/join``: 404 (on a hub nobody joins: every learner is already known by their hub name).
- the page, ``api/summary``, ``api/board``, ``api/events``: the instructor's. A browser signs in through the
  hub's OAuth (``HubOAuth``; the callback at ``oauth_callback`` sets the board's cookie); only a user with the
  scope to reach this service (JupyterHub's ``access:services``: the admin) gets the board, others 403.
"""

from __future__ import annotations

import os
import re

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from tornado.httputil import url_concat

TOKEN = re.compile(r"(?:token|bearer)\s+(\S+)\s*$", re.IGNORECASE)


class HubIdentity:
    def __init__(self, prefix: str):
        self.prefix = prefix
        self.hub_auth = HubOAuth.instance()

    async def admit(self, handler) -> str | None:
        route = handler.request.path[len(self.prefix):] if handler.request.path.startswith(self.prefix) else None
        if route == "api/report":
            return await self.learner(handler)
        if route == "api/join":
            handler.refuse(404, "on the hub nobody joins: a check reports under the learner's hub name")
            return None
        model = await self.hub_auth.get_user(handler, sync=False)
        if model is None:
            if route == "" and handler.request.method == "GET":
                self.sign_in(handler)
            else:
                handler.refuse(401, "the board is the instructor's: sign in to the hub first")
        elif not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            handler.refuse(403, f"the board is the instructor's; {model.get('name')!r} is signed in")
        return None

    async def learner(self, handler) -> str | None:
        found = TOKEN.match(handler.request.headers.get("Authorization", ""))
        if not found:
            handler.refuse(401, "a report to the hub's board carries the learner's token (JUPYTERHUB_API_TOKEN)")
            return None
        model = await self.hub_auth.user_for_token(found.group(1), sync=False)
        if not model or model.get("kind", "user") != "user" or not isinstance(model.get("name"), str):
            handler.refuse(403, "the hub does not know this token as a learner's")
            return None
        return model["name"]

    def page_fields(self, handler) -> dict[str, str]:
        """The page's requests are fetch()es authenticated by the hub's cookie, which JupyterHub accepts only with
        its XSRF check value (``_xsrf``, ``jupyterhub/_xsrf_utils.py``): the page carries it (reading it also sets
        the ``_xsrf`` cookie it is checked against)."""
        return {"xsrf": handler.xsrf_token.decode(), "empty": "No seats yet. Each learner appears here under their hub "
                "name with their first check."}

    def sign_in(self, handler) -> None:
        """Send the browser through the hub's OAuth, back to this page (as JupyterHub's own services do)."""
        params = {}
        verifier = None
        if self.hub_auth.pkce_enabled:
            verifier, challenge, method = self.hub_auth.generate_pkce_code_challenge()
            params.update(code_challenge=challenge, code_challenge_method=method)
        params["state"] = self.hub_auth.set_state_cookie(handler, next_url=handler.request.uri,
                                                         code_verifier=verifier)
        handler.redirect(url_concat(self.hub_auth.login_url, params))


def service() -> dict:
    """What ``room.board.server.serve`` needs to run as the hub's ``board`` service."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/board/")
    callback = os.environ.get("JUPYTERHUB_OAUTH_CALLBACK_URL", prefix + "oauth_callback")
    return {"auth": HubIdentity(prefix), "prefix": prefix, "handlers": [(callback, HubOAuthCallbackHandler)],
            "settings": {"cookie_secret": os.urandom(32)}}
