"""``python -m explainer generate "PROMPT" [--steps N] [--seed S] [--show-canvas]``.

Runs the shipped checkpoint at PP=1 with the real sampler (``explainer.sampler.generate`` over
``explainer.model.cached_lm.CachedLM``) and prints the text. ``--show-canvas`` prints every denoising step of
every canvas from the sampler's recorder.
"""

from __future__ import annotations

import sys

from explainer.errors import UsageError
from explainer.validation import MAX_SEED, parse_int

HELP = "spell a number with the shipped tiny DiffusionGemma checkpoint (e.g. generate 451 --show-canvas)"

PAD_GLYPH, EOS_GLYPH = "_", "|"           # neither is in the vocabulary, so the display is unambiguous
MAX_PROMPT_CHARS = 64                     # the task's prompts have 3; longer is outside the task (and costs memory)
MAX_STEPS = 1000


def configure(parser):
    parser.add_argument("prompt", help=f"a number 100..999 (at most {MAX_PROMPT_CHARS} characters of the task "
                                       f"vocabulary)")
    parser.add_argument("--steps", default=None, metavar="N",
                        help=f"max denoising steps per canvas, 1..{MAX_STEPS} (default: the checkpoint's "
                             f"generation config, 48)")
    parser.add_argument("--seed", default="0", metavar="S", help=f"sampler seed, 0..{MAX_SEED} (default 0)")
    parser.add_argument("--show-canvas", action="store_true", help="print every denoising step of every canvas")


def _glyphs(ids) -> str:
    from explainer.model import task                      # loads torch: only when steps are printed

    out = []
    for i in ids.tolist():
        out.append(PAD_GLYPH if i == task.PAD_ID else EOS_GLYPH if i == task.EOS_ID else task.VOCAB[i])
    return "[" + "".join(out) + "]"


def render_steps(recorder, prompt_len: int, canvas_length: int) -> list[str]:
    """Readable lines for row 0 of a recorded generation."""
    lines = [f"legend: {PAD_GLYPH} = pad, {EOS_GLYPH} = end of text; ^ = position accepted into the next canvas",
             "        (the rest is renoised with uniform random tokens); cur_step counts down from --steps;",
             "        the canvas commits its last argmax"]
    by_canvas: dict[int, list] = {}
    for rec in recorder.steps:
        by_canvas.setdefault(rec.canvas_index, []).append(rec)
    committed = {c.canvas_index: c for c in recorder.canvases}
    for index, steps in sorted(by_canvas.items()):
        start = prompt_len + index * canvas_length
        lines.append(f"canvas {index + 1}  (positions {start}..{start + canvas_length - 1}, attends to the prompt "
                     f"and {index} committed canvas{'es' if index != 1 else ''})")
        for n, rec in enumerate(steps, 1):
            acc = "".join("^" if a else " " for a in rec.accepted[0].tolist())
            stable = "-" if rec.stable is None else ("yes" if bool(rec.stable[0]) else "no")
            confident = "-" if rec.confident is None else ("yes" if bool(rec.confident[0]) else "no")
            head = f"  step {n:2d}  cur_step {rec.cur_step:2d}  T {rec.temperature:.3f}  "
            lines.append(f"{head}input  {_glyphs(rec.input_canvas[0])}  argmax {_glyphs(rec.argmax[0])}  "
                         f"mean entropy {float(rec.entropy[0].mean()):.1e}  stable {stable}  confident {confident}"
                         + ("  -> stop" if bool(rec.finished[0]) else ""))
            lines.append(f"{'':{len(head)}s}accept [{acc}]  next   {_glyphs(rec.canvas[0])}")
        if index in committed:
            lines.append(f"  committed {_glyphs(committed[index].committed[0])}")
    return lines


def run(args) -> int:
    import torch                                          # the model: only when the command runs

    from explainer.model import task
    from explainer.model.cached_lm import CachedLM
    from explainer.model.checkpoint import load_pretrained, metadata
    from explainer.sampler import StepRecorder, generate

    if not args.prompt:
        raise UsageError("the prompt is empty; give a number 100..999, e.g. generate 451")
    if len(args.prompt) > MAX_PROMPT_CHARS:
        raise UsageError(f"the prompt has {len(args.prompt)} characters; accepted: 1..{MAX_PROMPT_CHARS} "
                         f"characters (the task's prompts are numbers 100..999)")
    ids = task.encode(args.prompt)
    seed = parse_int("--seed", args.seed, 0, MAX_SEED)
    steps = None if args.steps is None else parse_int("--steps", args.steps, 1, MAX_STEPS)
    torch.set_num_threads(1)      # a 0.2M-parameter model: one thread is fastest and immune to a busy machine
    if not (args.prompt.isdigit() and int(args.prompt) in task.NUMBERS and len(args.prompt) == 3):
        print(f"note: the shipped model was trained on numbers {task.NUMBERS.start}..{task.NUMBERS.stop - 1}; "
              f"{args.prompt!r} is outside its task", file=sys.stderr)
    gen_cfg = dict(metadata()["generation_config"])
    if steps is not None:
        gen_cfg["max_denoising_steps"] = steps
    recorder = StepRecorder() if args.show_canvas else None
    prompt = torch.tensor([ids])
    seqs = generate(CachedLM(load_pretrained()), prompt, generator=torch.Generator().manual_seed(seed),
                    recorder=recorder, **gen_cfg)
    if recorder is not None:
        print("\n".join(render_steps(recorder, prompt.shape[1], gen_cfg["canvas_length"])))
        print("text:", end=" ")
    print(task.decode(seqs[0, prompt.shape[1]:]))
    return 0
