"""Inside the jail (``python -m explainer.workshop.jailed``): the learner's module, asked over a pipe.

The only process that runs the learner's code. It reads one JSON request per line on stdin and answers on
its original stdout (a pipe to the check); the learner's own prints (fd 1 and 2) go to the stderr pipe,
of which the check keeps a tail. Requests:

* ``{"op": "load", "source", "filename", "function"}`` -> ``{"ok": true}`` or ``{"error": {...}}``
* ``{"op": "call", "kind": EXERCISE, "args": {...}}`` -> ``{"value": {...}}`` or ``{"error": {...}}``

Values are plain JSON data (lists of numbers, bools, strings). Nothing here is trusted by the check: the
learner's code can replace any of it, and the check validates every answer as data and compares it with
the reference in its own process. As root, the first step drops to the jail's own unprivileged uid.
"""

from __future__ import annotations

import errno
import json
import linecache
import os
import sys
import types

from explainer.workshop.learner import describe


class Communicator:
    """What the check's rank processes know about their ``CpuCommunicator`` (the gate's input), as facts."""

    def __init__(self, **facts):
        self.__dict__.update({k: v for k, v in facts.items() if k != "dist_module"})
        self._dist = facts.get("dist_module")

    @property
    def dist_module(self):
        if self._dist == "torch.distributed":
            import torch.distributed
            return torch.distributed
        return SharedMemoryDistributed()

    @property
    def device(self):
        import torch
        return torch.device("cpu")

    def __repr__(self) -> str:
        return f"<CpuCommunicator backend={self.backend!r} supports_tensor_dict={self.supports_tensor_dict}>"


class SharedMemoryDistributed:
    """Stands for the communicator's shared-memory module (it has the whole-dict methods)."""

    def send_tensor_dict(self, tensor_dict, dst):
        raise RuntimeError("the check asks the gate only; it sends nothing from here")

    recv_tensor_dict = send_tensor_dict


def _accept(fn, args: dict) -> dict:
    import torch
    h = torch.tensor(args["entropy"], dtype=torch.float32)
    given = h.clone()
    got = fn(given, float(args["bound"]))
    out = {"changed": given.shape != h.shape or bool((given != h).any())}
    if isinstance(got, torch.Tensor):
        out["tensor"] = {"dtype": str(got.dtype).removeprefix("torch."), "shape": list(got.shape),
                         "data": got.tolist() if got.numel() <= 65536 else None}
    else:
        out["type"] = type(got).__name__
    return out


def _sync_fields(fn, args: dict) -> dict:
    got = fn()
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        return {"scalar": {"repr": repr(got)[:200], "type": type(got).__name__}}
    items = []
    for x in got:
        if len(items) >= 1000:
            break
        items.append(x if isinstance(x, str) and len(x) <= 200 else {"repr": repr(x)[:200]})
    return {"items": items}


def _gate(fn, args: dict) -> dict:
    facts = args.get("facts")
    value = fn(None if facts is None else Communicator(**facts))
    return {"bool": bool(value), "type": type(value).__name__, "repr": repr(value)[:60]}


ADAPTERS = {"accept": _accept, "sync-fields": _sync_fields, "tensor-dict-gate": _gate}


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
        if req.get("op") == "ready":                      # the check's own imports, before the learner's
            for name in req.get("preload", ()):
                __import__(name)
            return {"ok": True}
        if req.get("op") == "call":
            return {"value": ADAPTERS[req["kind"]](state["fn"], req.get("args") or {})}
        return {"ok": True}
    except BaseException as exc:                          # noqa: BLE001 - everything the learner's code raised
        return _error(exc, state.get("filename") or req.get("filename", ""))


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:         # never run learner code as root
        os._exit(70)


def main(argv: list[str]) -> None:
    uid = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--uid=")), None)
    if uid is not None and os.geteuid() == 0:
        _drop_to(uid)
    requests = os.fdopen(os.dup(0), "rb")
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)                                         # the learner's prints: the captured stream
    state: dict = {}
    for line in requests:
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


if __name__ == "__main__":
    main(sys.argv[1:])
