"""The real vLLM's own channel as the bench's peer: its ``GroupCoordinator`` on its C++ shared memory and on its
generic path, through the same harness (``explainer.bench.comm.pingpong`` and ``stream``), sizes and dicts as the toy.

``measure`` runs ``explainer.vllm_side.bench`` in ``.venv-vllm`` (two vLLM rank processes, one torch thread each)
right after the toy's measurement in the same ``bench`` run; ``rows`` puts each vLLM figure beside the toy's.
Ratios: vLLM's time over the toy's (latency), the toy's throughput over vLLM's: above 1 means the toy is faster.
vLLM's C++ waits spin with no sleep, so on a loaded 2-core machine its figures swing more than the toy's.
Without the vLLM environment there are no vLLM rows, and one short row says why. On a build without the
shared-memory ops (``_C_AVX2``, an AVX2-only CPU) vLLM has no C++ channel to measure: one short row names the
library, and only the generic path is compared.
"""

from __future__ import annotations

from explainer import vllm_env, vllm_release
from explainer.bench import Row

SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)        # explainer.bench.comm.SIZES
WHY_WIDTH = 70                                        # a reason shown in a row's name: the table stays readable


def label(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def measure(quick: bool = False) -> dict | str:
    """vLLM's medians (seconds): ``latency/shm``, ``latency/generic``, ``stream/<path>/<size>``; or why not."""
    why = vllm_env.missing_reason()
    if why:
        return why
    try:
        out = vllm_env.run_module("comm_pair", "--idents", "same", "--case", "bench-quick" if quick else "bench",
                                  timeout=900)
    except vllm_env.VllmRunError as exc:
        return str(exc)
    r0, r1 = out["ranks"]
    if r0.get("error") or r1.get("error"):
        err = r0.get("error") or r1.get("error")
        return f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else str(err)
    paths = [p for p in ("shm", "generic") if f"latency/{p}" in r0["medians"]]
    return {"latency": {p: r0["medians"][f"latency/{p}"] for p in paths},
            "throughput": {p: {s: s / r1["medians"][f"stream/{p}/{s}"] for s in SIZES} for p in paths},
            "kernels": r0.get("kernels")}


def short(why: str) -> str:
    why = " ".join(str(why).split())
    return why if len(why) <= WHY_WIDTH else why[:WHY_WIDTH - 1] + "…"


def rows(toy: dict, peer: dict | str) -> list[Row]:
    """The toy's figures (``explainer.bench.comm.measure``) beside vLLM's, one row per path and size."""
    if isinstance(peer, str):
        return [Row("comm", f"vLLM {vllm_release.RUNS} channel: not measured ({short(peer)})", 0.0, None, "",
                    None, "(info)", True)]
    out = []
    if "shm" not in peer["latency"]:
        lib = (peer.get("kernels") or {}).get("library") or "this build"
        out.append(Row("comm", f"vLLM {vllm_release.RUNS} C++ shm: not measured ({lib} has no shm ops)", 0.0,
                       None, "", None, "(info)", True))
    for path, what in (("shm", "C++ shm"), ("generic", "generic")):
        if path not in peer["latency"]:
            continue
        ours, theirs = toy["latency"][path] * 1e6, peer["latency"][path] * 1e6
        goal = ">= 2x" if path == "shm" else "(info)"
        out.append(Row("comm", f"4 KiB one-way latency, toy {path} vs vLLM {what} (us)", ours, theirs, "us",
                       theirs / ours, goal, theirs / ours >= 2 if path == "shm" else True))
        for s in SIZES:
            ours, theirs = toy["throughput"][path][s] / 1e9, peer["throughput"][path][s] / 1e9
            goal = ">= 1x" if path == "shm" else "(info)"
            out.append(Row("comm", f"{label(s)} throughput, toy {path} vs vLLM {what} (GB/s)", ours, theirs, "GB/s",
                           ours / theirs, goal, ours / theirs >= 1 if path == "shm" else True))
    return out
