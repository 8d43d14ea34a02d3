"""The jail: the only place a learner's code runs.

* ``view.py``: what the jail sees (the interpreter, the installed dependencies, this package's folder, read-only)
  and the bubblewrap command that builds it; ``available()`` and ``notice()`` where it cannot be built;
* ``warm.py``: the grader's handle on the warm jail (started once per grading session);
* ``zygote.py``: inside it, the warm process that makes one fresh learner's process per check, in namespaces,
  a uid and a scratch folder of its own, with no capability, no Unix sockets and the limits (``limits.py``,
  ``namespaces.py``);
* ``learner_process.py``: the learner's process, answering the check over pipes with plain data;
* ``channel.py``: the check's side of that conversation, with deadlines and named limits.

Importing this package loads only the standard library (the doctor reports the jail's row from it).
"""

from explainer.workshop.jail.limits import LIMITS, Limits, is_root
from explainer.workshop.jail.view import available, command, notice

__all__ = ["LIMITS", "Limits", "available", "command", "is_root", "notice"]
