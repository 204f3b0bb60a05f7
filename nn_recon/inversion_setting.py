"""The model-inversion setting: MNIST's private classes (0-4) and public images (5-9), and its classifiers.

The images of the private classes train the target and an evaluation model of another, stronger
shape; the public images train the GAN prior and the augmented models, which are distilled from
the target's soft labels on public data only. :mod:`nn_recon.pipeline` trains, saves and loads
them; :mod:`nn_recon.attacks.inversion` attacks the target through them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from nn_recon.attacks.stationarity import AttackTarget
from nn_recon.checkpoint import load_torch_file, load_weights, save_atomically
from nn_recon.data import TaskData, balanced_subset, check_images, load_mnist
from nn_recon.models import Architecture, build_network, class_logits
from nn_recon.train import TrainedModel, minibatch_epoch
from recon_core.errors import ReconError

MODEL_NAMES = ("target", "evaluation", "augmented-0", "augmented-1", "evaluation-all-digits")


@dataclass(frozen=True)
class SettingConfig:
    """The private/public split and the five classifiers. Defaults: all of MNIST's training images,
    a 3-conv target, a 5-conv evaluation model, 2- and 4-conv augmented models, and a second 5-conv
    evaluation model of all ten digits; 2 epochs of Adam.

    The evaluation model of the private classes must call every image one of them, so an inverted
    image that looks like a public digit (a 6 the target takes for a 0) still scores if both models
    lean the same way. The all-digits model, trained on the training images of all ten digits, can
    answer "that is a 6": its accuracy is the stricter test of whether an image shows its class.
    ``per_class`` caps the private training images of each class and, for the all-digits model, the
    training images of each digit (a small setting is small throughout)."""

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


def trained_for(config: SettingConfig) -> dict[str, Any]:
    """What a setting's classifier (and its checkpoint) records it was trained for: the setting, and
    that ``per_class`` caps the all-digits model too. A classifier of an older workdir, whose all-digits
    model took every image whatever ``per_class``, lacks the mark and is refused, not reused."""
    return {**asdict(config), "per_class_caps_all_digits": True}


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
        if state["config"] != trained_for(config):
            raise ReconError(f"checkpoint {checkpoint} was written for another setting; delete it")
        load_weights(network, state["network"], checkpoint)
        optimiser.load_state_dict(state["optimiser"])
        rng.set_state(state["rng"].cpu())
        start, seconds = state["epoch"], state["seconds"]
    x, y = torch.as_tensor(images - mean, device=device), torch.as_tensor(targets, device=device)
    started, loss = time.perf_counter() - seconds, torch.tensor(float("nan"))
    for epoch in range(start, config.epochs):
        desc = f"{architecture.spec} epoch {epoch + 1}"
        loss = minibatch_epoch(network, optimiser, F.cross_entropy, x, y, config.batch_size, rng, desc)
        save_atomically(checkpoint, {
            "config": trained_for(config), "network": network.state_dict(),
            "optimiser": optimiser.state_dict(), "rng": rng.get_state(), "epoch": epoch + 1,
            "seconds": time.perf_counter() - started,
        })  # fmt: skip
    seconds = time.perf_counter() - started
    checkpoint.unlink(missing_ok=True)
    record = trained_for(config)
    return TrainedModel(network, mean, classes, loss.item(), config.epochs, record, seconds=seconds)


ORIGINS = ("setting", "given", "trained", "none")


@dataclass(frozen=True)
class EvaluationOrigin:
    """Where the evaluation model came from (``origin``, one of ``ORIGINS``): the setting's own, given
    by the user, trained by the tool on the private training data, or none; ``model`` names its file
    and ``note`` says it in words."""

    origin: str
    model: str | None
    note: str

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ReconError(f"an evaluation model's origin is one of {ORIGINS}, not {self.origin!r}")


NO_EVALUATION = EvaluationOrigin(
    "none",
    None,
    "none (no --eval-model or --train-data): only the attacked models' own top-1 is reported, "
    "which says what the target accepts, not whether the images show their class",
)


@dataclass
class Setting:
    """What an inversion attacks and is scored by: the target and the augmented models, the public
    images and the class names; the evaluation models and the private training data where there are
    any, where the evaluation model came from, and how long each classifier took to train (when it was)."""

    target: AttackTarget
    augmented: list[AttackTarget]
    public: np.ndarray
    classes: tuple[str, ...]
    evaluation: AttackTarget | None = None
    all_digits_evaluation: AttackTarget | None = None
    private: TaskData | None = None
    evaluation_origin: EvaluationOrigin = NO_EVALUATION
    seconds: dict[str, float] = field(default_factory=dict)


Classifier = TrainedModel | AttackTarget  # both hold a network and the mean image subtracted from its input


def model_device(model: Classifier) -> torch.device:
    return next(model.network.parameters()).device


def in_batches(function, model: Classifier, images: np.ndarray, batch: int = 1024) -> torch.Tensor:
    """``function(network, images - mean)`` without gradients, ``batch`` images at a time, on the
    model's device; the result on the CPU."""
    x = torch.as_tensor(images - model.mean, device=model_device(model))
    with torch.no_grad():
        parts = [function(model.network, x[i : i + batch]) for i in range(0, len(x), batch)]
    return torch.cat(parts).cpu()


def logits(model: Classifier, images: np.ndarray) -> torch.Tensor:
    """The model's :func:`~nn_recon.models.class_logits` of ``images`` (n, K), on the CPU."""
    return class_logits(in_batches(torch.nn.Module.__call__, model, images))


def soft_labels(model: Classifier, images: np.ndarray) -> np.ndarray:
    """The model's class probabilities of ``images`` (n, K)."""
    return logits(model, images).softmax(1).numpy()
