"""The learner's process, inside the jail: the only place the learner's code runs, asked over a pipe.

``serve(requests, replies)`` reads one JSON request per line and answers one line each on the replies pipe;
the learner's own prints (fd 1 and 2) go to the output pipe, of which the check keeps a tail. Requests:

* ``{"op": "ready", "preload": [...]}`` -> ``{"ok": true}`` (the exercise's imports: ``warm`` made them);
* ``{"op": "load", "source", "filename", "function"}`` -> ``{"ok": true}`` or ``{"error": {...}}``;
* ``{"op": "call", "kind": EXERCISE, "args": {...}}`` -> ``{"value": {...}}`` (the exercise's ``answer``) or
  ``{"error": {...}}``;
* ``{"op": "exit"}``.

Values are plain JSON data (lists of numbers, bools, strings). Nothing here is trusted by the check: the
learner's code can replace any of it, and the check validates every answer as data and compares it with the
reference in its own process.
"""

from __future__ import annotations

import errno
import importlib
import json
import linecache
import os
import sys
import types

from explainer.workshop import catalog
from explainer.workshop.learner import describe

EXERCISES: dict = {}             # id -> the exercise's module, filled once by warm()


def warm() -> None:
    """The heavy imports, once, in the warm process (after its probe): torch and every exercise (their
    ``answer`` runs here), and whatever each lists to load before a learner's code (its ``PRELOAD``)."""
    EXERCISES.update(catalog.load_all())
    for ex in EXERCISES.values():
        for name in ex.PRELOAD:
            importlib.import_module(name)


def _error(exc: BaseException, filename: str) -> dict:
    kind = "exception"
    if isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
        kind = "processes"                                # fork: Resource temporarily unavailable
    return {"error": {"kind": kind, "type": type(exc).__name__, "message": describe(exc, filename)}}


def _load(req: dict, state: dict) -> dict:
    filename, source = req["filename"], req["source"]
    module = types.ModuleType("learner_solution")
    module.__file__ = filename
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), module.__dict__)
    fn = module.__dict__.get(req["function"])
    if not callable(fn):
        return {"error": {"kind": "missing-function", "type": type(fn).__name__,
                          "message": f"{req['function']} is a {type(fn).__name__}, not a function"}}
    state.update(fn=fn, filename=filename)
    return {"ok": True}


def handle(req: dict, state: dict) -> dict:
    try:
        if req.get("op") == "load":
            return _load(req, state)
        if req.get("op") == "ready":                      # the exercise's imports: warm() made them
            return {"ok": True, "preloaded": all(name in sys.modules for name in req.get("preload", ()))}
        if req.get("op") == "call":
            return {"value": EXERCISES[req["kind"]].answer(state["fn"], req.get("args") or {})}
        return {"ok": True}
    except BaseException as exc:                          # noqa: BLE001 - everything the learner's code raised
        return _error(exc, state.get("filename") or req.get("filename", ""))


def serve(requests: int, replies: int) -> None:
    """Answer the check until it says exit or closes the pipe; never returns."""
    reader = os.fdopen(requests, "rb")
    reply = os.fdopen(replies, "w", buffering=1)
    state: dict = {}
    for line in reader:
        req = json.loads(line)
        resp = handle(req, state)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            text = json.dumps(resp, allow_nan=False)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"error": {"kind": "exception", "type": type(exc).__name__,
                                         "message": f"returned a value that is not plain data ({exc})"}})
        reply.write(text + "\n")
        if req.get("op") == "exit":
            break
    os._exit(0)
