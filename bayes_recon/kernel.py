"""The model-induced kernel: what the release lets an adversary see of the data.

The difference of two weighted posteriors' scores is linear in their measures: for
q_a ∝ p(θ) Π p(x|θ)^{w_a} and q_b likewise, ∇log q_a − ∇log q_b = Σ_x (w_a − w_b)(x) s(x, θ) with
s(x, θ) = ∇_θ log p(x|θ), the prior cancelling. So the Fisher divergence between them,
½ E_θ ||∇log q_a − ∇log q_b||², is ½ MMD² between the two data measures under

    k(x, x') = E_θ[ s(x, θ) · s(x', θ) ],   θ from the posterior's draws,

in the attack's coordinates. Data sets that this kernel cannot tell apart give the same
posterior, whatever an attack does: the kernel's features are the identifiable statistics.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from bayes_recon.precision import attack_numerics
from bayes_recon.reconstruct import AttackSetup
from recon_core.measure import Kernel


@attack_numerics
def model_features(setup: AttackSetup, points: Mapping[str, np.ndarray], max_draws: int = 1000) -> np.ndarray:
    """φ(x) with k(x, x') = φ(x)·φ(x'): the per-point scores at each draw, (M, S·d), scaled by 1/√S."""
    draws = setup.draws[:max_draws]
    coordinates, model = setup.coordinates, setup.weighted_model
    data = setup.layout.typed(points)

    def per_draw(z: jax.Array) -> jax.Array:
        theta = coordinates.to_model(z)
        return model.point_scores(theta, data) @ coordinates.scale  # (M, d)

    scores = jax.jit(jax.vmap(per_draw))(draws)  # (S, M, d)
    return np.asarray(jnp.transpose(scores, (1, 0, 2)).reshape(scores.shape[1], -1)) / np.sqrt(len(draws))


@attack_numerics
def model_kernel(setup: AttackSetup, max_draws: int = 1000) -> Kernel:
    """The model-induced kernel on the draws (up to ``max_draws``) and coordinates an attack used."""

    def kernel(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> np.ndarray:
        return model_features(setup, a, max_draws) @ model_features(setup, b, max_draws).T

    return kernel
