"""GAN-based model inversion (GMI, KEDMI) with the logit-maximisation loss and model augmentation (LOMMA).

The setting is the model-inversion literature's MNIST protocol: the images of the private classes
(0–4) train the target and an evaluation model of another, stronger shape; the public images
(5–9) train the GAN prior and the augmented models, which are distilled from the target's soft
labels on public data only. The attack searches the generator's latent space for each private
class y:  min E_z [ identity_weight · L_id(G(z); y) + L_prior(z) ],  z clipped to the prior's range,
``restarts`` latents per class. GMI optimises the latents themselves (SGD with momentum 0.9, as in
its code), KEDMI a per-class Gaussian q = N(μ, σ²) through the reparameterisation z = μ + σ ε (Adam).

Identity losses: ``ce`` cross-entropy of the target (the baselines); ``lom`` −logit_y + λ‖p − p_reg‖²
with p the target's penultimate features and p_reg their mean over public images; ``ma`` the
cross-entropy averaged over the target and the augmented models; ``lomma`` both.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from nn_recon.checkpoint import load_torch_file, load_weights, save_atomically
from nn_recon.data import TaskData, balanced_subset, check_images, load_mnist
from nn_recon.gan import Gan, GanConfig, load_gan, save_gan, train_gan
from nn_recon.metrics import knn_distance, top_k_accuracy
from nn_recon.models import Architecture, build_network, penultimate
from nn_recon.report import save_class_grid
from nn_recon.train import TrainedModel, accuracy, load_model, save_model
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure
from recon_core.progress import progress

METHODS = ("gmi", "kedmi")
LOSSES = ("ce", "lom", "ma", "lomma")
MODEL_NAMES = ("target", "evaluation", "augmented-0", "augmented-1", "evaluation-all-digits")


@dataclass(frozen=True)
class SettingConfig:
    """The private/public split and the five classifiers. Defaults: all of MNIST's training images,
    a 3-conv target, a 5-conv evaluation model, 2- and 4-conv augmented models, and a second 5-conv
    evaluation model of all ten digits; 2 epochs of Adam.

    The evaluation model of the private classes must call every image one of them, so an inverted
    image that looks like a public digit (a 6 the target takes for a 0) still scores if both models
    lean the same way. The all-digits model, trained on every training image with its digit, can
    answer "that is a 6": its accuracy is the stricter test of whether an image shows its class."""

    private_classes: tuple[int, ...] = (0, 1, 2, 3, 4)
    target: str = "cnn:32,64,128"
    evaluation: str = "cnn:32,64,128,256,256"
    augmented: tuple[str, ...] = ("cnn:32,64", "cnn:32,64,128,256")
    all_digits_evaluation: str = "cnn:32,64,128,256,256"
    epochs: int = 2
    batch_size: int = 128
    lr: float = 1e-3
    per_class: int | None = None
    public_size: int | None = None
    seed: int = 0
    data_root: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "private_classes", tuple(int(c) for c in self.private_classes))
        object.__setattr__(self, "augmented", tuple(self.augmented))
        if len(set(self.private_classes)) < 2 or not set(self.private_classes) <= set(range(10)):
            raise ReconError(f"private classes must be two or more digits 0-9: {self.private_classes}")
        if len(self.augmented) != 2:
            raise ReconError(f"the setting has two augmented models, got {len(self.augmented)}")
        if min(self.epochs, self.batch_size) < 1:
            raise ReconError("epochs and batch_size must be >= 1")


def load_split(config: SettingConfig, split: str = "train") -> tuple[TaskData, np.ndarray]:
    """Private images relabelled 0..K-1 (in ``private_classes`` order), and the public images."""
    images, digits = load_mnist(split, config.data_root)
    private = np.isin(digits, config.private_classes)
    relabel = np.full(10, -1)
    relabel[list(config.private_classes)] = np.arange(len(config.private_classes))
    labels = relabel[digits[private]]
    keep = slice(None) if config.per_class is None else balanced_subset(labels, config.per_class, config.seed)
    public = images[~private][: config.public_size]
    classes = tuple(str(c) for c in config.private_classes)
    return TaskData(check_images(images[private][keep]), labels[keep], classes), public


def fit_classifier(
    architecture: Architecture,
    images: np.ndarray,
    targets: np.ndarray,
    mean: np.ndarray,
    classes: tuple[str, ...],
    config: SettingConfig,
    seed: int,
    checkpoint: Path,
    device: torch.device | str = "cpu",
) -> TrainedModel:
    """Mini-batch Adam on cross-entropy with labels (n,) or soft labels (n, K) on ``device``;
    checkpointed per epoch. The batches are drawn on the CPU, the same on any device."""
    network = build_network(architecture, seed).to(device)
    optimiser = torch.optim.Adam(network.parameters(), config.lr)
    rng = torch.Generator().manual_seed(seed)
    start, seconds = 0, 0.0
    if checkpoint.exists():
        state = load_torch_file(checkpoint, "a classifier checkpoint", "delete it to start over", device)
        if state["config"] != asdict(config):
            raise ReconError(f"checkpoint {checkpoint} was written for another setting; delete it")
        load_weights(network, state["network"], checkpoint)
        optimiser.load_state_dict(state["optimiser"])
        rng.set_state(state["rng"].cpu())
        start, seconds = state["epoch"], state["seconds"]
    x, y = torch.as_tensor(images - mean, device=device), torch.as_tensor(targets, device=device)
    started, loss = time.perf_counter() - seconds, torch.tensor(float("nan"))
    for epoch in range(start, config.epochs):
        order = torch.randperm(len(x), generator=rng).to(device).split(config.batch_size)
        for batch in progress(order, len(order), f"{architecture.spec} epoch {epoch + 1}"):
            loss = F.cross_entropy(network(x[batch]), y[batch])
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
        save_atomically(checkpoint, {
            "config": asdict(config), "network": network.state_dict(), "optimiser": optimiser.state_dict(),
            "rng": rng.get_state(), "epoch": epoch + 1, "seconds": time.perf_counter() - started,
        })  # fmt: skip
    seconds = time.perf_counter() - started
    checkpoint.unlink(missing_ok=True)
    return TrainedModel(network, mean, classes, loss.item(), config.epochs, asdict(config), seconds=seconds)


@dataclass
class Setting:
    """The five classifiers, the data they came from, and how long each took to train (when it was)."""

    target: TrainedModel
    evaluation: TrainedModel
    augmented: list[TrainedModel]
    all_digits_evaluation: TrainedModel
    private: TaskData
    public: np.ndarray
    seconds: dict[str, float]


def _device(model: TrainedModel) -> torch.device:
    return next(model.network.parameters()).device


def _in_batches(function, model: TrainedModel, images: np.ndarray, batch: int = 1024) -> torch.Tensor:
    """``function(network, images - mean)`` without gradients, ``batch`` images at a time, on the
    model's device; the result on the CPU."""
    x = torch.as_tensor(images - model.mean, device=_device(model))
    with torch.no_grad():
        parts = [function(model.network, x[i : i + batch]) for i in range(0, len(x), batch)]
    return torch.cat(parts).cpu()


