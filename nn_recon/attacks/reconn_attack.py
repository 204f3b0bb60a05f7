"""The informed adversary end to end: D⁻, shadow farm, released models, RecoNN, scores.

data → released models (one per test target, trained on D⁻ ∪ {target}) → shadow farm on the
adversary's side data → RecoNN trained on the shadows → reconstructions of the released targets
→ WeightedMeasure + per-target scores. Farms and the RecoNN checkpoint live under ``out`` so a
second run (another RecoNN, another representation) reuses the trained models.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from nn_recon.data import load_dataset
from nn_recon.metrics import InformedScores, score_informed
from nn_recon.reconn import ReconnConfig, decode_features, train_reconstructor
from nn_recon.report import save_informed_grid
from nn_recon.shadows import ClassifierMLP, Farm, FarmConfig, build_farm, farm_accuracy, logits_on_probes
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure

REPRESENTATIONS = ("weights", "logits")


@dataclass(frozen=True)
class InformedAttackConfig:
    """The experiment: which data, how many of each kind of point, and the two trainings.

    Defaults: Balle et al.'s MNIST setting — |D⁻| = 1,000 training images, shadow targets from
    the rest of the training set, released targets from the test set.
    """

    dataset: str = "mnist"
    data_root: str | None = None
    fixed_set_size: int = 1000
    shadows: int = 1000
    targets: int = 1000
    representation: str = "weights"
    probes: int = 100
    seed: int = 0
    farm: FarmConfig = field(default_factory=FarmConfig)
    reconn: ReconnConfig = field(default_factory=ReconnConfig)

    def __post_init__(self) -> None:
        if self.representation not in REPRESENTATIONS:
            raise ReconError(f"representation must be one of {REPRESENTATIONS}, got {self.representation!r}")
        if min(self.fixed_set_size, self.shadows, self.targets, self.probes) < 1:
            raise ReconError("fixed_set_size, shadows, targets and probes must be >= 1")


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

    def save(self, folder: str | Path) -> dict[str, Path]:
        folder = Path(folder)
        return {
            "measure": self.measure.save(folder / "reconstructions"),
            "grid": save_informed_grid(
                folder / "grid.png", self.targets.numpy(), self.reconstructions.numpy(), self.oracles.numpy()
            ),
        }


def _split(config: InformedAttackConfig):
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


def train_farms(
    config: InformedAttackConfig, out: str | Path, device: torch.device | str = "cpu"
) -> tuple[Farm, Farm, dict[str, float]]:
    """The released models (one per target) and the shadow farm, trained on ``device`` or reused
    under ``out``."""
    out = Path(out)
    _, (x_minus, y_minus), (shadow_x, shadow_y), (test_x, test_y) = _split(config)
    timings: dict[str, float] = {}
    farms = []
    # the released models' DP noise (noise seed 1) is the defender's, unknown to the adversary's shadows (0)
    for name, xs, ys, noise_seed in (
        (f"released_{config.targets}", test_x[: config.targets], test_y[: config.targets], 1),
        (f"shadows_{config.shadows}", shadow_x, shadow_y, 0),
    ):
        start = time.perf_counter()
        farms.append(
            build_farm(
                config.farm, x_minus, y_minus, xs, ys, out / name, noise_seed=noise_seed, device=device
            )
        )
        timings[f"{name}_s"] = time.perf_counter() - start
    return farms[0], farms[1], timings


def run_informed_attack(
    config: InformedAttackConfig, out: str | Path, device: torch.device | str = "cpu"
) -> InformedAttackResult:
    """Train (or reuse) the farms under ``out``, fit the RecoNN, reconstruct and score the targets:
    every training and scoring network on ``device``, the results on the CPU."""
    if config.shadows < 2:  # refused before the farms are trained, not after
        raise ReconError(f"the RecoNN learns from the shadow models: needs >= 2, not {config.shadows}")
    out = Path(out)
    (train_x, train_y), (x_minus, _), (shadow_x, _), (test_x, test_y) = _split(config)
    target_x, target_y = test_x[: config.targets], test_y[: config.targets]
    released, shadows, timings = train_farms(config, out, device)
    if config.representation == "weights":
        shadow_features, released_features = shadows.params, released.params
    else:
        probes = train_x[-config.probes :]  # fixed inputs the adversary queries, outside D⁻ and shadows
        shadow_features = logits_on_probes(shadows.params.to(device), config.farm, probes).cpu()
        released_features = logits_on_probes(released.params.to(device), config.farm, probes).cpu()

    start = time.perf_counter()
    reconstructor = train_reconstructor(
        config.reconn,
        shadow_features,
        shadow_x,
        checkpoint=out / f"reconn_{config.representation}_{len(shadow_x)}.pt",
        device=device,
    )
    reconstructions = decode_features(reconstructor, released_features)
    timings["reconn_s"] = time.perf_counter() - start

    start = time.perf_counter()
    pool = torch.cat([x_minus, shadow_x])
    classifier = train_evaluation_classifier(train_x, train_y, seed=config.seed, device=device)
    scores = score_informed(target_x.numpy(), reconstructions.numpy(), pool.numpy(), classifier)
    released_accuracy = float(farm_accuracy(released.params.to(device), config.farm, test_x, test_y).mean())
    timings["metrics_s"] = time.perf_counter() - start
    measure = WeightedMeasure.empirical(
        {"image": reconstructions.numpy()},
        attack="informed-reconn",
        config=asdict(config),
        target_labels=target_y.tolist(),
        summary={**scores.summary(), "released_test_accuracy": released_accuracy},
    )
    return InformedAttackResult(
        measure=measure,
        scores=scores,
        released_accuracy=released_accuracy,
        timings=timings,
        targets=target_x,
        reconstructions=reconstructions,
        oracles=pool[torch.from_numpy(scores.oracle_index)],
    )


def train_evaluation_classifier(
    images: torch.Tensor,
    labels: torch.Tensor,
    epochs: int = 3,
    seed: int = 0,
    device: torch.device | str = "cpu",
):
    """The KL metric's separately trained classifier: a 784-256-10 ReLU MLP, Adam on mini-batches,
    on ``device`` (batches drawn on the CPU)."""
    torch.manual_seed(seed)
    classifier = ClassifierMLP((math.prod(images.shape[1:]), 256, int(labels.max()) + 1), "relu").to(device)
    optimiser = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    images, labels = images.to(device), labels.to(device)
    for _ in range(epochs):
        for batch in torch.randperm(len(images), generator=generator).to(device).split(128):
            optimiser.zero_grad()
            F.cross_entropy(classifier(images[batch]), labels[batch]).backward()
            optimiser.step()
    return classifier.eval()
