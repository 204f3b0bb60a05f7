"""The informed adversary's attack: a RecoNN learns from the shadow models to map a model back to its target.

shadow farm (θ_k, z_k) → RecoNN trained on (representation of θ_k, z_k) → applied to the released
models → their missing training points as a WeightedMeasure. The representation is the parameters
(white box) or the logits on fixed probe inputs (black box). Loading the data, training the farms
and scoring the reconstructions are :func:`nn_recon.pipeline.attack_informed`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from nn_recon.checkpoint import StateStore
from nn_recon.reconn import ReconnConfig, decode_features, train_reconstructor
from nn_recon.shadows import Farm, FarmConfig, logits_on_probes
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


def reconstruct_released(
    config: InformedAttackConfig,
    shadows: Farm,
    released: Farm,
    probes: torch.Tensor,
    store: StateStore | None = None,
    device: torch.device | str = "cpu",
) -> WeightedMeasure:
    """The released models' missing training points, by a RecoNN fitted on the shadow farm on
    ``device`` (its training kept in ``store``, and resumed from it); ``probes`` are the black box's
    fixed inputs."""
    if config.representation == "weights":
        shadow_features, released_features = shadows.params, released.params
    else:
        shadow_features = logits_on_probes(shadows.params.to(device), config.farm, probes).cpu()
        released_features = logits_on_probes(released.params.to(device), config.farm, probes).cpu()
    reconstructor = train_reconstructor(
        config.reconn, shadow_features, shadows.targets_x, store=store, device=device
    )
    return WeightedMeasure.empirical(
        {"image": decode_features(reconstructor, released_features).numpy()},
        attack="informed-reconn",
        config=asdict(config),
        target_labels=released.targets_y.tolist(),
    )
