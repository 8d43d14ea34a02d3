"""Sampler step vs transformers' ``EntropyBoundSampler`` + ``StableAndConfidentStoppingCriteria``.

One step = acceptance + renoise + stop check on identical processed logits [8, 256, 4096]
(the candidate and argmax are drawn once, outside the timed region, for both sides). Repetitions
are interleaved (ours, theirs, ours, ...) and the median of each is compared: ratio = theirs / ours.
"""

from __future__ import annotations

import statistics
import time

import torch

from explainer import sampler
from explainer.bench import Row

BATCH, CANVAS, VOCAB = 8, 256, 4096
ENTROPY_BOUND = 0.1


def _inputs():
    g = torch.Generator().manual_seed(0)
    processed = torch.randn(BATCH, CANVAS, VOCAB, generator=g) * 3.0
    # a few confident positions so acceptance takes more than one token per row
    processed[:, :16, 7] += 40.0
    candidate = torch.randint(0, VOCAB, (BATCH, CANVAS), generator=g)
    canvas = torch.randint(0, VOCAB, (BATCH, CANVAS), generator=g)
    return processed, candidate, canvas, processed.argmax(-1)


def run(quick: bool = False) -> list[Row]:
    try:
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
            EntropyBoundSampler, EntropyBoundSamplerConfig, StableAndConfidentStoppingCriteria)
    except ImportError:
        return [Row("sampler", "sampler step (transformers not installed)", float("nan"), None, "ms", None,
                    ">= 1x", False)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # 2-core machines: one thread gives stable, comparable figures
    try:
        processed, candidate, canvas, argmax = _inputs()
        theirs_sampler = EntropyBoundSampler(EntropyBoundSamplerConfig(entropy_bound=ENTROPY_BOUND), CANVAS, VOCAB, 48)
        theirs_stop = StableAndConfidentStoppingCriteria(stability_threshold=1, confidence_threshold=0.005)
        ours_stop = sampler.StableAndConfident(stability_threshold=1, confidence_threshold=0.005)

        def ours():
            entropy, accepted, nxt = sampler.accept_and_renoise(processed, candidate, ENTROPY_BOUND)
            ours_stop(argmax, processed, entropy=entropy)
            return accepted

        def theirs():
            acc = theirs_sampler.accept_canvas(canvas, candidate, processed, 5)
            theirs_sampler.renoise_canvas(acc, 5)
            theirs_stop(argmax, processed)
            return theirs_sampler.accepted_token_mask

        if not torch.equal(ours(), theirs()):       # same logits must give the same decision
            raise AssertionError("sampler bench: accept masks differ from transformers'")
        reps = 5 if quick else 25
        t_ours, t_theirs = [], []
        for _ in range(reps):
            for fn, sink in ((ours, t_ours), (theirs, t_theirs)):
                start = time.perf_counter()
                fn()
                sink.append(time.perf_counter() - start)
        ours_ms, theirs_ms = statistics.median(t_ours) * 1e3, statistics.median(t_theirs) * 1e3
    finally:
        torch.set_num_threads(threads)
    ratio = theirs_ms / ours_ms
    name = f"step accept+renoise+stop B={BATCH} L={CANVAS} V={VOCAB}"
    return [Row("sampler", name, ours_ms, theirs_ms, "ms", ratio, ">= 1x", ratio >= 1.0)]
