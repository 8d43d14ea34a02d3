"""The training objective and loop of the shipped checkpoint (CPU, 2 threads, ~10 minutes for 2000 steps).

Objective: block diffusion with uniform-state noise (no mask token), trained on every answer canvas
at once (BD3-LM layout). One sequence per example is

    [ prompt (3) | clean answer canvases (4 × 8) ]  [ noised answer canvases (4 × 8) ]
      encoder mode: token-causal                      decoder mode: canvas b sees the clean prefix
                                                      before it + its own canvas, bidirectionally

Noised canvas b keeps the clean canvas's positions. Each position of canvas b is replaced by a
uniform random token with probability t_b ~ U(0, 1). Loss: cross-entropy on the noised canvases
(up to the one holding EOS). Self-conditioning: for half the examples a first no-SC pass gives
detached logits, scaled by a random sampler temperature T ~ U(t_min, t_max), whose soft embedding
feeds the second (trained) pass; the other half get a zero soft embedding (a canvas's first step).

``held_out_exact_match`` scores a model with the real sampler; ``train.py`` is the command that writes and
scores a checkpoint.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from explainer.model import task
from explainer.model.cached_lm import CachedLM
from explainer.model.checkpoint import init_weights
from explainer.model.diffusion_gemma import DiffusionGemmaModel
from explainer.model.tiny_config import TinyConfig
from explainer.sampler import StepRecorder, generate

# Generation settings the checkpoint is evaluated and shipped with: the sampler defaults (HF / vLLM).
GENERATION_CONFIG = dict(canvas_length=task.CANVAS_LENGTH, max_new_tokens=task.MAX_CANVASES * task.CANVAS_LENGTH,
                         max_denoising_steps=48, entropy_bound=0.1, t_min=0.4, t_max=0.8,
                         stability_threshold=1, confidence_threshold=0.005,
                         eos_token_id=task.EOS_ID, pad_token_id=task.PAD_ID)
EVAL_SEED = 0


def model_config() -> TinyConfig:
    return TinyConfig(vocab_size=task.VOCAB_SIZE, canvas_length=task.CANVAS_LENGTH,
                      pad_token_id=task.PAD_ID, eos_token_id=task.EOS_ID)


def block_diffusion_mask(prompt_len: int, n_canvases: int, L: int) -> torch.Tensor:
    """[1, 1, S, S] bool, S = prompt_len + 2 * n_canvases * L (clean part, then noised part)."""
    C = prompt_len + n_canvases * L                          # clean length
    S = C + n_canvases * L
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[:C, :C] = torch.ones(C, C).tril().bool()            # encoder mode: causal
    for b in range(n_canvases):
        q = slice(C + b * L, C + (b + 1) * L)
        mask[q, : prompt_len + b * L] = True                 # committed prefix before canvas b
        mask[q, q] = True                                    # canvas b, bidirectional
    return mask[None, None]


def diffusion_loss(model: DiffusionGemmaModel, prompts, answers, generator, sc_prob=0.5,
                   t_min=0.4, t_max=0.8) -> torch.Tensor:
    """prompts [B, P], answers [B, K*L] -> mean CE over the noised canvases up to the EOS canvas."""
    B, P = prompts.shape
    L, V = model.config.canvas_length, model.config.vocab_size
    K = answers.shape[1] // L
    # noise: per (example, canvas) rate t, per position a coin and a uniform token
    t = torch.rand(B, K, 1, generator=generator).expand(B, K, L).reshape(B, K * L)
    noisy = torch.where(torch.rand(B, K * L, generator=generator) < t,
                        torch.randint(0, V, (B, K * L), generator=generator), answers)
    clean_ids = torch.cat([prompts, answers], dim=1)                                     # [B, P + K*L]
    positions = torch.cat([torch.arange(P + K * L), torch.arange(P, P + K * L)])         # [S]
    mask = block_diffusion_mask(P, K, L)
    # loss mask: canvases up to (and including) the one holding EOS
    has_eos = (answers.view(B, K, L) == task.EOS_ID).any(-1)                             # [B, K]
    upto = (has_eos.long().cumsum(-1) - has_eos.long()) == 0                             # canvas <= EOS canvas
    weight = upto[:, :, None].expand(B, K, L).reshape(B, K * L).float()

    def run(rows, soft):
        clean = model.embed_input_ids(clean_ids[rows])                                   # encoder: no SC
        canvas = model.apply_self_conditioning(model.embed_input_ids(noisy[rows]), soft)  # decoder: SC
        hidden = model(inputs_embeds=torch.cat([clean, canvas], 1), positions=positions, attn_mask=mask)
        return model.compute_logits(hidden[:, P + K * L:])                               # [b, K*L, V]

    # self-conditioning: a no-SC first pass for the chosen rows, its detached processed logits
    # (raw / T, T ~ U(t_min, t_max) like the sampler's schedule) become their soft embedding
    use_sc = torch.rand(B, generator=generator) < sc_prob
    temp = t_min + (t_max - t_min) * torch.rand(B, 1, 1, generator=generator)
    soft = torch.zeros(B, K * L, model.config.hidden_size)
    if use_sc.any():
        with torch.no_grad():
            soft[use_sc] = model.soft_embedding(run(use_sc, None) / temp[use_sc])
    logits = run(slice(None), soft)
    ce = F.cross_entropy(logits.reshape(-1, V), answers.reshape(-1), reduction="none")
    return (ce * weight.reshape(-1)).sum() / weight.sum()


@torch.no_grad()
def one_step_canvas_accuracy(model, numbers) -> float:
    """Cheap progress proxy (no sampler): from a fully random canvas with zero SC and the true
    prefix, the fraction of answer canvases whose argmax is exactly right."""
    prompts, answers = task.make_batch(numbers)
    g = torch.Generator().manual_seed(1)
    B, K, L = len(numbers), task.MAX_CANVASES, task.CANVAS_LENGTH
    noisy = torch.randint(0, model.config.vocab_size, answers.shape, generator=g)
    clean = model.embed_input_ids(torch.cat([prompts, answers], 1))
    canvas = model.apply_self_conditioning(model.embed_input_ids(noisy), None)
    P = prompts.shape[1]
    positions = torch.cat([torch.arange(P + K * L), torch.arange(P, P + K * L)])
    hidden = model(inputs_embeds=torch.cat([clean, canvas], 1), positions=positions,
                   attn_mask=block_diffusion_mask(P, K, L))
    pred = model.compute_logits(hidden[:, P + K * L:]).argmax(-1).view(B, K, L)
    ok = (pred == answers.view(B, K, L)).all(-1)
    has_eos = (answers.view(B, K, L) == task.EOS_ID).any(-1)
    valid = (has_eos.long().cumsum(-1) - has_eos.long()) == 0
    return (ok & valid).sum().item() / valid.sum().item()


@torch.no_grad()
def held_out_exact_match(model, numbers=None, seed=EVAL_SEED, batch_size=None, **overrides) -> dict:
    """Held-out exact match of ``model`` with the real sampler (``explainer.sampler.generate``) at PP=1."""
    numbers = task.held_out_numbers() if numbers is None else list(numbers)
    batch_size = batch_size or len(numbers)
    gen_cfg = {**GENERATION_CONFIG, **overrides}
    g = torch.Generator().manual_seed(seed)
    texts, steps = [], []
    for i in range(0, len(numbers), batch_size):
        chunk = numbers[i: i + batch_size]
        prompts, _ = task.make_batch(chunk)
        recorder = StepRecorder()
        seqs = generate(CachedLM(model), prompts, generator=g, recorder=recorder, **gen_cfg)
        texts += [task.decode(row[prompts.shape[1]:]) for row in seqs]
        steps += [c.steps for c in recorder.canvases]
    return {"exact_match": task.exact_match(texts, numbers), "n": len(numbers), "seed": seed,
            "batch_size": batch_size, "mean_steps_per_canvas": round(sum(steps) / len(steps), 3), "texts": texts}


def train(steps: int, seed: int, batch_size: int = 64, lr: float = 3e-3, log_every: int = 100,
          log=print) -> tuple[DiffusionGemmaModel, dict]:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = DiffusionGemmaModel(model_config())
    init_weights(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, min(200, steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    numbers, held = task.train_numbers(), task.held_out_numbers()
    all_prompts, all_answers = task.make_batch(numbers)                  # [N, 3], [N, 32]
    start, losses, history = time.time(), [], []
    model.train()
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(numbers), (batch_size,), generator=g)
        prompts, answers = all_prompts[idx], all_answers[idx]
        loss = diffusion_loss(model, prompts, answers, g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % log_every == 0 or step == steps:
            model.eval()
            acc = one_step_canvas_accuracy(model, held)
            model.train()
            mean = sum(losses[-log_every:]) / len(losses[-log_every:])
            history.append({"step": step, "loss": round(mean, 4), "one_step_canvas_acc": acc,
                            "elapsed_s": round(time.time() - start, 1)})
            log(f"step {step:6d}/{steps}  loss {mean:.4f}  held-out one-step canvas acc {acc:.3f}  "
                f"lr {sched.get_last_lr()[0]:.2e}  elapsed {time.time() - start:6.1f}s", flush=True)
    model.eval()
    return model, {"train_seconds": round(time.time() - start, 1), "history": history,
                   "final_loss": history[-1]["loss"] if history else None}