def soft_labels(model: TrainedModel, images: np.ndarray) -> np.ndarray:
    """The model's class probabilities of ``images`` (n, K)."""
    return _in_batches(torch.nn.Module.__call__, model, images).softmax(1).numpy()


def _missing(path: Path, train: bool) -> bool:
    if not path.exists() and not train:
        raise ReconError(f"{path} does not exist; train it with nn-recon gan --workdir {path.parent}")
    return not path.exists()


def prepare_setting(
    config: SettingConfig, workdir: str | Path, train: bool = True, device: torch.device | str = "cpu"
) -> Setting:
    """Load the classifiers from ``workdir`` onto ``device``, training (and saving) those not there
    yet if ``train``."""
    workdir = Path(workdir)
    private, public = load_split(config)
    mean, shape = private.mean, private.images.shape[1:]
    timings_file = workdir / "timings.json"
    seconds = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    models: dict[str, TrainedModel] = {}
    specs = (config.target, config.evaluation, *config.augmented, config.all_digits_evaluation)
    for index, (name, spec) in enumerate(zip(MODEL_NAMES, specs, strict=True)):
        path = workdir / f"{name}.pt"
        if not _missing(path, train):
            models[name] = load_model(path, device=str(device))
            if models[name].config != asdict(config):
                raise ReconError(f"{path} was trained for another setting; use another --workdir")
            continue
        classes = private.classes
        if name.startswith("augmented"):  # distilled from the target on public images
            images, targets = public, soft_labels(models["target"], public)
        elif name == "evaluation-all-digits":
            images, targets = load_mnist("train", config.data_root)
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
    augmented = [models[name] for name in MODEL_NAMES[2:4]]
    return Setting(
        models["target"],
        models["evaluation"],
        augmented,
        models["evaluation-all-digits"],
        private,
        public,
        seconds,
    )


def test_accuracies(setting: Setting, config: SettingConfig) -> dict[str, float]:
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
    path, device = gan_path(workdir, config.kind), _device(setting.target)
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


