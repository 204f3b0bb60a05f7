"""The reconstructor network (RecoNN): from a trained model's representation back to its target.

Trained on the shadow farm's pairs (representation of θ_k, z_k) and applied to the released
model. The representation is the flattened parameters (white box) or the logits on fixed probe
inputs (black box, :func:`nn_recon.shadows.logits_on_probes`); either way it is standardised per
coordinate with the shadow set's statistics, then an MLP decodes it to an image in [0, 1].
The loss is MSE + MAE, plus LPIPS if asked. Training keeps its state in a store every few epochs and
resumes from it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from nn_recon.checkpoint import StateStore, load_weights
from nn_recon.train import minibatch_epoch
from recon_core.errors import ReconError
from recon_core.progress import progress

CHECKPOINT_FORMAT = "nn-recon-reconn/1"


@dataclass(frozen=True)
class ReconnConfig:
    """Decoder widths, optimiser and loss weights."""

    hidden: tuple[int, ...] = (1000, 1000)
    epochs: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    mae_weight: float = 1.0
    lpips_weight: float = 0.0
    seed: int = 0
    checkpoint_every: int = 20

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if min(self.hidden, default=1) < 1 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ReconError("hidden widths, epochs and batch_size must be >= 1 and lr > 0")
        if self.mae_weight < 0 or self.lpips_weight < 0 or self.checkpoint_every < 1:
            raise ReconError("loss weights must be >= 0 and checkpoint_every >= 1")


class Reconstructor(nn.Module):
    """Standardise the representation, then an ReLU MLP with a sigmoid output of ``image_shape``."""

    def __init__(self, n_features: int, image_shape: tuple[int, ...], hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.image_shape = tuple(image_shape)
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        sizes = [n_features, *hidden]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(sizes):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], int(torch.tensor(image_shape).prod())))
        self.decoder = nn.Sequential(*layers)

    def standardise_with(self, features: torch.Tensor) -> None:
        """Per-coordinate statistics of the training representations; constant coordinates pass as 0."""
        self.mean.copy_(features.mean(0))
        std = features.std(0)
        self.std.copy_(torch.where(std > 1e-12, std, torch.ones_like(std)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.mean) / self.std
        return torch.sigmoid(self.decoder(z)).view(len(features), *self.image_shape)


def reconstruction_loss(config: ReconnConfig, predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    loss = F.mse_loss(predicted, target) + config.mae_weight * F.l1_loss(predicted, target)
    if config.lpips_weight > 0:
        from nn_recon.lpips import lpips_distance

        loss = loss + config.lpips_weight * lpips_distance(predicted, target).mean()
    return loss


def _checkpoint_meta(config: ReconnConfig, features: torch.Tensor, images: torch.Tensor) -> dict:
    return {
        "format": CHECKPOINT_FORMAT,
        "config": asdict(config),
        "features": list(features.shape),
        "images": list(images.shape),
        "sums": [float(features.double().sum()), float(images.double().sum())],
    }


def train_reconstructor(
    config: ReconnConfig,
    features: torch.Tensor,
    images: torch.Tensor,
    store: StateStore | None = None,
    device: torch.device | str = "cpu",
) -> Reconstructor:
    """Fit a RecoNN on (K, F) representations and their (K, C, H, W) target images, on ``device``.

    With a ``store``, the state is saved there every ``checkpoint_every`` epochs and at the end, and
    a run with the same config and data resumes from it. Batches are drawn on the CPU.
    """
    if features.ndim != 2 or len(features) != len(images) or len(features) < 2:
        raise ReconError(
            f"need (K, F) features and K >= 2 matching images; got {tuple(features.shape)} and "
            f"{tuple(images.shape)}"
        )
    torch.manual_seed(config.seed)
    model = Reconstructor(features.shape[1], tuple(images.shape[1:]), config.hidden)
    model.standardise_with(features)
    generator = torch.Generator().manual_seed(config.seed)
    meta = _checkpoint_meta(config, features, images)
    model, features, images = model.to(device), features.to(device), images.to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    first_epoch = 0
    state = store.load(device) if store is not None else None
    if state is not None:
        if json.loads(state["meta"]) != json.loads(json.dumps(meta)):
            raise ReconError(f"{store} is a checkpoint of another RecoNN run; use a new path or delete it")
        load_weights(model, state["model"], str(store))
        optimiser.load_state_dict(state["optimiser"])
        generator.set_state(state["generator"].cpu())
        first_epoch = state["epoch"]

    loss = partial(reconstruction_loss, config)
    for epoch in progress(range(first_epoch, config.epochs), config.epochs - first_epoch, "RecoNN epochs"):
        minibatch_epoch(model, optimiser, loss, features, images, config.batch_size, generator)
        if store is not None and ((epoch + 1) % config.checkpoint_every == 0 or epoch + 1 == config.epochs):
            store.save(
                {
                    "meta": json.dumps(meta),
                    "model": model.state_dict(),
                    "optimiser": optimiser.state_dict(),
                    "generator": generator.get_state(),
                    "epoch": epoch + 1,
                },
            )
    return model.eval()


def decode_features(model: Reconstructor, features: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Images (K, C, H, W) the RecoNN decodes from (K, F) representations, on the CPU."""
    features = features.to(next(model.parameters()).device)
    with torch.no_grad():
        return torch.cat([model(part) for part in features.split(batch_size)]).cpu()
