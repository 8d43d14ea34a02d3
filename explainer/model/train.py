"""Reproducible training of the shipped checkpoint (CPU, 2 threads, ~10 minutes).

    python -m explainer.model.train [--steps N] [--seed S] [--out DIR] [--force]   # train + write + evaluate
    python -m explainer.model.train --evaluate-only [--out DIR] [--force]          # re-evaluate, update metadata

The default ``--out`` is a new directory ``./explainer-checkpoint``; writing the shipped checkpoint
(``explainer/checkpoints``) or over any existing checkpoint needs ``--force``. Every value and the
output directory are checked before training starts.

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
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from explainer.model import task
from explainer.model.diffusion_gemma import (CHECKPOINT_NAME, CachedLM, DiffusionGemmaModel, TinyConfig, init_weights,
                                             num_parameters)

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "checkpoints"   # the shipped checkpoint: --force only
NEW_OUT = "explainer-checkpoint"                                  # default --out, in the working directory
MAX_STEPS = 100_000                                              # 2000 take ~10 min on 2 cores
MAX_SEED = 2**63 - 1
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
def evaluate(model, numbers=None, seed=EVAL_SEED, batch_size=None, **overrides) -> dict:
    """Held-out exact match with the real sampler (explainer.sampler.generate) at PP=1."""
    from explainer.sampler import StepRecorder, generate

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


def write_checkpoint(model, info: dict, out: Path, steps: int, seed: int, batch_size: int, lr: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    torch.save(state, out / f"{CHECKPOINT_NAME}.pt")
    meta = {
        "name": CHECKPOINT_NAME,
        "config": model.config.to_dict(),
        "parameters": num_parameters(model),
        "task": {"description": "spell a number 100..999 in English words (no 'and'), character level",
                 "example": {"prompt": "451", "answer": task.spell(451)},
                 "vocab": task.VOCAB, "canvas_length": task.CANVAS_LENGTH,
                 "answer_canvases": "2-4 (answer + EOS, pad after)",
                 "train_numbers": len(task.train_numbers()), "held_out_numbers": len(task.held_out_numbers()),
                 "held_out_seed": task.HELD_OUT_SEED},
        "training": {"script": f"python -m explainer.model.train --steps {steps} --seed {seed}",
                     "seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr,
                     "threads": torch.get_num_threads(), "torch": torch.__version__,
                     "train_seconds": info["train_seconds"], "final_loss": info["final_loss"],
                     "log": info["history"],
                     "objective": "block diffusion, uniform-state noise t~U(0,1) per canvas, CE on canvas "
                                  "positions, self-conditioning with p=0.5"},
        "generation_config": GENERATION_CONFIG,
        "checkpoint_bytes": (out / f"{CHECKPOINT_NAME}.pt").stat().st_size,
        "held_out": None,
    }
    (out / f"{CHECKPOINT_NAME}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def record_accuracy(model, out: Path, log=print) -> dict:
    path = out / f"{CHECKPOINT_NAME}.json"
    meta = json.loads(path.read_text())
    t0 = time.time()
    res = evaluate(model)
    one = evaluate(model, batch_size=1)          # one request at a time, as the engine runs them
    meta["held_out"] = {"exact_match": res["exact_match"], "n": res["n"], "seed": res["seed"],
                        "batch_size": res["batch_size"], "pp_size": 1,
                        "mean_steps_per_canvas": res["mean_steps_per_canvas"],
                        "exact_match_batch_size_1": one["exact_match"],
                        "mean_steps_per_canvas_batch_size_1": one["mean_steps_per_canvas"],
                        "how": "explainer.model.train.evaluate(model, seed=seed, batch_size=batch_size): the held-out "
                               "prompts, one torch.Generator seeded with `seed`, sampler settings = generation_config",
                        "eval_seconds": round(time.time() - t0, 1)}
    path.write_text(json.dumps(meta, indent=2) + "\n")
    log(f"held-out exact match {res['exact_match']:.3f} over {res['n']} numbers", flush=True)
    return meta


def _bounded(flag: str, text: str, kind, low, high):
    from explainer.errors import UsageError
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"{flag} {text!r:.60} is not accepted; accepted: {kind.__name__} from {low} to {high}")
    return value


def check_out_dir(out: Path, force: bool, evaluate_only: bool) -> tuple[Path, bool]:
    """Before any work: ``out`` must be a directory we can write (created now, probed with a temp file),
    and an existing checkpoint in it (the shipped one above all) is only replaced with ``--force``.
    Returns ``(out, created)``: the caller removes a directory it created if training then fails."""
    import tempfile

    from explainer.errors import UsageError
    out = Path(out).expanduser()
    ckpt = out / f"{CHECKPOINT_NAME}.pt"
    shipped = out.exists() and out.resolve() == DEFAULT_OUT.resolve()
    if evaluate_only and not ckpt.is_file():
        raise UsageError(f"--out {str(out)!r}: no {ckpt.name} to evaluate there")
    if (shipped or (ckpt.exists() and not evaluate_only)) and not force:
        what = "the shipped checkpoint" if shipped else f"the existing checkpoint {ckpt}"
        raise UsageError(f"--out {str(out)!r}: refusing to write over {what}; add --force to replace it, or "
                         f"choose another --out")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        what = "is not a directory" if isinstance(exc, (NotADirectoryError, FileExistsError)) else exc.strerror
        raise UsageError(f"--out {str(out)!r}: {what}; accepted: a writable directory (created if missing)") from None
    return out, created


def load_checkpoint(out: Path):
    """The model in ``out`` (metadata JSON + weights-only state dict); any damage is a ``UsageError``
    naming the file: missing, empty, truncated, not a state dict, or tensors of the wrong shape."""
    from explainer.errors import UsageError
    from explainer.model.diffusion_gemma import DiffusionGemmaModel as M
    meta_path, pt = out / f"{CHECKPOINT_NAME}.json", out / f"{CHECKPOINT_NAME}.pt"
    try:
        meta = json.loads(meta_path.read_text())
        model = M(TinyConfig(**meta["config"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"checkpoint metadata {meta_path}: unreadable or not explainer's ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    try:
        state = torch.load(pt, map_location="cpu", weights_only=True)
    except Exception as exc:                              # noqa: BLE001 - empty, truncated, pickle code, ...
        raise UsageError(f"checkpoint {pt}: cannot be loaded as a weights-only state dict ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    if not isinstance(state, dict):
        raise UsageError(f"checkpoint {pt}: holds a {type(state).__name__}, not a state dict")
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"checkpoint {pt}: does not fit the model in {meta_path.name} "
                         f"({str(exc).splitlines()[0][:200]} ...)") from None
    return model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explainer.model.train", description=__doc__.splitlines()[0])
    p.add_argument("--steps", default="2000")
    p.add_argument("--seed", default="0")
    p.add_argument("--batch-size", default="64")
    p.add_argument("--lr", default="3e-3")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--force", action="store_true", help="allow replacing an existing (or the shipped) checkpoint")
    p.add_argument("--evaluate-only", action="store_true", help="evaluate the checkpoint in --out, update metadata")
    args = p.parse_args(argv)
    args.steps = _bounded("--steps", args.steps, int, 1, MAX_STEPS)
    args.seed = _bounded("--seed", args.seed, int, 0, MAX_SEED)
    args.batch_size = _bounded("--batch-size", args.batch_size, int, 1, 4096)
    args.lr = _bounded("--lr", args.lr, float, 1e-8, 10.0)
    out = args.out if args.out is not None else (DEFAULT_OUT if args.evaluate_only else Path(NEW_OUT))
    args.out, created = check_out_dir(out, args.force, args.evaluate_only)
    try:
        return _run(args)
    except BaseException:
        if created and args.out.is_dir() and not any(args.out.iterdir()):
            args.out.rmdir()                              # nothing written: leave nothing behind
        raise


def _run(args) -> int:
    torch.set_num_threads(2)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    if args.evaluate_only:
        model = load_checkpoint(args.out)
        record_accuracy(model.eval(), args.out)
        return 0
    model, info = train(args.steps, args.seed, args.batch_size, args.lr)
    meta = write_checkpoint(model, info, args.out, args.steps, args.seed, args.batch_size, args.lr)
    print(f"wrote {args.out}/{CHECKPOINT_NAME}.pt ({meta['checkpoint_bytes']} bytes, {meta['parameters']} parameters) "
          f"after {info['train_seconds']}s", flush=True)
    try:
        import explainer.sampler  # noqa: F401
    except ModuleNotFoundError:
        print("explainer.sampler not available yet: run `python -m explainer.model.train --evaluate-only`", flush=True)
        return 0
    record_accuracy(model, args.out)
    return 0


if __name__ == "__main__":
    from explainer.errors import UsageError
    try:
        raise SystemExit(main())
    except UsageError as exc:
        import sys
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
