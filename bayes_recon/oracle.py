"""The oracle: the exact minimiser of the Fisher divergence over the statistics a model sees.

For a Gaussian linear regression the weighted log-likelihood Σ_j w_j log p(x_j|θ) depends on the
pseudo-data only through t = (N, XᵀWX, XᵀWy, yᵀWy), and linearly. The score-matching objective is
then a quadratic in t, J(t) = a + bᵀt + ½ tᵀCt with b and C averages of per-draw terms, and its
minimiser is one linear solve. Not every t comes from a data set: with an intercept column N is
(XᵀWX)₀₀, and a design with products (an interaction) repeats entries. So t is restricted to the
span of the per-point statistics φ(x) = (1, xxᵀ, xy, y²), found numerically from probe points in
the data's support; the oracle is the minimiser over that span. No pseudo-data optimiser can do
better on the same draws and coordinates; a working one lands on it. A bootstrap over the draws
(reweighting the per-draw terms) gives the Monte Carlo spread of the oracle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.util import constrain_fn

from bayes_recon.divergence import Coordinates, exact_term
from bayes_recon.models import LinearGaussian
from bayes_recon.precision import attack_numerics
from bayes_recon.reconstruct import Reconstruction
from bayes_recon.weighting import WeightedModel
from recon_core.measure import linear_model_errors

Statistics = dict[str, np.ndarray]
PROBE_POINTS = 500  # well above the number of statistics of any registry design (≤ 60)


@dataclass(frozen=True)
class Oracle:
    statistics: Statistics
    bootstrap: list[Statistics]

    def spread(self) -> dict[str, float]:
        """Bootstrap standard deviation of each statistic, relative (scale-free, like the errors)."""
        errs = [linear_model_errors(b, self.statistics) for b in self.bootstrap]
        return {k: float(np.sqrt(np.mean([e[k] ** 2 for e in errs]))) for k in errs[0]} if errs else {}


def pack(stats: Mapping[str, np.ndarray]) -> np.ndarray:
    """(N, XᵀX, Xᵀy, yᵀy) → the vector t: N, the upper triangle of XᵀX row by row, Xᵀy, yᵀy."""
    xtx = np.asarray(stats["XtX"], float)
    rows, cols = np.triu_indices(len(xtx))
    return np.concatenate(
        [[float(stats["N"])], xtx[rows, cols], np.asarray(stats["Xty"], float), [float(stats["yty"])]]
    )


def unpack(t: jax.Array, p: int) -> dict[str, jax.Array]:
    rows, cols = np.triu_indices(p)
    upper = jnp.zeros((p, p)).at[rows, cols].set(t[1 : 1 + len(rows)])
    xtx = upper + upper.T - jnp.diag(jnp.diag(upper))
    return {"N": t[0], "XtX": xtx, "Xty": t[1 + len(rows) : 1 + len(rows) + p], "yty": t[-1]}


def statistics_log_likelihood(beta: jax.Array, sigma: jax.Array, stats: Mapping[str, jax.Array]) -> jax.Array:
    """Σ_j w_j log Normal(y_j | x_jᵀβ, σ) written through the statistics alone."""
    quadratic = stats["yty"] - 2 * beta @ stats["Xty"] + beta @ stats["XtX"] @ beta
    return -stats["N"] * (jnp.log(sigma) + 0.5 * jnp.log(2 * jnp.pi)) - quadratic / (2 * sigma**2)


def statistics_span(spec: LinearGaussian, probe: Mapping[str, np.ndarray]) -> np.ndarray:
    """A basis (n_stats, r) of the statistics reachable by data measures, from probe points.

    The rows φ(x_i) of the probe points span the reachable set; columns are scaled to unit norm
    first so that the rank decision does not depend on the columns' units.
    """
    x, y = spec.design(probe)
    per_point = np.stack(
        [
            pack({"N": 1.0, "XtX": np.outer(xi, xi), "Xty": xi * yi, "yty": yi * yi})
            for xi, yi in zip(x, y, strict=True)
        ]
    )
    scale = np.linalg.norm(per_point, axis=0)
    scale[scale == 0] = 1.0
    _, singular, vt = np.linalg.svd(per_point / scale, full_matrices=False)
    rank = int(np.sum(singular > singular[0] * 1e-9))
    return vt[:rank].T / scale[:, None]


@attack_numerics
def linear_gaussian_oracle(
    model: WeightedModel,
    spec: LinearGaussian,
    draws: jax.Array,
    coordinates: Coordinates,
    probe: Mapping[str, np.ndarray],
    n_bootstrap: int = 0,
    seed: int = 0,
) -> Oracle:
    """The oracle statistics for ``draws`` (S, d) given in attack coordinates (``coordinates.to_attack``).

    ``probe``: the model's free data columns at many points of their support (more points than
    statistics), used for the reachable span; its first point also serves as a zero-weight datum,
    so that ``model.log_density`` is the prior (with its Jacobian) alone.
    """
    basis = statistics_span(spec, probe)
    p = spec.design({k: np.asarray(v)[:1] for k, v in probe.items()})[0].shape[1]
    prior_data = {k: jnp.asarray(v)[:1] for k, v in probe.items()}
    zero_weight = jnp.zeros(1)

    def log_q(theta: jax.Array, t: jax.Array) -> jax.Array:
        params = constrain_fn(model.model, (), {**model.fixed, **prior_data}, model.unravel(theta))
        beta = jnp.asarray(spec.coefficients(params))
        return model.log_density(theta, prior_data, zero_weight) + statistics_log_likelihood(
            beta, params[spec.sigma], unpack(t, p)
        )

    def per_draw(z: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The per-draw objective is linear + quadratic in t; return its gradient at 0 and its Hessian."""
        t0 = jnp.zeros(basis.shape[0])
        linear = jax.grad(lambda t: exact_term(coordinates.pull_back(lambda th: log_q(th, t)), z))(t0)
        score_jacobian = jax.jacfwd(lambda t: jax.grad(coordinates.pull_back(lambda th: log_q(th, t)))(z))(t0)
        return linear, score_jacobian.T @ score_jacobian

    linear, quadratic = (np.asarray(a) for a in jax.jit(jax.vmap(per_draw))(draws))

    def solve(weights: np.ndarray) -> Statistics:
        b = weights @ linear / weights.sum()
        c = np.tensordot(weights, quadratic, axes=1) / weights.sum()
        # Equilibrate first (the statistics differ by many orders of magnitude), then restrict to
        # the reachable span with an orthonormal basis of it in the equilibrated units.
        scale = np.sqrt(np.diag(c))
        q, _ = np.linalg.qr(basis * scale[:, None])
        c_eq, b_eq = c / np.outer(scale, scale), b / scale
        u = -np.linalg.solve(q.T @ c_eq @ q, q.T @ b_eq)
        return {k: np.asarray(v) for k, v in unpack(jnp.asarray(q @ u / scale), p).items()}

    rng = np.random.default_rng(seed)
    n = len(linear)
    boots = [solve(np.bincount(rng.integers(0, n, n), minlength=n).astype(float)) for _ in range(n_bootstrap)]
    return Oracle(solve(np.ones(n)), boots)


@attack_numerics
def oracle_for(
    reconstruction: Reconstruction,
    spec: LinearGaussian,
    coordinates: Coordinates | None = None,
    n_bootstrap: int = 0,
    seed: int = 0,
) -> Oracle:
    """The oracle on the draws a reconstruction used: in its coordinates, or in ``coordinates`` of θ."""
    setup = reconstruction.setup
    draws = setup.draws
    if coordinates is not None:
        theta = setup.coordinates.to_model(draws)
        draws = coordinates.to_attack(theta)
    probe = setup.layout.probe(seed, PROBE_POINTS)
    return linear_gaussian_oracle(
        setup.weighted_model, spec, draws, coordinates or setup.coordinates, probe, n_bootstrap, seed
    )
