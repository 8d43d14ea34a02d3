"""Sign-in on the hub's own login form: the learner's name as the user name, the room code as the password.

JupyterHub calls ``authenticate`` with the form; it returns the learner's hub name or raises an HTTP error whose
message the login form shows. In order:

1. an address that typed ``WRONG_BURST`` wrong codes is refused (429) until its bucket refills (one try per
   ``WRONG_EVERY`` seconds), whatever it types next; so is everyone once the whole room typed ``ROOM_WRONG_BURST``;
2. the name follows the board's seat rules (``accounts.clean_name``: escapes, look-alike letters mixed with
   Latin, a ``/``: 400);
3. the code: the room code, or for the instructor's name (and its look-alikes) the instructor's own code; a
   wrong one is 403 and spends the address's bucket;
4. a name already taken signs in only from the browser that took it (its signed cookie holds the key whose hash
   the registry keeps), else 409; the instructor signs in from anywhere with their code;
5. a new name: refused when the room holds ``max_learners`` (409), when this address already took
   ``names_per_address`` names (429; the hub's own machine is not counted), or past ``NEW_BURST`` new names at
   once (429, one more every ``NEW_EVERY`` s). Else the name is kept for this browser and its account made.

The instructor (``Settings.instructor``) is the hub's admin. Names are kept as typed (after the seat rules),
not lowercased: ``normalize_username`` does not change a clean name.
"""

from __future__ import annotations

import os
import secrets

from jupyterhub.auth import Authenticator
from tornado import web
from traitlets import Unicode, default

from explainer.hub import accounts
from explainer.hub.sign_in_limits import (NEW_BURST, NEW_EVERY, OWN_MACHINE, ROOM_WRONG_BURST, ROOM_WRONG_EVERY,
                                          WRONG_BURST, WRONG_EVERY, Bucket)
from explainer.hub.state import State, same_code
from explainer.room import seat_names

def typed_name(handler, data) -> str:
    """The name as the form sent it: tornado's ``get_argument`` turns control characters into spaces, and an
    escape character must be refused, not quietly made a space."""
    raw = handler.request.body_arguments.get("username") if handler.request.method == "POST" else None
    return raw[0].decode("utf-8", "replace").strip(" ") if raw else data.get("username", "")


def refuse(status: int, message: str):
    return web.HTTPError(status, "%s", message)


class RoomCodeAuthenticator(Authenticator):
    state_dir = Unicode(help="the hub's state folder (explainer.hub.state)").tag(config=True)

    @default("state_dir")
    def _state_dir(self):
        return os.environ.get("EXPLAINER_HUB_STATE", "")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.state = State(self.state_dir)
        self.settings = self.state.settings()
        self.learners = accounts.Learners(self.state, self.settings.account_prefix, self.settings.homes,
                                          os.path.join(self.settings.prefix, "notebooks"), self.settings.instructor)
        self.wrong = Bucket(WRONG_BURST, WRONG_EVERY)
        self.room_wrong = Bucket(ROOM_WRONG_BURST, ROOM_WRONG_EVERY)
        self.new_names = Bucket(NEW_BURST, NEW_EVERY)
        self.names_from: dict[str, int] = {}

    def normalize_username(self, username):
        try:
            return accounts.clean_name(username)
        except accounts.NameRefused:
            return username                       # validate_username refuses it next

    def validate_username(self, username):
        try:
            return accounts.clean_name(username) == username and super().validate_username(username)
        except accounts.NameRefused:
            return False

    def cookie(self, learner: accounts.Learner) -> str:
        return f"explainer-name-{learner.account}"

    async def authenticate(self, handler, data):
        address = handler.request.remote_ip or "?"
        wait = max(self.wrong.wait(address), self.room_wrong.wait(""))
        if wait:
            raise refuse(429, f"Too many wrong room codes from here: wait {wait:.0f} s, then type the code on the "
                              "board or the projector.")
        try:
            name = accounts.clean_name(typed_name(handler, data))
        except accounts.NameRefused as exc:
            raise refuse(exc.status, f"{exc} (letters of one alphabet, no control characters).") from None
        instructor = seat_names.look_alike(name, self.settings.instructor)
        code = self.state.instructor_code() if instructor else self.state.room_code()
        if not same_code(data.get("password", ""), code):
            self.wrong.spend(address)
            self.room_wrong.spend("")
            raise refuse(403, "Wrong room code." if not instructor else
                         f"{name!r} is the instructor's name: sign in with your own name and the room code.")
        learner = self.learners.find(name)
        if learner is not None:
            key = handler.get_secure_cookie(self.cookie(learner), max_age_days=31)
            if instructor or self.learners.owns(learner, key.decode() if key else None):
                return learner.name
            if learner.name != name:
                raise refuse(409, f"{name!r} looks like {learner.name!r}, a name already taken: choose another.")
            raise refuse(409, f"The name {learner.name!r} is taken (it signs in only from the browser that took it; "
                              "yours? ask the instructor). Choose another name.")
        return self.take(handler, name, address)

    def take(self, handler, name: str, address: str) -> str:
        learners = sum(n != self.settings.instructor for n in self.learners.by_name)
        if learners >= self.settings.max_learners:
            raise refuse(409, f"The room is full ({self.settings.max_learners} learners): ask the instructor.")
        if address not in OWN_MACHINE and self.names_from.get(address, 0) >= self.settings.names_per_address:
            raise refuse(429, f"This computer has taken {self.settings.names_per_address} names already: "
                              "one per learner. Sign in with the name you took.")
        wait = self.new_names.wait("")
        if wait:
            raise refuse(429, f"Many people are signing in at once: try again in {wait:.0f} s.")
        self.new_names.spend("")
        key = secrets.token_urlsafe(24)
        learner = self.learners.add(name, key)
        self.names_from[address] = self.names_from.get(address, 0) + 1
        handler.set_secure_cookie(self.cookie(learner), key, expires_days=31, httponly=True,
                                  path=handler.hub.base_url)
        return learner.name

    async def add_user(self, user):
        """Every user JupyterHub knows (at sign-in, through the API, at start-up) has a Unix account."""
        if user.name not in self.learners.by_name:
            self.learners.add(user.name, None)
        self.learners.ensure_account(user.name)
        super().add_user(user)

    def delete_user(self, user):
        """The admin deleted a user: their processes end, their account and home go, the name is free again."""
        learner = self.learners.by_name.pop(user.name, None)
        if learner is not None:
            for form in seat_names.looks(user.name):
                if self.learners.by_look.get(form) == user.name:
                    del self.learners.by_look[form]
            self.learners.save()
            accounts.remove_account(learner.account, self.settings.homes)
        super().delete_user(user)
