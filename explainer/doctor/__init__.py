"""``python -m explainer doctor``: one row per requirement of a learner's machine, each with its fix, and at the
end the one command to run next.

Minute 0 of a workshop is a machine with nothing installed, so the doctor needs only the standard library
(Python 3.10+): what needs torch is imported inside the row that needs it, and such a row says "not checked yet"
where there is no torch instead of crashing. Every row runs the real thing, bounded in time (``installed``:
Python, torch, dot, JupyterLab; /dev/shm, gloo, the checkpoint, vLLM: ``rows``). A row this platform cannot
have (no /dev/shm off Linux, no vLLM CPU build off x86_64 Linux; the workshop jail's row lives in
``explainer.commands.doctor``) reads "not available here" with what that means for the learner, and never counts
as a failure. ``check.Host`` is the platform and the commands its learner types.
"""

from explainer.doctor.rows import (check_checkpoint, check_dot, check_gloo, check_jupyterlab, check_python, check_shm,
                                   check_torch, check_vllm_env)

CHECKS = (check_python, check_torch, check_dot, check_jupyterlab, check_shm, check_gloo, check_checkpoint,
          check_vllm_env)
