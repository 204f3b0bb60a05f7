"""Fisher-divergence estimators that need only draws from the target posterior p.

By the score-matching identity (integration by parts),

    ½ E_p ||∇log q − ∇log p||² = E_p[ tr ∇²log q + ½ ||∇log q||² ] + const(p),

so the right-hand side, averaged over draws θ_s ~ p, is an objective in q alone. The sliced form
replaces the trace by E_v[vᵀ∇²log q v] and the norm by E_v[(vᵀ∇log q)²] for random v with
E[vvᵀ] = I (Hessian-vector products by forward-over-reverse differentiation); the
variance-reduced form keeps the exact norm, which costs nothing extra.

All functions are pure: a log density ``log_q(θ) -> scalar`` over flat vectors, draws (S, d),
and slice vectors (S, K, d).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from recon_core.errors import ReconError

Array = jax.Array
Estimator = Literal["exact", "sliced", "sliced_vr"]
ESTIMATORS: tuple[Estimator, ...] = ("exact", "sliced", "sliced_vr")


def exact_term(log_q: Callable[[Array], Array], theta: Array) -> Array:
    """tr ∇²log q(θ) + ½ ||∇log q(θ)||² with the full Hessian (for small dimension)."""
    grad = jax.grad(log_q)
    g, hessian_trace = grad(theta), jnp.trace(jax.jacfwd(grad)(theta))
    return hessian_trace + 0.5 * g @ g


def sliced_term(
    log_q: Callable[[Array], Array], theta: Array, slices: Array, variance_reduced: bool
) -> Array:
    """Mean over the K slices v of vᵀ∇²log q v + ½ (vᵀ∇log q)² (or + ½||∇log q||² when variance-reduced)."""
    g, hvp = jax.linearize(jax.grad(log_q), theta)
    curvature = jax.vmap(lambda v: v @ hvp(v))(slices)
    norm = g @ g if variance_reduced else (slices @ g) ** 2
    return jnp.mean(curvature + 0.5 * norm)


def score_matching_objective(
    log_q: Callable[[Array], Array],
    draws: Array,
    slices: Array | None,
    estimator: Estimator,
    draws_at_once: int | None = None,
) -> Array:
    """The Fisher divergence from p (represented by ``draws``) to q, up to a constant in q.

    ``draws_at_once``: evaluate the draws in chunks of this size, each rematerialised in the
    backward pass, so that memory is bounded by one chunk rather than all draws (a thousand
    pseudo-points on 10,000 draws otherwise asks for tens of GB); None: all at once.
    """
    return jnp.mean(score_matching_terms(log_q, draws, slices, estimator, draws_at_once))


def score_matching_terms(
    log_q: Callable[[Array], Array],
    draws: Array,
    slices: Array | None,
    estimator: Estimator,
    draws_at_once: int | None = None,
) -> Array:
    """The objective's term at each draw (S,): their mean is :func:`score_matching_objective`, their
    spread its Monte Carlo error."""
    variance_reduced = estimator == "sliced_vr"

    def term(theta: Array, v: Array | None) -> Array:
        if estimator == "exact":
            return exact_term(log_q, theta)
        return sliced_term(log_q, theta, v, variance_reduced)

    return map_in_chunks(lambda pair: term(*pair), (draws, slices), draws_at_once)


def gaussian_terms(draws: Array, slices: Array | None, estimator: Estimator) -> Array:
    """The objective's terms at each draw (:func:`score_matching_terms`, the same slices) of the Gaussian
    with the draws' mean and covariance.

    The true data's posterior is the draws' own, p, which minimises the Fisher divergence from p: on
    average over the draws no data set scores below the true one, and the true one scores no worse than
    the Gaussian this one estimates (as well where p is Gaussian). Fitted to the same draws, this one
    scores better on them than that (:func:`bayes_recon.reconstruct.floor_check` takes it off)."""
    mean = jnp.mean(draws, axis=0)
    precision = jnp.linalg.inv(jnp.atleast_2d(jnp.cov(draws, rowvar=False)))
    return score_matching_terms(
        lambda theta: -0.5 * (theta - mean) @ precision @ (theta - mean), draws, slices, estimator
    )


def map_in_chunks(fn: Callable[[Any], Any], xs: Any, at_once: int | None) -> Any:
    """``fn`` over the leading axis of the pytree ``xs``: one ``vmap`` when ``at_once`` is None or
    covers it all, else ``vmap``-ed chunks of ``at_once`` in a loop, each rematerialised in a
    backward pass, so that memory is bounded by one chunk."""
    if at_once is None or at_once >= len(jax.tree_util.tree_leaves(xs)[0]):
        return jax.vmap(fn)(xs)
    return jax.lax.map(jax.checkpoint(fn), xs, batch_size=at_once)


def rademacher_slices(key: Array, n_draws: int, n_slices: int, dim: int) -> Array:
    """Slice directions with E[vvᵀ] = I; Rademacher has the lowest variance for the trace term."""
    return jax.random.rademacher(key, (n_draws, n_slices, dim), dtype=jnp.result_type(float))


SINGULAR = 1e-6  # a coordinate's sd given the ones before it, over its own: below it, collinear


class Coordinates(NamedTuple):
    """An affine change of coordinates θ = shift + scale @ z for the divergence.

    The Fisher divergence is not invariant to the parameter coordinates; standardising θ by the
    draws' mean and covariance makes the estimator affine-invariant (it is the Fisher divergence
    with the posterior covariance as metric).
    """

    shift: Array
    scale: Array

    @classmethod
    def identity(cls, dim: int) -> Coordinates:
        return cls(jnp.zeros(dim), jnp.eye(dim))

    @classmethod
    def standardised(cls, draws: Array) -> Coordinates:
        """From concrete draws (S, d); refuses draws whose covariance is singular: some coordinate's sd
        given the ones before it under SINGULAR of its own (rounding lets Cholesky through an exactly
        collinear pair)."""
        mean = jnp.mean(draws, axis=0)
        cov = jnp.atleast_2d(jnp.cov(draws, rowvar=False))
        scale = jnp.linalg.cholesky(cov)
        conditional = np.diag(np.asarray(scale)) / np.sqrt(np.diag(np.asarray(cov)))
        if not (np.all(np.isfinite(np.asarray(scale))) and np.all(conditional > SINGULAR)):
            raise ReconError(
                f"the draws' covariance ({cov.shape[0]} unconstrained coordinates) is singular: some "
                "parameter is constant or an exact linear function of others across the draws, so "
                "they cannot be standardised. Drop the redundant parameter from the model, or run "
                "with ReconConfig(coordinates='unconstrained')."
            )
        return cls(mean, scale)

    def to_attack(self, theta: Array) -> Array:
        """Model coordinates (rows of θ) to attack coordinates z."""
        return jax.scipy.linalg.solve_triangular(self.scale, (theta - self.shift).T, lower=True).T

    def to_model(self, z: Array) -> Array:
        """Attack coordinates z (a vector, or rows) to model coordinates θ: the inverse of ``to_attack``."""
        return self.shift + z @ self.scale.T

    def pull_back(self, log_q: Callable[[Array], Array]) -> Callable[[Array], Array]:
        """The log density in attack coordinates (the constant log-Jacobian is dropped)."""
        return lambda z: log_q(self.to_model(z))
