"""``python -m explainer.vllm_side.probe WHAT...`` (run in ``.venv-vllm``): one JSON object, one key per WHAT.

``supports-pp``  vLLM's ``supports_pp`` of its DiffusionGemma class;
``llm-pp2``      the real ``vllm.LLM(..., pipeline_parallel_size=2)`` on a tiny random DiffusionGemma;
``llm-pp2-pre-fix``  the same with the class declaring ``SupportsPP`` again (before #45828);
``sampler``      the real ``DiffusionSampler``'s sampled ids meeting the real ``PPHandler.broadcast``.
Each runs in this process, in the order given; the tiny checkpoint is written to a temp folder removed at the end.
``kernels``: the kernel library this process loaded (``explainer.vllm_side.kernels``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

import vllm

from explainer.vllm_side import gate, kernels, sampler

WHATS = ("supports-pp", "llm-pp2", "llm-pp2-pre-fix", "sampler")


def run(whats: list[str]) -> dict:
    out: dict = {"vllm_version": vllm.__version__}
    tmp = tempfile.mkdtemp(prefix="explainer-vllm-")
    try:
        model_dir = None
        for what in whats:
            t0 = time.monotonic()
            if what == "supports-pp":
                out[what] = gate.supports_pp_report()
            elif what in ("llm-pp2", "llm-pp2-pre-fix"):
                model_dir = model_dir or gate.write_tiny_checkpoint(os.path.join(tmp, "tiny-diffusion-gemma"))
                out[what] = gate.llm_report(model_dir, pre_fix=what.endswith("pre-fix"))
            else:
                out[what] = sampler.sampler_meets_broadcast()
            out[what]["probe_seconds"] = round(time.monotonic() - t0, 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["kernels"] = kernels.report()
    return out


def main(argv: list[str]) -> int:
    bad = [w for w in argv if w not in WHATS]
    if bad or not argv:
        print(f"probe: accepted: {', '.join(WHATS)}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    out = run(argv)
    out["process_seconds"] = round(time.monotonic() - t0, 2)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)                    # vLLM leaves threads behind after a failed LLM(...); the report is out
