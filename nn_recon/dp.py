"""DP gradient descent as the mitigation: per-example clipping, Gaussian noise, ε from dp-accounting.

Full-batch DP-GD for T steps is the T-fold composition of the Gaussian mechanism with
sensitivity C (the clip norm, add/remove-one adjacency as in DP-SGD); the noise multiplier σ
that gives a target (ε, δ) is found with Google's ``dp-accounting`` RDP accountant. ε = ∞ means
no clipping and no noise: plain gradient descent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from recon_core.errors import ReconError


@dataclass(frozen=True)
class DPConfig:
    """(ε, δ) for the whole training run and the per-example gradient clip norm C."""

    epsilon: float = math.inf
    delta: float = 1e-5
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ReconError(f"epsilon must be > 0 (math.inf for no privacy), got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise ReconError(f"delta must be in (0, 1), got {self.delta}")
        if not self.clip_norm > 0:
            raise ReconError(f"clip_norm must be > 0, got {self.clip_norm}")

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)


def noise_multiplier(config: DPConfig, steps: int) -> float:
    """σ such that ``steps`` full-batch Gaussian steps with noise σ·C are (ε, δ)-DP (0 for ε = ∞)."""
    if not config.private:
        return 0.0
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    def event(sigma: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), steps)

    return float(
        dp_accounting.calibrate_dp_mechanism(
            RdpAccountant,
            event,
            config.epsilon,
            config.delta,
            dp_accounting.LowerEndpointAndGuess(1e-6, 1.0),
        )
    )