@dataclass(frozen=True)
class InversionConfig:
    """One attack. Defaults as in GMI's and KEDMI's code: 1,500 steps of 0.02, identity weight 100."""

    method: str = "gmi"
    loss: str = "ce"
    restarts: int = 8
    steps: int = 1500
    lr: float = 0.02
    identity_weight: float = 100.0
    feature_weight: float = 1.0
    clip: float = 1.0
    public_for_p_reg: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ReconError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.loss not in LOSSES:
            raise ReconError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if min(self.restarts, self.steps, self.public_for_p_reg) < 1 or self.clip <= 0:
            raise ReconError("restarts, steps and public_for_p_reg must be >= 1 and clip > 0")


def identity_loss(
    loss: str,
    target: TrainedModel,
    augmented: list[TrainedModel],
    images: torch.Tensor,
    labels: torch.Tensor,
    p_reg: torch.Tensor,
    feature_weight: float,
) -> torch.Tensor:
    """Per image: CE or −logit_y, over the target alone or averaged with the augmented models (MA),
    plus λ‖p − p_reg‖² (mean over the feature axis) of the target's features p for LOM and LOMMA."""
    x = images - torch.as_tensor(target.mean, device=images.device)
    features = penultimate(target.network, x)
    logits = [target.network.readout(features)]
    if loss in ("ma", "lomma"):
        logits += [model.network(x) for model in augmented]
    if loss in ("ce", "ma"):
        return torch.stack([F.cross_entropy(z, labels, reduction="none") for z in logits]).mean(0)
    own = torch.stack([z.gather(1, labels[:, None])[:, 0] for z in logits]).mean(0)
    return -own + feature_weight * (features - p_reg).square().mean(1)


def check_compatible(gan: Gan, setting: Setting, method: str) -> None:
    """A GAN of the target's image size and, for KEDMI, its classes; models with one class count."""
    k = setting.target.architecture.num_outputs
    counts = {m.architecture.num_outputs for m in [setting.evaluation, *setting.augmented]}
    if counts != {k}:
        raise ReconError(f"the target has {k} classes but the evaluation/augmented models have {counts}")
    if gan.image_shape != setting.target.architecture.input_shape:
        raise ReconError(
            f"the GAN makes {gan.image_shape} images but the target takes "
            f"{setting.target.architecture.input_shape}; train a GAN on images of the target's size"
        )
    if gan.config.kind != method:
        raise ReconError(f"--method {method} needs a {method} GAN, got a {gan.config.kind} one")
    if method == "kedmi" and gan.num_classes != k:
        raise ReconError(f"the KEDMI GAN was trained for {gan.num_classes} classes but the target has {k}")


def reparameterised(
    mu: torch.Tensor, log_var: torch.Tensor, noise: torch.Tensor, clip: float
) -> torch.Tensor:
    """KEDMI's latent z = μ + σ ε, σ = exp(log σ² / 2), clipped to [-clip, clip]; differentiable in μ, σ."""
    return (mu + (0.5 * log_var).exp() * noise).clamp(-clip, clip)


def _frozen(*modules: torch.nn.Module) -> None:
    for module in modules:
        module.eval()
        module.requires_grad_(False)


def invert(config: InversionConfig, gan: Gan, setting: Setting) -> dict[int, WeightedMeasure]:
    """Inverted images of every private class: one :class:`WeightedMeasure` per class (equal weights)."""
    check_compatible(gan, setting, config.method)
    _frozen(gan.generator, gan.discriminator, setting.target.network, *(m.network for m in setting.augmented))
    k, r, d = setting.target.architecture.num_outputs, config.restarts, gan.config.latent_dim
    device = _device(setting.target)
    rng = torch.Generator().manual_seed(config.seed)  # on the CPU: the same latents on any device
    p_reg = _in_batches(penultimate, setting.target, setting.public[: config.public_for_p_reg]).mean(0)
    p_reg = p_reg.to(device)
    labels = torch.arange(k, device=device).repeat_interleave(r)
    mu = torch.randn(k * r, d, generator=rng).clamp(-config.clip, config.clip).to(device).requires_grad_()
    log_var = torch.zeros(k * r, d, device=device, requires_grad=config.method == "kedmi")
    if config.method == "gmi":
        optimiser = torch.optim.SGD([mu], config.lr, momentum=0.9)
    else:
        optimiser = torch.optim.Adam([mu, log_var], config.lr)

    def latents() -> torch.Tensor:
        if config.method == "gmi":
            return mu
        return reparameterised(mu, log_var, torch.randn(k * r, d, generator=rng).to(device), config.clip)

    for _ in progress(range(config.steps), config.steps, f"{config.method}+{config.loss}"):
        images = gan.generator(latents())
        identity = identity_loss(
            config.loss, setting.target, setting.augmented, images, labels, p_reg, config.feature_weight
        )
        loss = (config.identity_weight * identity + gan.prior_loss(images)).mean()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            mu.clamp_(-config.clip, config.clip)
    with torch.no_grad():
        z = latents().detach()
        images = gan.generator(z).cpu().numpy()
    meta = {**asdict(config), "classes": list(setting.private.classes)}
    z, names, labels = z.cpu().numpy(), setting.private.classes, labels.cpu().numpy()
    return {
        c: WeightedMeasure.empirical(
            {"image": images[labels == c], "latent": z[labels == c]}, **meta, label=c, name=names[c]
        )
        for c in range(k)
    }


