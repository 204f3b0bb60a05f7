"""Train a target model with full-batch gradient descent, checkpointed, and save what the attack needs.

A saved model is a plain dict of tensors and primitives (``torch.load(weights_only=True)`` reads it):
architecture, parameters, the per-pixel data mean, the task's classes, the training loss, and the
training set itself so that ``match`` can score reconstructions against it (the attack never reads it).

The mini-batch trainings (the inversion setting's classifiers, the KL metric's classifier, the RecoNN)
run their epochs through :func:`minibatch_epoch`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from nn_recon.checkpoint import load_torch_file, load_weights, save_atomically
from nn_recon.data import DATASETS, TASKS, TaskData, make_task
from nn_recon.models import Architecture, Network, build_network, margins, predict
from nn_recon.shadows import ClassifierMLP
from recon_core.errors import ReconError, require_at_least, require_positive
from recon_core.progress import progress

MODEL_FORMAT = "nn-recon-model/1"
DTYPES = {"float32": torch.float32, "float64": torch.float64}
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainConfig:
    """How to train a target. Defaults: the papers' small-init ReLU MLP on 50 odd and 50 even MNIST digits."""

    dataset: str = "mnist"
    task: str = "odd-even"
    per_class: int = 50
    architecture: str = "mlp:1000,1000"
    lr: float = 0.01
    max_steps: int = 100_000
    target_loss: float = 1e-4
    first_layer_scale: float = 1e-3
    weight_decay: float = 0.0
    dtype: str = "float32"
    device: str = "auto"
    seed: int = 0
    checkpoint_every: int = 1000
    data_root: str | None = None

    def __post_init__(self) -> None:
        require_at_least(
            1, per_class=self.per_class, max_steps=self.max_steps, checkpoint_every=self.checkpoint_every
        )
        require_positive(lr=self.lr, first_layer_scale=self.first_layer_scale)
        require_at_least(0, target_loss=self.target_loss, weight_decay=self.weight_decay)
        if self.dataset not in DATASETS:
            raise ReconError(f"unknown dataset {self.dataset!r}; choose one of {', '.join(DATASETS)}")
        if self.task not in TASKS:
            raise ReconError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        resolve_dtype(self.dtype)
        check_device(self.device)


@dataclass
class TrainedModel:
    """A network and everything the attack and the metrics need to know about it."""

    network: Network
    mean: np.ndarray
    classes: tuple[str, ...]
    train_loss: float
    steps: int
    config: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    seconds: float = 0.0
    train_images: np.ndarray | None = None
    train_labels: np.ndarray | None = None

    @property
    def architecture(self) -> Architecture:
        return self.network.architecture

    def parameters(self) -> dict[str, torch.Tensor]:
        return {name: p.detach() for name, p in self.network.named_parameters()}


def check_device(device: str) -> None:
    """Refuse a --device that is none of ``DEVICES`` (whether it is available is :func:`resolve_device`'s)."""
    if device not in DEVICES:
        raise ReconError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")


def resolve_device(device: str) -> torch.device:
    """The torch device of a --device choice (see ``DEVICES``); 'auto' is CUDA when present."""
    check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ReconError(
            "--device cuda was asked for but no CUDA device is available; use --device cpu or auto"
        )
    return torch.device(device)


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ReconError(f"dtype must be one of {list(DTYPES)}, got {name!r}")
    return DTYPES[name]


def training_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss of the binary margin, or cross-entropy for several classes."""
    if outputs.shape[-1] == 1:
        return F.softplus(-margins(outputs, labels)).mean()
    return F.cross_entropy(outputs, labels)


def accuracy(model: TrainedModel, images: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of ``images`` (in [0, 1]) the model classifies as ``labels``."""
    p = next(model.network.parameters())
    x = torch.as_tensor(images - model.mean, dtype=p.dtype, device=p.device)
    with torch.no_grad():
        predicted = predict(model.network(x)).cpu().numpy()
    return float((predicted == labels).mean())


def minibatch_epoch(
    network: torch.nn.Module,
    optimiser: torch.optim.Optimizer,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    generator: torch.Generator,
    desc: str | None = None,
) -> torch.Tensor:
    """One epoch of ``optimiser`` steps on ``loss(network(x[batch]), y[batch])``, the batches in the
    order ``generator`` draws them on the CPU (the same on any device); the last batch's loss. With
    ``desc``, a progress bar over the batches."""
    batches = torch.randperm(len(x), generator=generator).to(x.device).split(batch_size)
    value = torch.tensor(float("nan"))
    for batch in progress(batches, len(batches), desc) if desc else batches:
        value = loss(network(x[batch]), y[batch])
        optimiser.zero_grad(set_to_none=True)
        value.backward()
        optimiser.step()
    return value.detach()


