"""A mitigation hint for Gaussian linear regressions: release the posterior of noisy sufficient statistics.

Sufficient-statistic perturbation: the data's N, XᵀX, Xᵀy and yᵀy (through the model's design),
clipped to bounds, get Laplace noise (ε-DP) or Gaussian noise ((ε, δ)-DP, the classic calibration,
valid for ε < 1), each entry in proportion to one record's largest contribution to it; the joint
matrix [X y]ᵀ[X y] is then projected back to positive semi-definite. The released posterior is
p(θ) exp(ℓ(θ; noisy statistics)), sampled with NUTS. How much leaks from it is what the best
attack reaches: the oracle (:mod:`bayes_recon.oracle`, the attack's exact optimum for these
models) on its draws.

The clipping bounds are the data's own range per design column, as if they were public: a real
release must fix them without looking at the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS
from numpyro.infer.util import constrain_fn

from bayes_recon.divergence import Coordinates
from bayes_recon.models import LinearGaussian
from bayes_recon.oracle import PROBE_POINTS, linear_gaussian_oracle, pack, statistics_log_likelihood, unpack
from bayes_recon.precision import attack_numerics
from bayes_recon.reconstruct import AttackSetup
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure, linear_model_errors


@dataclass(frozen=True)
class Perturbation:
    """The mechanism: ``epsilon`` (and ``delta`` for "gaussian"); ``draws`` of the released posterior
    (None: as many as the release audited, so that both carry the same Monte Carlo error)."""

    epsilon: float
    mechanism: Literal["laplace", "gaussian"] = "laplace"
    delta: float = 1e-5
    draws: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ReconError(f"epsilon must be a positive number, got {self.epsilon}")
        if self.mechanism not in ("laplace", "gaussian"):
            raise ReconError(f"the mechanism is 'laplace' or 'gaussian', got {self.mechanism!r}")
        if self.mechanism == "gaussian" and not 0 < self.delta < 1:
            raise ReconError(f"delta must lie in (0, 1) for the Gaussian mechanism, got {self.delta}")

    def noise_scale(self, entries: int) -> float:
        """The noise on each entry, in units of one record's bound on that entry.

        Divided by those bounds, one record changes each of the ``entries`` statistics by at most 1:
        L1 sensitivity ``entries``, L2 sensitivity √entries. Laplace scale Δ₁/ε; Gaussian σ =
        Δ₂ √(2 ln(1.25/δ)) / ε.
        """
        if self.mechanism == "laplace":
            return entries / self.epsilon
        return math.sqrt(entries) * math.sqrt(2 * math.log(1.25 / self.delta)) / self.epsilon


@attack_numerics
def noisy_statistics(
    spec: LinearGaussian, truth: WeightedMeasure, perturbation: Perturbation
) -> tuple[dict[str, np.ndarray], float]:
    """The perturbed (N, XᵀX, Xᵀy, yᵀy) of the data, projected to valid statistics, and the noise scale
    (per entry, in units of one record's bound on it: the budget is split evenly over the entries)."""
    x, y = spec.design(truth.points)
    exact = pack(truth.linear_model_statistics(x, y))
    bound_x, bound_y = np.abs(x).max(axis=0), float(np.abs(y).max())
    one_record = pack(
        {"N": 1.0, "XtX": np.outer(bound_x, bound_x), "Xty": bound_x * bound_y, "yty": bound_y**2}
    )
    scale = perturbation.noise_scale(len(exact))
    rng = np.random.default_rng(perturbation.seed)
    unit = (
        rng.laplace(0, scale, exact.shape)
        if perturbation.mechanism == "laplace"
        else rng.normal(0, scale, exact.shape)
    )
    noise = unit * one_record
    stats = {k: np.asarray(v) for k, v in unpack(jnp.asarray(exact + noise), x.shape[1]).items()}
    # [X y]ᵀ[X y] must be positive semi-definite for the likelihood to be one; N at least one record
    p = x.shape[1]
    joint = np.block(
        [[stats["XtX"], stats["Xty"][:, None]], [stats["Xty"][None], stats["yty"].reshape(1, 1)]]
    )
    values, vectors = np.linalg.eigh((joint + joint.T) / 2)
    joint = (vectors * np.maximum(values, 1e-9 * values.max())) @ vectors.T
    projected = {
        "N": np.maximum(stats["N"], 1.0),
        "XtX": joint[:p, :p],
        "Xty": joint[:p, p],
        "yty": joint[p, p],
    }
    return projected, scale


@attack_numerics
def posterior_from_statistics(
    setup: AttackSetup, spec: LinearGaussian, stats: Mapping[str, np.ndarray], n_draws: int, seed: int
) -> np.ndarray:
    """NUTS draws (S, d) in unconstrained coordinates from p(θ) exp(ℓ(θ; stats)), the model's own prior."""
    model = setup.weighted_model
    prior_data = setup.layout.example(1)
    stats = {k: jnp.asarray(v) for k, v in stats.items()}

    def potential(theta: jax.Array) -> jax.Array:
        params = constrain_fn(model.model, (), {**model.fixed, **prior_data}, model.unravel(theta))
        beta = jnp.asarray(spec.coefficients(params))
        prior = model.log_density(theta, prior_data, jnp.zeros(1))  # weight 0: the prior and its Jacobian
        return -(prior + statistics_log_likelihood(beta, params[spec.sigma], stats))

    start = setup.coordinates.to_model(jnp.mean(setup.draws, axis=0))
    kernel = NUTS(potential_fn=potential, dense_mass=True)  # β's are strongly correlated without centring
    mcmc = MCMC(kernel, num_warmup=min(n_draws, 2000), num_samples=n_draws, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), init_params=start)
    return np.asarray(mcmc.get_samples())


@attack_numerics
def remaining_leakage(
    setup: AttackSetup, spec: LinearGaussian, truth: WeightedMeasure, perturbation: Perturbation
) -> dict[str, Any]:
    """The best attack's scale-free errors (see ``linear_model_errors``) on the noisy release's draws, and
    the largest shift of a parameter's posterior mean from the audited release, in its posterior sds."""
    stats, scale = noisy_statistics(spec, truth, perturbation)
    n_draws = perturbation.draws or int(setup.draws.shape[0])
    theta = posterior_from_statistics(setup, spec, stats, n_draws, perturbation.seed)
    coordinates = Coordinates.standardised(jnp.asarray(theta))
    probe = setup.layout.probe(perturbation.seed, PROBE_POINTS)
    oracle = linear_gaussian_oracle(
        setup.weighted_model, spec, coordinates.to_attack(jnp.asarray(theta)), coordinates, probe
    )
    true_stats = truth.linear_model_statistics(*spec.design(truth.points))
    released = setup.coordinates.to_model(setup.draws)
    # what the noise costs the posterior's user: how far each parameter's mean moved, in posterior sds
    shift = np.abs(theta.mean(axis=0) - np.mean(released, axis=0)) / np.std(released, axis=0)
    return {
        "epsilon": perturbation.epsilon,
        "mechanism": perturbation.mechanism,
        "delta": perturbation.delta if perturbation.mechanism == "gaussian" else None,
        "noise_scale": scale,
        "errors": linear_model_errors(oracle.statistics, true_stats),
        "noisy_statistic_errors": linear_model_errors(stats, true_stats),
        "posterior_mean_shift_sd": float(shift.max()),
    }
