"""The network side's pipeline: load a release, run an attack on it, score the result, save it.

Each ``nn-recon`` command is one function here, and every file they write is named here: the audit
page (:mod:`nn_recon.audit_page`) reads the same names. The attacks themselves (:mod:`nn_recon.attacks`)
take what is loaded in memory and return a :class:`~recon_core.measure.WeightedMeasure`; they train no
evaluation model, compute no metric and write no file. Nothing here prints.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nn_recon.attacks.informed import GLMAttackConfig, GLMReconstruction, reconstruct_target
from nn_recon.attacks.inversion import InversionConfig, invert
from nn_recon.attacks.reconn_attack import InformedAttackConfig, reconstruct_released
from nn_recon.attacks.stationarity import (
    AttackTarget,
    StationarityConfig,
    StationarityResult,
    as_target,
    stationary_points,
)
from nn_recon.checkpoint import CheckpointFile, load_torch_file, save_atomically
from nn_recon.data import (
    TaskData,
    balanced_subset,
    check_images,
    load_dataset,
    load_image_set,
    load_mnist,
    make_task,
)
from nn_recon.gan import Gan, GanConfig, load_gan, sample_images, save_gan, train_gan
from nn_recon.glm import load_glm
from nn_recon.inversion_setting import (
    MODEL_NAMES,
    NO_EVALUATION,
    EvaluationOrigin,
    Setting,
    SettingConfig,
    fit_classifier,
    load_split,
    model_device,
    soft_labels,
    trained_for,
)
from nn_recon.metrics import (
    BaselineComparison,
    Evaluator,
    InformedScores,
    MatchConfig,
    MatchResult,
    match,
    max_relative_error,
    public_baseline,
    score_informed,
)
from nn_recon.models import Architecture
from nn_recon.report import save_class_grid, save_informed_grid, save_match_grid
from nn_recon.shadows import Farm, build_farm, farm_accuracy
from nn_recon.train import (
    TrainConfig,
    TrainedModel,
    accuracy,
    load_model,
    save_model,
    train_evaluation_classifier,
    train_target,
)
from nn_recon.user_model import file_digest, is_user_network, load_exported, load_user_network
from recon_core.errors import ReconError, require_at_least
from recon_core.measure import WeightedMeasure

# The files of an attack's folder. A saved measure is two files, <name>.npz and <name>.json.
RECONSTRUCTION = "reconstruction"  # stationarity's selected reconstruction, glm's target
RUNS = "runs"  # stationarity: each finished run's measure, and the checkpoint of a batch in progress
FINGERPRINT = "fingerprint.json"  # stationarity: the model and settings the runs belong to
MATCH_SCORES = "match.json"
MATCH_GRID = "match.png"
RECONSTRUCTIONS = "reconstructions"  # reconn: the released models' targets, in each run's folder
GRID = "grid.png"  # reconn and invert: the image grid
SUMMARY = "summary.json"  # invert: settings and metrics
TIMINGS = "timings.json"  # the inversion setting: each classifier's training time


def model_checkpoint(model_file: str | Path) -> Path:
    """``<model file>.ckpt``: the resumable checkpoint of ``nn-recon train``."""
    path = Path(model_file)
    return path.with_name(path.name + ".ckpt")


def train_model_file(config: TrainConfig, out: str | Path) -> tuple[TrainedModel, float]:
    """Train a target (resuming from its checkpoint), save it to ``out``; and its test accuracy."""
    checkpoint = model_checkpoint(out)
    model = train_target(config, checkpoint=checkpoint)
    save_model(model, out)
    checkpoint.unlink(missing_ok=True)
    test = make_task(config.dataset, config.task, split="test", root=config.data_root)
    return model, accuracy(model, test.images, test.labels)


# The stationarity attack and match.


def load_target(
    model: str,
    weights: str | None = None,
    input_shape: tuple[int, ...] | None = None,
    classes: int | None = None,
    centre: str | None = None,
) -> TrainedModel | AttackTarget:
    """``--model`` of nn-recon stationarity as the attack's target: a model file of nn-recon train, a
    .pt2, or FILE.py:NAME with its ``weights``; ``centre``, an .npz of images whose mean image the
    attack starts its candidates from (see :class:`~nn_recon.attacks.stationarity.Recentred`)."""
    if not is_user_network(model):
        given = {"weights": weights, "input_shape": input_shape, "classes": classes, "centre": centre}
        flags = ", ".join("--" + flag.replace("_", "-") for flag, value in given.items() if value is not None)
        if flags:
            raise ReconError(f"{flags} go with --model FILE.py:NAME or a .pt2; {model} carries its own")
        return load_model(model)
    mean = None if centre is None else load_images(Path(centre), "--centre")[0].mean(axis=0)
    if model.endswith(".pt2"):
        network, shape = load_exported(model)
        return as_target(network, input_shape or shape, classes, file_digest(model), mean)
    if not weights:
        raise ReconError(f"--model {model} needs --weights, the state_dict of the trained network")
    network = load_user_network(model, weights)
    return as_target(network, input_shape, classes, file_digest(model.rpartition(":")[0], weights), mean)


@dataclass(frozen=True)
class ClaimedFolder:
    """What an attack keeps in the --out folder it claims for one model and its settings: ``kept``,
    what a rerun reuses (refused when made for another fingerprint), and ``rewritten``, what a rerun
    writes again; glob patterns. --fresh deletes both."""

    kept: tuple[str, ...]
    rewritten: tuple[str, ...]
    noun: str

    def paths(self, out: Path, patterns: tuple[str, ...]) -> list[Path]:
        return [path for pattern in patterns for path in sorted(out.glob(pattern))]


STATIONARITY_FOLDER = ClaimedFolder(
    (RUNS, f"{RECONSTRUCTION}.npz"), (f"{RECONSTRUCTION}.json", MATCH_SCORES, MATCH_GRID), "runs"
)
# Not part of the fingerprint: more --runs extend a search, and where it runs does not change it.
_UNFINGERPRINTED = ("runs", "device")


def _fingerprint(target: AttackTarget, config: StationarityConfig) -> dict:
    settings = {k: v for k, v in asdict(config).items() if k not in _UNFINGERPRINTED}
    return {"model": target.identity, "settings": settings}


def _claim(out: Path, fingerprint: dict, fresh: bool, folder: ClaimedFolder = STATIONARITY_FOLDER) -> None:
    """Make ``out`` the folder of this model and these settings: refuse one that holds another's
    outputs, or (``fresh``) clear what an earlier attack wrote there first."""
    fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back: tuples become lists
    saved, noun = out / FINGERPRINT, folder.noun
    if fresh:
        for path in folder.paths(out, (*folder.kept, *folder.rewritten, FINGERPRINT)):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    elif saved.is_file() or folder.paths(out, folder.kept):
        before = json.loads(saved.read_text()) if saved.is_file() else None
        if before != fingerprint:
            if before is None:
                what = f"{noun} without a fingerprint (an older nn-recon)"
            elif before.get("model") != fingerprint["model"]:
                what = f"{noun} of another model (its weights or source differ)"
            else:
                now = fingerprint["settings"]
                changed = sorted(k for k in now if before["settings"].get(k) != now[k])
                what = f"{noun} made with other settings ({', '.join(changed)})"
            raise ReconError(
                f"--out {out} holds {what}; pass --fresh to replace them or choose another --out folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(fingerprint, indent=2))


@dataclass(frozen=True)
class RunFolder:
    """The stationarity attack's :class:`~nn_recon.attacks.stationarity.RunStore` in its --out folder:
    ``runs/run_<i>`` per finished run and ``runs/batch_<first>.ckpt`` for a batch in progress.
    Opening it claims the folder for one model and config (see :func:`_claim`)."""

    folder: Path
    fresh: bool = False

    def _run(self, index: int) -> Path:
        return self.folder / RUNS / f"run_{index:04d}"

    def _batch(self, first: int) -> Path:
        return self.folder / RUNS / f"batch_{first:04d}.ckpt"

    def open(self, target: AttackTarget, config: StationarityConfig) -> None:
        _claim(self.folder, _fingerprint(target, config), self.fresh)

    def finished_run(self, index: int) -> WeightedMeasure | None:
        path = self._run(index)
        return WeightedMeasure.load(path) if path.with_suffix(".npz").exists() else None

    def save_run(self, index: int, run: WeightedMeasure) -> None:
        run.save(self._run(index))

    def batch_state(self, first: int, device: torch.device) -> dict[str, Any] | None:
        path = self._batch(first)
        if not path.exists():
            return None
        return load_torch_file(path, "an attack checkpoint", "delete it to redo its runs", device)

    def save_batch_state(self, first: int, state: dict[str, Any]) -> None:
        save_atomically(self._batch(first), state)

    def drop_batch_state(self, first: int) -> None:
        self._batch(first).unlink(missing_ok=True)


def attack_stationarity(
    model: TrainedModel | torch.nn.Module | AttackTarget,
    config: StationarityConfig,
    out: str | Path | None = None,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
    *,
    fresh: bool = False,
) -> StationarityResult:
    """:func:`~nn_recon.attacks.stationarity.stationary_points` with its runs kept in ``out`` (see
    :class:`RunFolder`: the same call again resumes; ``fresh`` clears an earlier attack's outputs
    first) and the selected reconstruction saved there as ``reconstruction.npz``."""
    store = None if out is None else RunFolder(Path(out), fresh)
    result = stationary_points(model, config, store, on_step)
    if out is not None:
        result.measure.save(Path(out) / RECONSTRUCTION)
    return result


def load_reconstruction(recon: str | Path) -> WeightedMeasure:
    """The measure of images saved by an attack: its --out folder, or the .npz itself."""
    recon = Path(recon)
    path = recon / f"{RECONSTRUCTION}.npz" if recon.is_dir() else recon
    if not path.with_suffix(".npz").is_file():
        raise ReconError(f"no reconstruction at {path}; pass the --out folder of nn-recon stationarity")
    try:
        measure = WeightedMeasure.load(path)
    except (ValueError, KeyError) as error:  # object arrays (pickles) are refused, not loaded
        raise ReconError(
            f"{path} is not a reconstruction saved by nn-recon ({type(error).__name__}: {error})"
        ) from None
    if "image" not in measure.points:
        raise ReconError(
            f"{path} has no 'image' array (it has {', '.join(measure.names)}); "
            "pass the --out folder of nn-recon stationarity"
        )
    return measure


def load_images(path: Path, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Images in [0, 1] and labels from an .npz holding arrays named images and labels."""
    if not path.is_file():
        raise ReconError(f"{what} {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as saved:
            names = saved.files
            arrays = [saved[name] for name in ("images", "labels") if name in names]
    except (ValueError, OSError) as error:  # object arrays (pickles) are refused, not loaded
        raise ReconError(f"{what} {path} is not an .npz of plain arrays ({error})") from None
    if len(arrays) != 2:
        raise ReconError(f"{what} {path} needs arrays named images and labels (it has {', '.join(names)})")
    images, labels = arrays
    if labels.shape != images.shape[:1] or not np.issubdtype(labels.dtype, np.integer):
        raise ReconError(f"{what} {path}: labels must be {len(images)} integer class indices, one per image")
    return check_images(images), labels.astype(np.int64)


def training_set(path: str) -> tuple[np.ndarray, np.ndarray, dict | None]:
    """The training images and labels, and the model file's config (None for an .npz)."""
    if path.endswith(".npz"):
        return (*load_images(Path(path), "--train-data"), None)
    model = load_model(path)
    if model.train_images is None:
        raise ReconError(f"{path} does not carry its training images; pass them as an .npz")
    return model.train_images, model.train_labels, model.config


def public_set(public: str, config: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """``--public``: an .npz of images and labels, or 'test', the test split of the model's task."""
    if public != "test":
        return load_images(Path(public), "--public")
    if not config or "task" not in config:
        raise ReconError("--public test needs a model file of nn-recon train; pass an .npz of public images")
    test = make_task(config["dataset"], config["task"], split="test", root=config.get("data_root"))
    return test.images, test.labels


@dataclass(frozen=True)
class MatchReport:
    """What ``match`` found and wrote: the matching, the public baseline's comparison (None without
    ``--public``) and how many public images it drew on, and the grid and scores files."""

    result: MatchResult
    comparison: BaselineComparison | None
    public_images: int
    grid: Path
    scores: Path


def match_reconstruction(
    recon: str | Path,
    train_data: str,
    public: str | None = None,
    config: MatchConfig | None = None,
    grid: str | Path | None = None,
    scores: str | Path | None = None,
) -> MatchReport:
    """Score a saved reconstruction against the training set (matched as ``config`` says; and, with
    ``public``, against the public baseline); write the grid of the best pairs and the scores, by
    default beside it."""
    measure = load_reconstruction(recon)
    train_images, train_labels, model_config = training_set(train_data)
    public_images = public_set(public, model_config) if public else None
    images = measure.points["image"]
    result = match(images, train_images, measure.points.get("label"), train_labels, config or MatchConfig())
    saved = {"model": str(train_data), **result.to_json()}
    comparison = None
    if public_images is not None:
        baseline = public_baseline(train_images, train_labels, *public_images)
        comparison = BaselineComparison(result.ssim, baseline)
        saved["public_baseline"] = {"public": str(public), **comparison.to_json()}
    folder = Path(recon) if Path(recon).is_dir() else Path(recon).parent
    grid = save_match_grid(result, images, train_images, Path(grid) if grid else folder / MATCH_GRID)
    scores = Path(scores) if scores else folder / MATCH_SCORES
    scores.write_text(json.dumps(saved, indent=2))
    count = 0 if public_images is None else len(public_images[0])
    return MatchReport(result, comparison, count, grid, scores)


# The GLM's missing point.


def load_points(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels from an .npz with arrays x and y, or a CSV whose last column is y."""
    if not path.is_file():
        raise ReconError(f"{path} does not exist")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as saved:
            if not {"x", "y"} <= set(saved.files):
                raise ReconError(f"{path} needs arrays named x and y")
            return saved["x"], saved["y"]
    try:
        table = np.loadtxt(path, delimiter=",", ndmin=2)
    except ValueError as error:
        raise ReconError(f"{path} is not a numeric CSV (no header): {error}") from error
    return table[:, :-1], table[:, -1]


@dataclass(frozen=True)
class GLMReport:
    """The reconstruction, its error to the true target (None without one) and where it was saved."""

    result: GLMReconstruction
    error: float | None
    saved: Path | None


def attack_glm(
    model: str,
    known: str,
    label: str | None = None,
    config: GLMAttackConfig | None = None,
    truth: str | None = None,
    out: str | None = None,
    trust_pickle: bool = False,
) -> GLMReport:
    """The missing training point of a saved GLM, from the ``known`` others; scored against ``truth``
    when given, saved as ``out/reconstruction.npz`` when asked."""
    config = config or GLMAttackConfig()
    glm = load_glm(model, trust_pickle=trust_pickle)
    x, y = load_points(Path(known))
    true_x, true_y = load_points(Path(truth)) if truth else (None, None)
    target_label = None
    if label is not None:
        try:
            target_label = y.dtype.type(label)  # the label in the type of D⁻'s labels
        except ValueError:
            raise ReconError(f"--label {label!r} is not of the type of D⁻'s labels ({y.dtype})") from None
    result = reconstruct_target(glm, x, y, label=target_label, config=config)
    error, scored = None, {}
    if true_x is not None:
        error = max_relative_error(result.features, true_x)
        scored["truth"] = {
            "features": true_x.reshape(-1),
            "label": true_y.reshape(-1)[0],
            "max_relative_error": error,
        }
    saved = None
    if out:
        settings = {
            "family": glm.family,
            "l2": glm.l2,
            "intercept": glm.intercept is not None,
            "d": glm.n_features,
            "n": len(x),
            "label_given": label is not None,
            "tol": config.tol,
        }
        measure = result.to_measure(model=str(model), known=str(known), settings=settings, **scored)
        saved = measure.save(Path(out) / RECONSTRUCTION)
    return GLMReport(result, error, saved)


# The informed adversary: data split, farms, RecoNN, scores.


def informed_split(config: InformedAttackConfig):
    """D⁻, shadow targets (disjoint, from the training split) and released targets (test split)."""
    train_x, train_y = (torch.from_numpy(a) for a in load_dataset(config.dataset, "train", config.data_root))
    test_x, test_y = (torch.from_numpy(a) for a in load_dataset(config.dataset, "test", config.data_root))
    needed = config.fixed_set_size + config.shadows
    if needed > len(train_x) or config.targets > len(test_x):
        raise ReconError(
            f"{config.dataset} has {len(train_x)} training and {len(test_x)} test images; asked for "
            f"{needed} training (D⁻ + shadows) and {config.targets} test targets"
        )
    inputs = math.prod(train_x.shape[1:])
    if config.farm.widths[0] != inputs or config.farm.widths[-1] <= int(train_y.max()):
        raise ReconError(
            f"the model widths {config.farm.widths} must start with the image size {inputs} and end "
            f"with >= {int(train_y.max()) + 1} classes"
        )
    order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(config.seed))
    fixed, shadow = order[: config.fixed_set_size], order[config.fixed_set_size : needed]
    return (
        (train_x, train_y),
        (train_x[fixed], train_y[fixed]),
        (train_x[shadow], train_y[shadow]),
        (test_x, test_y),
    )


def farm_names(config: InformedAttackConfig) -> tuple[str, str]:
    """The folders under --out of the released models and of the shadow farm."""
    return f"released_{config.targets}", f"shadows_{config.shadows}"


def train_farms(
    config: InformedAttackConfig, out: str | Path, device: torch.device | str = "cpu"
) -> tuple[Farm, Farm, dict[str, float]]:
    """The released models (one per target) and the shadow farm, trained on ``device`` or reused
    under ``out``."""
    out = Path(out)
    _, (x_minus, y_minus), (shadow_x, shadow_y), (test_x, test_y) = informed_split(config)
    timings: dict[str, float] = {}
    farms = []
    released, shadows = farm_names(config)
    # the released models' DP noise (noise seed 1) is the defender's, unknown to the adversary's shadows (0)
    for name, xs, ys, noise_seed in (
        (released, test_x[: config.targets], test_y[: config.targets], 1),
        (shadows, shadow_x, shadow_y, 0),
    ):
        start = time.perf_counter()
        farms.append(
            build_farm(
                config.farm, x_minus, y_minus, xs, ys, out / name, noise_seed=noise_seed, device=device
            )
        )
        timings[f"{name}_s"] = time.perf_counter() - start
    return farms[0], farms[1], timings


@dataclass(frozen=True)
class InformedAttackResult:
    """Reconstructions as a measure, their scores, and what the run cost."""

    measure: WeightedMeasure
    scores: InformedScores
    released_accuracy: float
    timings: dict[str, float]
    targets: torch.Tensor
    reconstructions: torch.Tensor
    oracles: torch.Tensor

    def summary(self) -> dict[str, float]:
        return {**self.scores.summary(), "released_test_accuracy": self.released_accuracy}


def attack_informed(
    config: InformedAttackConfig, out: str | Path, device: torch.device | str = "cpu"
) -> InformedAttackResult:
    """Train (or reuse) the farms under ``out``, fit the RecoNN, reconstruct and score the targets:
    every training and scoring network on ``device``, the results on the CPU."""
    if config.shadows < 2:  # refused before the farms are trained, not after
        raise ReconError(f"the RecoNN learns from the shadow models: needs >= 2, not {config.shadows}")
    out = Path(out)
    (train_x, train_y), (x_minus, _), (shadow_x, _), (test_x, test_y) = informed_split(config)
    target_x = test_x[: config.targets]
    released, shadows, timings = train_farms(config, out, device)

    start = time.perf_counter()
    probes = train_x[-config.probes :]  # fixed inputs the adversary queries, outside D⁻ and shadows
    store = CheckpointFile(out / f"reconn_{config.representation}_{len(shadow_x)}.pt", "a RecoNN checkpoint")
    measure = reconstruct_released(config, shadows, released, probes, store, device)
    reconstructions = measure.points["image"]
    timings["reconn_s"] = time.perf_counter() - start

    start = time.perf_counter()
    pool = torch.cat([x_minus, shadow_x])
    classifier = train_evaluation_classifier(train_x, train_y, seed=config.seed, device=device)
    scores = score_informed(target_x.numpy(), reconstructions, pool.numpy(), classifier)
    released_accuracy = float(farm_accuracy(released.params.to(device), config.farm, test_x, test_y).mean())
    timings["metrics_s"] = time.perf_counter() - start
    summary = {**scores.summary(), "released_test_accuracy": released_accuracy}
    return InformedAttackResult(
        measure=WeightedMeasure(measure.points, measure.weights, {**measure.meta, "summary": summary}),
        scores=scores,
        released_accuracy=released_accuracy,
        timings=timings,
        targets=target_x,
        reconstructions=torch.from_numpy(reconstructions),
        oracles=pool[torch.from_numpy(scores.oracle_index)],
    )


def informed_run_folder(out: str | Path, config: InformedAttackConfig) -> Path:
    """The folder under --out of one RecoNN run: ``<representation>_<shadows>``."""
    return Path(out) / f"{config.representation}_{config.shadows}"


def save_informed(
    result: InformedAttackResult, out: str | Path, config: InformedAttackConfig
) -> dict[str, Path]:
    """The measure and the grid in the run's folder, the summary and timings beside it."""
    folder = informed_run_folder(out, config)
    grid = save_informed_grid(
        folder / GRID, result.targets.numpy(), result.reconstructions.numpy(), result.oracles.numpy()
    )
    summary = Path(out) / f"summary_{folder.name}.json"
    files = {"measure": result.measure.save(folder / RECONSTRUCTIONS), "grid": grid, "summary": summary}
    summary.write_text(json.dumps({"summary": result.summary(), "timings_s": result.timings}, indent=2))
    return files


# GAN-based model inversion: the setting's classifiers and GANs in a work folder, the attack over seeds.


def _missing(path: Path, train: bool) -> bool:
    if not path.exists() and not train:
        raise ReconError(f"{path} does not exist; train it with nn-recon gan --workdir {path.parent}")
    return not path.exists()


def classifier_path(workdir: str | Path, name: str) -> Path:
    """Where the setting's classifier ``name`` (one of ``MODEL_NAMES``) is kept: ``<workdir>/<name>.pt``."""
    return Path(workdir) / f"{name}.pt"


def prepare_setting(
    config: SettingConfig, workdir: str | Path, train: bool = True, device: torch.device | str = "cpu"
) -> Setting:
    """Load the classifiers from ``workdir`` onto ``device``, training (and saving) those not there
    yet if ``train``."""
    workdir = Path(workdir)
    private, public = load_split(config)
    mean, shape = private.mean, private.images.shape[1:]
    timings_file = workdir / TIMINGS
    seconds = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    models: dict[str, TrainedModel] = {}
    specs = (config.target, config.evaluation, *config.augmented, config.all_digits_evaluation)
    all_digits = None  # (images, digits) of the all-digits model, checked before any training
    if train and not classifier_path(workdir, MODEL_NAMES[-1]).exists():
        all_digits = load_mnist("train", config.data_root)
        if config.per_class is not None:
            keep = balanced_subset(all_digits[1], config.per_class, config.seed)
            all_digits = all_digits[0][keep], all_digits[1][keep]
    for index, (name, spec) in enumerate(zip(MODEL_NAMES, specs, strict=True)):
        path = classifier_path(workdir, name)
        if not _missing(path, train):
            models[name] = load_model(path, device=str(device))
            if models[name].config != trained_for(config):
                raise ReconError(f"{path} was trained for another setting; use another --workdir")
            continue
        classes = private.classes
        if name.startswith("augmented"):  # distilled from the target on public images
            images, targets = public, soft_labels(models["target"], public)
        elif name == "evaluation-all-digits":  # per_class images of every digit, like the private classes
            images, targets = all_digits
            classes = tuple(str(digit) for digit in range(10))
        else:
            images, targets = private.images, private.labels
        architecture = Architecture.parse(spec, shape, len(classes))
        checkpoint = path.with_suffix(".ckpt")
        seed = config.seed + index
        model = fit_classifier(architecture, images, targets, mean, classes, config, seed, checkpoint, device)
        models[name] = model
        save_model(model, path)
        seconds[name] = model.seconds
        timings_file.write_text(json.dumps(seconds, indent=2))
    targets = {name: as_target(model) for name, model in models.items()}
    origin = EvaluationOrigin(
        "setting",
        str(classifier_path(workdir, "evaluation")),
        f"the setting's {config.evaluation} of the private classes, trained by nn-recon gan; beside it "
        f"{MODEL_NAMES[-1]} ({config.all_digits_evaluation}) of all ten digits",
    )
    return Setting(
        target=targets["target"],
        augmented=[targets[name] for name in MODEL_NAMES[2:4]],
        public=public,
        classes=private.classes,
        evaluation=targets["evaluation"],
        all_digits_evaluation=targets[MODEL_NAMES[-1]],
        private=private,
        evaluation_origin=origin,
        seconds=seconds,
    )


def accuracies_on_test_split(setting: Setting, config: SettingConfig) -> dict[str, float]:
    """Each classifier's accuracy on MNIST's test split: on the private classes, and the all-digits
    evaluation model on all ten digits."""
    test, _ = load_split(replace(config, per_class=None), "test")
    models = zip(MODEL_NAMES[:4], (setting.target, setting.evaluation, *setting.augmented), strict=True)
    accuracies = {name: accuracy(model, test.images, test.labels) for name, model in models}
    images, digits = load_mnist("test", config.data_root)
    return accuracies | {MODEL_NAMES[-1]: accuracy(setting.all_digits_evaluation, images, digits)}


def gan_path(workdir: str | Path, kind: str) -> Path:
    return Path(workdir) / f"gan-{kind}.pt"


def prepare_gan(config: GanConfig, setting: Setting, workdir: str | Path) -> Gan:
    """Load ``gan-<kind>.pt`` from ``workdir``, or train it on the public images (resumably) and save it;
    on the target's device."""
    path, device = gan_path(workdir, config.kind), model_device(setting.target)
    if path.exists():
        gan = load_gan(path, device)
        if gan.config != config:
            raise ReconError(f"{path} was trained with another GAN config; use another --workdir")
        return gan
    labels = soft_labels(setting.target, setting.public) if config.kind == "kedmi" else None
    gan = train_gan(config, setting.public, labels, checkpoint=path.with_suffix(".ckpt"), device=device)
    save_gan(gan, path)
    path.with_suffix(".ckpt").unlink(missing_ok=True)
    return gan


def save_gan_samples(gan: Gan, workdir: str | Path) -> Path:
    """Four rows of ten of the GAN's images, as ``gan-<kind>-samples.png`` in ``workdir``."""
    samples = sample_images(gan, 40).reshape(4, 10, *gan.image_shape)
    return save_class_grid(Path(workdir) / f"gan-{gan.config.kind}-samples.png", samples, [""] * 4)


@dataclass(frozen=True)
class RepeatConfig:
    """How often :func:`attack_inversion` repeats the attack: ``seeds`` seeds from the config's own."""

    seeds: int = 5

    def __post_init__(self) -> None:
        require_at_least(1, seeds=self.seeds)


@dataclass(frozen=True)
class AttackReport:
    """One attack repeated over seeds: each seed's metrics and per-class measures, the wall time, and
    where the evaluation model that scored them came from."""

    config: InversionConfig
    metrics: list[dict[str, float]]
    measures: list[dict[int, WeightedMeasure]]
    seconds: float
    evaluation: EvaluationOrigin

    def summary(self) -> dict[str, float]:
        """Mean and standard deviation over seeds of each metric."""
        table = {name: np.array([m[name] for m in self.metrics]) for name in self.metrics[0]}
        sds = {f"{name}_sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0 for name, v in table.items()}
        return {name: float(v.mean()) for name, v in table.items()} | sds


def attack_inversion(
    config: InversionConfig,
    gan: Gan,
    setting: Setting,
    repeats: RepeatConfig = RepeatConfig(),
    evaluator: Evaluator | None = None,
) -> AttackReport:
    """:func:`~nn_recon.attacks.inversion.invert` with seeds ``config.seed`` ..
    ``config.seed + repeats.seeds - 1``, each scored."""
    evaluator = evaluator or Evaluator(setting)
    started, metrics, measures = time.perf_counter(), [], []
    for seed in range(config.seed, config.seed + repeats.seeds):
        measures.append(invert(replace(config, seed=seed), gan, setting))
        metrics.append(evaluator(measures[-1]))
    return AttackReport(config, metrics, measures, time.perf_counter() - started, evaluator.origin)


def save_inversion(report: AttackReport, out: str | Path) -> Path:
    """Measures under ``out/seed-<s>/class-<c>``, the first seed's image grid and a summary JSON."""
    out = Path(out)
    for seed, measures in enumerate(report.measures):
        for c, measure in measures.items():
            measure.save(out / f"seed-{seed}" / f"class-{c}")
    first = report.measures[0]
    images = np.stack([m.points["image"] for m in first.values()])
    title = f"evaluation model: {report.evaluation.origin} ({report.evaluation.model or 'none'})"
    save_class_grid(out / GRID, images, [m.meta["name"] for m in first.values()], title=title)
    summary = {"config": asdict(report.config), "metrics": report.metrics, "summary": report.summary()}
    summary |= {"seconds": report.seconds, "evaluation": asdict(report.evaluation)}
    (out / SUMMARY).write_text(json.dumps(summary, indent=2))
    return out


# The inversion of the user's own classifier: what it trains is kept in its --out folder.

INVERSION_FOLDER = ClaimedFolder(
    ("augmented-*", "evaluation-*", "gan-*"), ("seed-*", GRID, SUMMARY), "models"
)


def _array_digest(*arrays: np.ndarray) -> str:
    """SHA-256 of the arrays' shapes, dtypes and bytes."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(f"{array.shape} {array.dtype}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def load_evaluation(model: str, weights: str | None, target: AttackTarget) -> AttackTarget:
    """``--eval-model`` as :func:`load_target` reads ``--model``; a network of the user's takes the
    target's input shape and class count."""
    shape, classes = (target.input_shape, target.num_classes) if is_user_network(model) else (None, None)
    return as_target(load_target(model, weights, shape, classes))


def _private_data(train_data: str, target: AttackTarget, classes: tuple[str, ...]) -> TaskData:
    """``--train-data`` as the target's private ``classes``: images of its input shape, class indices."""
    images, labels, _ = training_set(train_data)
    k = len(classes)
    if images.shape[1:] != tuple(target.input_shape):
        raise ReconError(
            f"--train-data images are {images.shape[1:]} but the target takes {tuple(target.input_shape)}; "
            "pass the images it was trained on"
        )
    if labels.min() < 0 or labels.max() >= k:
        raise ReconError(f"--train-data labels must be the target's class indices 0..{k - 1}")
    return TaskData(images, labels, classes)


def prepare_user_setting(
    target: AttackTarget,
    public: str | Path,
    out: str | Path,
    config: SettingConfig,
    gan_config: GanConfig,
    *,
    evaluation: tuple[str, str | None] | None = None,
    train_data: str | None = None,
    fresh: bool = False,
) -> Setting:
    """The setting of an inversion of the user's ``target``, on its device. The public images are read
    and made to its input shape (:func:`~nn_recon.data.load_image_set`); the augmented models are
    distilled from it on them; the evaluation model is ``evaluation`` (model, weights), else one trained
    on the private ``train_data``, else none. What is trained (the GAN too, by :func:`prepare_gan`) is
    kept in ``out``, claimed for this target, these public images and settings (``fresh``: retrained)."""
    out, device = Path(out), model_device(target)
    images = load_image_set(public, target.input_shape)[: config.public_size]
    settings = {"public_images": _array_digest(images)}
    settings |= {f"setting_{k}": v for k, v in asdict(config).items()}
    settings |= {f"gan_{k}": v for k, v in asdict(gan_config).items()}
    _claim(out, {"model": target.identity, "settings": settings}, fresh, INVERSION_FOLDER)
    classes = tuple(str(c) for c in range(target.num_classes))

    def cached(
        name: str, spec: str, images: np.ndarray, targets: np.ndarray, mean: np.ndarray, seed: int
    ) -> AttackTarget:
        """The classifier kept as ``<out>/<name>.pt``, or one fit (resumably, from its .ckpt) and kept."""
        path = out / f"{name}.pt"
        if not path.exists():
            architecture = Architecture.parse(spec, images.shape[1:], len(classes))
            checkpoint = path.with_suffix(".ckpt")
            model = fit_classifier(
                architecture, images, targets, mean, classes, config, seed, checkpoint, device
            )
            save_model(model, path)
        return as_target(load_model(path, device=str(device)))

    distilled = soft_labels(target, images)  # seeds as the protocol's augmented models'
    augmented = [
        cached(f"augmented-{i}", spec, images, distilled, target.mean, config.seed + 2 + i)
        for i, spec in enumerate(config.augmented)
    ]
    private = None if train_data is None else _private_data(train_data, target, classes)
    if evaluation is not None:
        model, weights = evaluation
        evaluator = load_evaluation(model, weights, target)
        evaluator.network.to(device)
        note = f"given with --eval-model {model}" + (f" --eval-weights {weights}" if weights else "")
        origin = EvaluationOrigin("given", model, note)
    elif private is not None:
        name = f"evaluation-{_array_digest(private.images, private.labels)[:12]}"
        data = (private.images, private.labels, private.mean)
        evaluator = cached(name, config.evaluation, *data, config.seed + 1)
        note = f"{config.evaluation} trained on --train-data {train_data} ({config.epochs} epochs)"
        origin = EvaluationOrigin("trained", str(out / f"{name}.pt"), note)
    else:
        evaluator, origin = None, NO_EVALUATION
    return Setting(target, augmented, images, classes, evaluator, None, private, origin)
