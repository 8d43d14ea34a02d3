"""``python -m explainer train [--steps N] [--seed S] [--out DIR] [--force] [--evaluate-only]``: remake the checkpoint."""

from explainer.validation import MAX_SEED, parse_int

HELP = "train the tiny model (CPU, ~10 min) and write a checkpoint + its metadata (see scripts/make_checkpoint.sh)"


def configure(parser):
    from explainer.model.train import DEFAULT_OUT, MAX_STEPS, NEW_OUT   # the training script loads torch
    parser.add_argument("--steps", default="2000", metavar="N",
                        help=f"optimizer steps, 1..{MAX_STEPS} (default 2000, as shipped)")
    parser.add_argument("--seed", default="0", metavar="S", help="seed, 0..2**63-1 (default 0, as shipped)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help=f"output directory (default ./{NEW_OUT}; the shipped checkpoint in {DEFAULT_OUT} "
                             f"is only written with --force)")
    parser.add_argument("--force", action="store_true",
                        help="allow writing over an existing checkpoint (including the shipped one)")
    parser.add_argument("--evaluate-only", action="store_true",
                        help="re-evaluate the checkpoint in --out (default: the shipped one), update its metadata")


def run(args) -> int:
    from explainer.model.train import MAX_STEPS, main   # the training script loads torch

    argv = ["--steps", str(parse_int("--steps", args.steps, 1, MAX_STEPS)),
            "--seed", str(parse_int("--seed", args.seed, 0, MAX_SEED))]
    if args.out:
        argv += ["--out", args.out]
    if args.force:
        argv.append("--force")
    if args.evaluate_only:
        argv.append("--evaluate-only")
    return main(argv)
