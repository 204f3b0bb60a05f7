"""Metrics of informed-adversary reconstructions: MSE, LPIPS, KL, and the nearest-neighbour oracle.

The oracle is the closest point (by MSE) to the target among everything the adversary already
holds, D⁻ and the shadow targets: a reconstruction beats it when it is closer to the target than
any image the adversary could have picked without the released model. The success rate is the
fraction of targets whose reconstruction beats its oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bayes_recon.measure import WeightedMeasure
from nn_recon.errors import ReconInputError
from nn_recon.lpips import lpips_distance
from nn_recon.shadows import ClassifierMLP


def mse_per_image(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(K,) mean squared error between matching images."""
    if a.shape != b.shape:
        raise ReconInputError(f"images to compare differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    return (a - b).flatten(1).square().mean(1)


def nearest_neighbours(
    targets: torch.Tensor, pool: torch.Tensor, block: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each target, the MSE to and the index of its closest image in ``pool``."""
    pool_flat = pool.flatten(1).double()
    pool_sq = pool_flat.square().sum(1)
    distances, indices = [], []
    for part in targets.flatten(1).double().split(block):
        squared = part.square().sum(1, keepdim=True) + pool_sq - 2 * part @ pool_flat.T
        best, index = squared.clamp(min=0).min(1)
        distances.append(best / pool_flat.shape[1])
        indices.append(index)
    return torch.cat(distances).float(), torch.cat(indices)


def kl_divergence(
    classifier: torch.nn.Module, targets: torch.Tensor, reconstructions: torch.Tensor
) -> torch.Tensor:
    """(K,) KL(p(·|target) ‖ p(·|reconstruction)) under a separately trained classifier."""
    with torch.no_grad():
        log_p = F.log_softmax(classifier(targets), -1)
        log_q = F.log_softmax(classifier(reconstructions), -1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def train_evaluation_classifier(
    images: torch.Tensor, labels: torch.Tensor, epochs: int = 3, seed: int = 0
) -> torch.nn.Module:
    """The KL metric's classifier: a 784-256-10 ReLU MLP, Adam on mini-batches of the given data."""
    torch.manual_seed(seed)
    widths = (int(np.prod(images.shape[1:])), 256, int(labels.max()) + 1)
    classifier = ClassifierMLP(widths, "relu")
    optimiser = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for batch in torch.randperm(len(images), generator=generator).split(128):
            optimiser.zero_grad()
            F.cross_entropy(classifier(images[batch]), labels[batch]).backward()
            optimiser.step()
    return classifier.eval()


@dataclass(frozen=True)
class InformedScores:
    """Per-target metrics, all (K,) arrays."""

    mse: np.ndarray
    oracle_mse: np.ndarray
    oracle_index: np.ndarray
    lpips: np.ndarray
    kl: np.ndarray

    @property
    def success_rate(self) -> float:
        """Fraction of targets reconstructed closer (MSE) than their nearest-neighbour oracle."""
        return float(np.mean(self.mse < self.oracle_mse))

    def summary(self) -> dict[str, float]:
        return {
            "mean_mse": float(self.mse.mean()),
            "mean_oracle_mse": float(self.oracle_mse.mean()),
            "success_rate": self.success_rate,
            "mean_lpips": float(self.lpips.mean()),
            "mean_kl": float(self.kl.mean()),
        }


def score_reconstructions(
    targets: torch.Tensor,
    reconstructions: torch.Tensor,
    oracle_pool: torch.Tensor,
    classifier: torch.nn.Module,
    block: int = 256,
) -> InformedScores:
    """MSE, nearest-neighbour oracle, LPIPS and KL of each reconstruction against its target."""
    oracle_mse, oracle_index = nearest_neighbours(targets, oracle_pool, block)
    with torch.no_grad():
        lpips = torch.cat(
            [
                lpips_distance(a, b)
                for a, b in zip(targets.split(block), reconstructions.split(block), strict=True)
            ]
        )
    return InformedScores(
        mse=mse_per_image(targets, reconstructions).numpy(),
        oracle_mse=oracle_mse.numpy(),
        oracle_index=oracle_index.numpy(),
        lpips=lpips.numpy(),
        kl=kl_divergence(classifier, targets, reconstructions).numpy(),
    )


def reconstruction_measure(reconstructions: torch.Tensor, **meta) -> WeightedMeasure:
    """One point of weight 1 per target: the reconstructed image."""
    return WeightedMeasure.empirical({"image": reconstructions.numpy()}, **meta)


def save_comparison_grid(
    path: str | Path,
    targets: torch.Tensor,
    reconstructions: torch.Tensor,
    oracles: torch.Tensor,
    columns: int = 10,
) -> Path:
    """A PNG with rows target / reconstruction / oracle neighbour for the first ``columns`` targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(columns, len(targets))
    rows = (("target", targets), ("reconstruction", reconstructions), ("NN oracle", oracles))
    figure, axes = plt.subplots(3, columns, figsize=(1.2 * columns, 3.8), squeeze=False)
    for r, (title, images) in enumerate(rows):
        for c in range(columns):
            image = images[c].permute(1, 2, 0).squeeze(-1).numpy()
            axes[r, c].imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0, vmax=1)
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
        axes[r, 0].set_ylabel(title, fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path