class Evaluator:
    """Attack accuracy and KNN distance under the evaluation model, and top-1 accuracy under the
    all-digits evaluation model (class c counts as correct only as its own digit); the private
    features computed once.

    Also the top-1 of the attacked models themselves: the target's, and the augmented models' mean.
    What the evaluation model misses of what the target accepts is the attack's overfitting to the
    target, the gap MA is meant to close; an augmented top-1 already at 1 leaves MA nothing to add."""

    def __init__(self, setting: Setting) -> None:
        self.model, self.private = setting.evaluation, setting.private
        self.all_digits = setting.all_digits_evaluation
        self.target, self.augmented = setting.target, setting.augmented
        self.digits = np.array([int(c) for c in self.private.classes])
        self.private_features = self.features(self.private.images)

    def features(self, images: np.ndarray) -> np.ndarray:
        return _in_batches(penultimate, self.model, images).numpy()

    def __call__(self, measures: dict[int, WeightedMeasure]) -> dict[str, float]:
        images = np.concatenate([m.points["image"] for m in measures.values()])
        labels = np.concatenate([np.full(len(m), c) for c, m in measures.items()])
        features = self.features(images)
        readout = self.model.network.readout
        logits = readout(torch.as_tensor(features, device=readout.weight.device)).detach().cpu().numpy()
        all_digits = _in_batches(torch.nn.Module.__call__, self.all_digits, images).numpy()
        attacked = [soft_labels(model, images) for model in self.augmented]
        return {
            "top1": top_k_accuracy(logits, labels, 1),
            "top5": top_k_accuracy(logits, labels, 5),
            "knn": float(knn_distance(features, labels, self.private_features, self.private.labels).mean()),
            "top1_all_digits": top_k_accuracy(all_digits, self.digits[labels], 1),
            "top5_all_digits": top_k_accuracy(all_digits, self.digits[labels], 5),
            "top1_target": top_k_accuracy(soft_labels(self.target, images), labels, 1),
            "top1_augmented": float(np.mean([top_k_accuracy(p, labels, 1) for p in attacked])),
        }


@dataclass(frozen=True)
class AttackReport:
    """One attack repeated over seeds: each seed's metrics and per-class measures, and the wall time."""

    config: InversionConfig
    metrics: list[dict[str, float]]
    measures: list[dict[int, WeightedMeasure]]
    seconds: float

    def summary(self) -> dict[str, float]:
        """Mean and standard deviation over seeds of each metric."""
        table = {name: np.array([m[name] for m in self.metrics]) for name in self.metrics[0]}
        sds = {f"{name}_sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0 for name, v in table.items()}
        return {name: float(v.mean()) for name, v in table.items()} | sds

    def save(self, out: str | Path) -> Path:
        """Measures under ``out/seed-<s>/class-<c>``, the first seed's image grid and a summary JSON."""
        out = Path(out)
        for seed, measures in enumerate(self.measures):
            for c, measure in measures.items():
                measure.save(out / f"seed-{seed}" / f"class-{c}")
        first = self.measures[0]
        images = np.stack([m.points["image"] for m in first.values()])
        save_class_grid(out / "grid.png", images, [m.meta["name"] for m in first.values()])
        summary = {"config": asdict(self.config), "metrics": self.metrics, "summary": self.summary()}
        (out / "summary.json").write_text(json.dumps(summary | {"seconds": self.seconds}, indent=2))
        return out


def attack(
    config: InversionConfig, gan: Gan, setting: Setting, seeds: int = 5, evaluator: Evaluator | None = None
) -> AttackReport:
    """:func:`invert` with seeds ``config.seed`` .. ``config.seed + seeds - 1``, each scored."""
    evaluator = evaluator or Evaluator(setting)
    started, metrics, measures = time.perf_counter(), [], []
    for seed in range(config.seed, config.seed + seeds):
        measures.append(invert(replace(config, seed=seed), gan, setting))
        metrics.append(evaluator(measures[-1]))
    return AttackReport(config, metrics, measures, time.perf_counter() - started)