def train_evaluation_classifier(
    images: torch.Tensor,
    labels: torch.Tensor,
    epochs: int = 3,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> ClassifierMLP:
    """The KL metric's separately trained classifier: a 784-256-10 ReLU MLP, Adam on mini-batches,
    on ``device`` (batches drawn on the CPU)."""
    torch.manual_seed(seed)
    classifier = ClassifierMLP((math.prod(images.shape[1:]), 256, int(labels.max()) + 1), "relu").to(device)
    optimiser = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    images, labels = images.to(device), labels.to(device)
    for _ in range(epochs):
        minibatch_epoch(classifier, optimiser, F.cross_entropy, images, labels, 128, generator)
    return classifier.eval()


def _objective(network: Network, x: torch.Tensor, y: torch.Tensor, weight_decay: float) -> torch.Tensor:
    loss = training_loss(network(x), y)
    if weight_decay:
        loss = loss + 0.5 * weight_decay * sum(p.square().sum() for p in network.parameters())
    return loss


def train_target(
    config: TrainConfig,
    checkpoint: str | Path | None = None,
    data: TaskData | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainedModel:
    """Full-batch gradient descent until the training loss reaches ``target_loss`` or ``max_steps``.

    With ``checkpoint`` the state is written there every ``checkpoint_every`` steps and a run with
    the same config resumes from it; gradient descent is deterministic, so the result is the same.
    """
    data = data or make_task(
        config.dataset, config.task, config.per_class, root=config.data_root, seed=config.seed
    )
    device, dtype = resolve_device(config.device), resolve_dtype(config.dtype)
    num_outputs = 1 if data.num_classes == 2 else data.num_classes
    architecture = Architecture.parse(config.architecture, data.images.shape[1:], num_outputs)
    network = build_network(architecture, config.seed, config.first_layer_scale).to(device, dtype)
    mean = data.mean
    x = torch.as_tensor(data.images - mean, dtype=dtype, device=device)
    y = torch.as_tensor(data.labels, device=device)
    start, history = 0, []
    checkpoint = Path(checkpoint) if checkpoint else None
    if checkpoint and checkpoint.exists():
        state = load_torch_file(checkpoint, "a training checkpoint", "delete it to start over", device)
        if state.get("config") != asdict(config):
            raise ReconError(
                f"checkpoint {checkpoint} was written for another config; delete it to start over"
            )
        load_weights(network, state["state_dict"], checkpoint)
        start, history = state["step"], list(state["history"])

    def save_checkpoint(next_step: int) -> None:
        state = {"config": asdict(config), "state_dict": network.state_dict(), "step": next_step}
        save_atomically(checkpoint, {**state, "history": history})

    started = time.perf_counter()
    step = start
    for step in progress(range(start, config.max_steps + 1), config.max_steps + 1 - start, "train"):
        network.zero_grad(set_to_none=True)
        loss = _objective(network, x, y, config.weight_decay)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise ReconError(f"training diverged (loss {loss_value}) at step {step}; lower --lr")
        if step % 100 == 0:
            history.append((step, loss_value))
            if on_step:
                on_step(step, loss_value)
        if loss_value <= config.target_loss or step == config.max_steps:
            break
        loss.backward()
        with torch.no_grad():
            for p in network.parameters():
                p.sub_(config.lr * p.grad)
        if checkpoint and (step + 1) % config.checkpoint_every == 0:
            save_checkpoint(step + 1)
    with torch.no_grad():
        final_loss = training_loss(network(x), y).item()
    seconds = time.perf_counter() - started
    return TrainedModel(
        network,
        mean,
        data.classes,
        final_loss,
        step,
        asdict(config),
        history,
        seconds,
        data.images,
        data.labels,
    )


def save_model(model: TrainedModel, path: str | Path) -> Path:
    state = {
        "format": MODEL_FORMAT,
        "architecture": model.architecture.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.network.state_dict().items()},
        "mean": torch.as_tensor(model.mean),
        "classes": list(model.classes),
        "train_loss": model.train_loss,
        "steps": model.steps,
        "config": model.config,
        "history": [list(h) for h in model.history],
    }
    if model.train_images is not None:
        state["train_images"] = torch.as_tensor(model.train_images)
        state["train_labels"] = torch.as_tensor(model.train_labels)
    return save_atomically(path, state)


def load_model(path: str | Path, device: str = "cpu", dtype: str | None = None) -> TrainedModel:
    """Read a model written by :func:`save_model`; anything else is a clear error."""
    path = Path(path)
    if not path.is_file():
        raise ReconError(f"model file {path} does not exist")
    state = load_torch_file(
        path, "a model file written by nn-recon train", "pass the --out file of nn-recon train"
    )
    if not isinstance(state, dict) or state.get("format") != MODEL_FORMAT:
        raise ReconError(f"{path} is not a model file written by nn-recon train (no {MODEL_FORMAT!r} tag)")
    try:
        architecture = Architecture.from_dict(state["architecture"])
        network = Network(architecture)
        load_weights(network, state["state_dict"], path)
    except (KeyError, TypeError, RuntimeError) as error:
        raise ReconError(f"{path} has an unknown or inconsistent architecture: {error}") from None
    stored_dtype = next(iter(state["state_dict"].values())).dtype
    network = network.to(resolve_device(device), resolve_dtype(dtype) if dtype else stored_dtype)
    images = state.get("train_images")
    labels = state.get("train_labels")
    return TrainedModel(
        network=network,
        mean=state["mean"].numpy(),
        classes=tuple(state["classes"]),
        train_loss=float(state["train_loss"]),
        steps=int(state["steps"]),
        config=dict(state["config"]),
        history=[tuple(h) for h in state.get("history", [])],
        train_images=None if images is None else images.numpy(),
        train_labels=None if labels is None else labels.numpy(),
    )
