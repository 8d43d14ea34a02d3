"""``python -m explainer train [--steps N] [--seed S] [--out DIR] [--evaluate-only]``: remake the checkpoint."""

HELP = "train the tiny model (CPU, ~10 min) and write checkpoints/ + its metadata (see scripts/make_checkpoint.sh)"


def configure(parser):
    parser.add_argument("--steps", default="2000", metavar="N", help="optimizer steps (default 2000, as shipped)")
    parser.add_argument("--seed", default="0", metavar="S", help="seed (default 0, as shipped)")
    parser.add_argument("--out", default=None, metavar="DIR", help="output directory (default: the package's checkpoints/)")
    parser.add_argument("--evaluate-only", action="store_true", help="re-evaluate the checkpoint in --out, update metadata")


def run(args) -> int:
    from explainer.commands.generate import _int_arg
    from explainer.train import main

    argv = ["--steps", str(_int_arg("--steps", args.steps, 1)), "--seed", str(_int_arg("--seed", args.seed, 0))]
    if args.out:
        argv += ["--out", args.out]
    if args.evaluate_only:
        argv.append("--evaluate-only")
    return main(argv)
