"""Train, write and score the shipped checkpoint (the objective and the loop: ``objective.py``).

    python -m explainer.model.train [--steps N] [--seed S] [--out DIR] [--force]   # train + write + evaluate
    python -m explainer.model.train --evaluate-only [--out DIR] [--force]          # re-evaluate, update metadata

The default ``--out`` is a new directory ``./explainer-checkpoint``; writing the shipped checkpoint
(``explainer/checkpoints``) or over any existing checkpoint needs ``--force``. Every value and the
output directory are checked before training starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from explainer.errors import UsageError
from explainer.model import task
from explainer.model.checkpoint import CHECKPOINT_NAME, num_parameters
from explainer.model.diffusion_gemma import DiffusionGemmaModel
from explainer.model.objective import GENERATION_CONFIG, held_out_exact_match, train
from explainer.model.tiny_config import TinyConfig
from explainer.validation import MAX_SEED, parse_number

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "checkpoints"   # the shipped checkpoint: --force only
NEW_OUT = "explainer-checkpoint"                                    # default --out, in the working directory
MAX_STEPS = 100_000                                                # 2000 take ~10 min on 2 cores


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
    res = held_out_exact_match(model)
    one = held_out_exact_match(model, batch_size=1)          # one request at a time, as the engine runs them
    meta["held_out"] = {"exact_match": res["exact_match"], "n": res["n"], "seed": res["seed"],
                        "batch_size": res["batch_size"], "pp_size": 1,
                        "mean_steps_per_canvas": res["mean_steps_per_canvas"],
                        "exact_match_batch_size_1": one["exact_match"],
                        "mean_steps_per_canvas_batch_size_1": one["mean_steps_per_canvas"],
                        "how": "explainer.model.objective.held_out_exact_match(model, seed=seed, batch_size=batch_size): "
                               "the held-out prompts, one torch.Generator seeded with `seed`, sampler settings = "
                               "generation_config",
                        "eval_seconds": round(time.time() - t0, 1)}
    path.write_text(json.dumps(meta, indent=2) + "\n")
    log(f"held-out exact match {res['exact_match']:.3f} over {res['n']} numbers", flush=True)
    return meta


def check_out_dir(out: Path, force: bool, evaluate_only: bool) -> tuple[Path, bool]:
    """Before any work: ``out`` must be a directory we can write (created now, probed with a temp file),
    and an existing checkpoint in it (the shipped one above all) is only replaced with ``--force``.
    Returns ``(out, created)``: the caller removes a directory it created if training then fails."""
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
    meta_path, pt = out / f"{CHECKPOINT_NAME}.json", out / f"{CHECKPOINT_NAME}.pt"
    try:
        meta = json.loads(meta_path.read_text())
        model = DiffusionGemmaModel(TinyConfig(**meta["config"]))
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
    args.steps = parse_number("--steps", args.steps, int, 1, MAX_STEPS)
    args.seed = parse_number("--seed", args.seed, int, 0, MAX_SEED)
    args.batch_size = parse_number("--batch-size", args.batch_size, int, 1, 4096)
    args.lr = parse_number("--lr", args.lr, float, 1e-8, 10.0)
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
    record_accuracy(model, args.out)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
