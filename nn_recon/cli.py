"""``nn-recon``: train a target, attack it, score the reconstruction.

Each subcommand is one ``register_*`` function that adds its parser and sets ``run`` to a function
taking the parsed arguments and returning an exit status; add a subcommand by appending its
register function to ``SUBCOMMANDS``. Bad input is a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from nn_recon.errors import ReconInputError

Subparsers = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _say(message: str) -> None:
    print(message, flush=True)


def register_train(subparsers: Subparsers) -> None:
    from nn_recon.data import DATASETS, TASKS
    from nn_recon.train import TrainConfig

    d = TrainConfig()
    p = subparsers.add_parser("train", help="train a target model with full-batch gradient descent")
    p.add_argument("--dataset", default=d.dataset, choices=DATASETS)
    p.add_argument("--task", default=d.task, choices=TASKS)
    p.add_argument("--per-class", type=int, default=d.per_class, help="training images per class")
    p.add_argument("--arch", default=d.architecture, help="mlp:W1,W2,... or cnn:C1,C2,...")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--max-steps", type=int, default=d.max_steps)
    p.add_argument("--target-loss", type=float, default=d.target_loss, help="stop at this training loss")
    p.add_argument("--first-layer-scale", type=float, default=d.first_layer_scale)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--dtype", default=d.dtype, choices=("float32", "float64"))
    p.add_argument("--device", default=d.device, help="auto (CUDA when present), cpu or cuda")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--data-root", help="folder with IDX / CIFAR-10 files (MNIST needs none)")
    p.add_argument("--out", required=True, help="model file to write; <out>.ckpt is the resumable checkpoint")
    p.set_defaults(run=_train)


def _train(args: argparse.Namespace) -> int:
    from nn_recon.data import make_task
    from nn_recon.train import TrainConfig, accuracy, save_model, train_target

    config = TrainConfig(
        dataset=args.dataset,
        task=args.task,
        per_class=args.per_class,
        architecture=args.arch,
        lr=args.lr,
        max_steps=args.max_steps,
        target_loss=args.target_loss,
        first_layer_scale=args.first_layer_scale,
        weight_decay=args.weight_decay,
        dtype=args.dtype,
        device=args.device,
        seed=args.seed,
        data_root=args.data_root,
    )
    out = Path(args.out)
    checkpoint = out.with_name(out.name + ".ckpt")
    model = train_target(config, checkpoint=checkpoint)
    save_model(model, out)
    checkpoint.unlink(missing_ok=True)
    test = make_task(args.dataset, args.task, split="test", root=args.data_root)
    _say(
        f"trained {model.architecture.spec} on {len(model.train_labels)} images for {model.steps} steps "
        f"({model.seconds:.0f} s): training loss {model.train_loss:.3g}, "
        f"test accuracy {accuracy(model, test.images, test.labels):.3f}"
    )
    _say(f"saved {out}")
    return 0


def _range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH (e.g. 1e-3,1e-2), got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < LOW <= HIGH, got {text!r}")
    return low, high


def register_stationarity(subparsers: Subparsers) -> None:
    from nn_recon.attacks.stationarity import OBJECTIVES, StationarityConfig

    d = StationarityConfig()
    p = subparsers.add_parser("stationarity", help="reconstruct training images from a model's weights")
    p.add_argument("--model", required=True, help="a model file written by nn-recon train")
    p.add_argument(
        "--points", type=int, default=d.points, help="candidate images per run (m; the papers use 2n)"
    )
    p.add_argument("--runs", type=int, default=d.runs, help="random-search runs")
    p.add_argument("--steps", type=int, default=d.steps, help="optimisation steps per run")
    p.add_argument("--runs-per-batch", type=int, default=d.runs_per_batch, help="runs optimised together")
    p.add_argument("--objective", default=d.objective, choices=OBJECTIVES)
    p.add_argument("--weight-decay", type=float, help="posterior objective: the training weight decay")
    for name, value in (
        ("lr", d.lr),
        ("init-scale", d.init_scale),
        ("lambda-min", d.lambda_min),
        ("beta", d.beta),
    ):
        p.add_argument(
            f"--{name}", type=_range, default=value, help=f"search range LOW,HIGH (default {value})"
        )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dtype", default=d.dtype, choices=("float32", "float64"))
    p.add_argument("--device", default=d.device)
    p.add_argument("--out", required=True, help="folder for the runs and the selected reconstruction")
    p.set_defaults(run=_stationarity)


def _stationarity(args: argparse.Namespace) -> int:
    from nn_recon.attacks.stationarity import StationarityConfig, reconstruct
    from nn_recon.train import load_model

    config = StationarityConfig(
        points=args.points,
        runs=args.runs,
        steps=args.steps,
        runs_per_batch=args.runs_per_batch,
        objective=args.objective,
        weight_decay=args.weight_decay,
        lr=args.lr,
        init_scale=args.init_scale,
        lambda_min=args.lambda_min,
        beta=args.beta,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
    )
    model = load_model(args.model)
    result = reconstruct(model, config, out_dir=args.out)
    for run in result.runs:
        meta = run.meta
        settings = f"lr {meta['lr']:.2g}  init {meta['init_scale']:.2g}  λ_min {meta['lambda_min']:.2g}"
        _say(f"run {meta['index']}: loss {meta['loss']:.4f}  {settings}  β {meta['beta']:.3g}")
    _say(f"selected {len(result.measure)} reconstructions; saved in {Path(args.out) / 'reconstruction.npz'}")
    if result.diverged:
        message = (
            f"runs {result.diverged} diverged (NaN) and were dropped; finished runs are saved in {args.out}"
        )
        print(f"nn-recon: error: {message}. Lower the --lr range and rerun to retry them.", file=sys.stderr)
        return 2
    return 0


def register_match(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "match", help="SSIM of each training image's best reconstruction, and a picture"
    )
    p.add_argument("--recon", required=True, help="the --out folder of a attack, or a saved measure (.npz)")
    p.add_argument("--train-data", required=True, help="the model file (it carries its training set)")
    p.add_argument(
        "--downsample", type=int, default=1, help="match by NCC on images downsampled by this factor"
    )
    p.add_argument("--grid", help="PNG to write (default: <recon>/match.png)")
    p.add_argument("--json", help="write the counts and per-image scores here")
    p.set_defaults(run=_match)


def _match(args: argparse.Namespace) -> int:
    from bayes_recon.measure import WeightedMeasure
    from nn_recon.metrics import match
    from nn_recon.report import save_match_grid, success_table
    from nn_recon.train import load_model

    recon = Path(args.recon)
    measure_path = recon / "reconstruction.npz" if recon.is_dir() else recon
    if not measure_path.with_suffix(".npz").is_file():
        raise ReconInputError(
            f"no reconstruction at {measure_path}; pass the --out folder of nn-recon stationarity"
        )
    measure = WeightedMeasure.load(measure_path)
    model = load_model(args.train_data)
    if model.train_images is None:
        raise ReconInputError(f"{args.train_data} does not carry its training images")
    labels = measure.points.get("label")
    result = match(measure.points["image"], model.train_images, args.downsample, labels, model.train_labels)
    _say(success_table(result))
    grid = Path(args.grid) if args.grid else (recon if recon.is_dir() else recon.parent) / "match.png"
    _say(f"grid: {save_match_grid(result, measure.points['image'], model.train_images, grid)}")
    if args.json:
        summary = {
            "successes": {str(k): v for k, v in result.successes().items()},
            "ssim": result.ssim.tolist(),
        }
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


SUBCOMMANDS: list[Callable[[Subparsers], None]] = [register_train, register_stationarity, register_match]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nn-recon", description=__doc__.splitlines()[0])
    threads_help = "torch CPU threads (default 1: on a shared 2-core machine 2 threads were slower)"
    parser.add_argument("--threads", type=int, default=1, help=threads_help)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    from nn_recon import progress

    torch.set_num_threads(args.threads)
    progress.enable(not args.quiet)
    try:
        return args.run(args)
    except ReconInputError as error:
        print(f"nn-recon: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
