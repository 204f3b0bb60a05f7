"""The oracle: the exact minimiser of the Fisher divergence over the statistics a model sees.

For a Gaussian linear regression the weighted log-likelihood Σ_j w_j log p(x_j|θ) depends on the
pseudo-data only through t = (N, XᵀWX, XᵀWy, yᵀWy), and linearly. The score-matching objective is
then a quadratic in t, J(t) = a + bᵀt + ½ tᵀCt with b and C averages of per-draw terms, and its
minimiser t* = −C⁻¹b is one linear solve. No pseudo-data optimiser can do better on the same
draws and coordinates; a working one lands on it. A bootstrap over the draws (reweighting the
per-draw terms) gives the Monte Carlo spread of t*.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from bayes_recon.divergence import Coordinates, exact_term
from bayes_recon.models import LinearGaussian
from bayes_recon.weighting import WeightedModel

Statistics = dict[str, np.ndarray]


@dataclass(frozen=True)
class Oracle:
    statistics: Statistics
    bootstrap: list[Statistics]

    def spread(self) -> dict[str, float]:
        """Bootstrap standard deviation of each statistic, relative (scale-free, like the errors)."""
        from bayes_recon.measure import linear_model_errors

        errs = [linear_model_errors(b, self.statistics) for b in self.bootstrap]
        return {k: float(np.sqrt(np.mean([e[k] ** 2 for e in errs]))) for k in errs[0]} if errs else {}


def _unpack(t: jax.Array, p: int) -> dict[str, jax.Array]:
    rows, cols = np.triu_indices(p)
    upper = jnp.zeros((p, p)).at[rows, cols].set(t[1 : 1 + len(rows)])
    xtx = upper + upper.T - jnp.diag(jnp.diag(upper))
    return {"N": t[0], "XtX": xtx, "Xty": t[1 + len(rows) : 1 + len(rows) + p], "yty": t[-1]}


def statistics_log_likelihood(beta: jax.Array, sigma: jax.Array, stats: Mapping[str, jax.Array]) -> jax.Array:
    """Σ_j w_j log Normal(y_j | x_jᵀβ, σ) written through the statistics alone."""
    quadratic = stats["yty"] - 2 * beta @ stats["Xty"] + beta @ stats["XtX"] @ beta
    return -stats["N"] * (jnp.log(sigma) + 0.5 * jnp.log(2 * jnp.pi)) - quadratic / (2 * sigma**2)


def linear_gaussian_oracle(
    model: WeightedModel,
    spec: LinearGaussian,
    p: int,
    draws: jax.Array,
    coordinates: Coordinates,
    prior_data: Mapping[str, jax.Array],
    n_bootstrap: int = 0,
    seed: int = 0,
) -> Oracle:
    """The oracle statistics for unconstrained ``draws`` (S, d), in the given attack coordinates.

    ``prior_data`` is any single pseudo-point in the model's support; it enters with weight zero so
    that ``model.log_density`` is the prior (with its Jacobian) alone.
    """
    from numpyro.infer.util import constrain_fn

    n_stats = 1 + p * (p + 1) // 2 + p + 1
    zero_weight = jnp.zeros(1)

    def log_q(theta: jax.Array, t: jax.Array) -> jax.Array:
        params = constrain_fn(model.model, (), {**model.fixed, **prior_data}, model.unravel(theta))
        beta = jnp.asarray(spec.coefficients(params))
        sigma = params[spec.sigma]
        return model.log_density(theta, prior_data, zero_weight) + statistics_log_likelihood(
            beta, sigma, _unpack(t, p)
        )

    def per_draw(z: jax.Array) -> tuple[jax.Array, jax.Array]:
        def term(t: jax.Array) -> jax.Array:
            return exact_term(coordinates.pull_back(lambda th: log_q(th, t)), z)

        t0 = jnp.zeros(n_stats)
        score_jacobian = jax.jacfwd(lambda t: jax.grad(coordinates.pull_back(lambda th: log_q(th, t)))(z))(t0)
        return jax.grad(term)(t0), score_jacobian.T @ score_jacobian

    linear, quadratic = jax.jit(jax.vmap(per_draw))(draws)
    linear, quadratic = np.asarray(linear), np.asarray(quadratic)

    def solve(weights: np.ndarray) -> Statistics:
        b = weights @ linear / weights.sum()
        c = np.tensordot(weights, quadratic, axes=1) / weights.sum()
        scale = np.sqrt(np.diag(c))  # equilibrate: the statistics differ by many orders of magnitude
        t = -np.linalg.solve(c / np.outer(scale, scale), b / scale) / scale
        return {k: np.asarray(v) for k, v in _unpack(jnp.asarray(t), p).items()}

    rng = np.random.default_rng(seed)
    n = len(linear)
    boots = [solve(np.bincount(rng.integers(0, n, n), minlength=n).astype(float)) for _ in range(n_bootstrap)]
    return Oracle(solve(np.ones(n)), boots)
