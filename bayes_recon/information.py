"""A start for the attack from what the release says of the data's information (Bernstein–von Mises).

Where a posterior is near Gaussian, its precision is the prior's curvature plus the data's observed
information at the posterior mean θ̄: Cov(θ)⁻¹ ≈ H_prior(θ̄) − Σ_i ∇²_θ log p(x_i | θ̄), in NumPyro's
unconstrained coordinates. So the draws alone give Î = Cov(θ)⁻¹ − H_prior(θ̄), the information of the
data, with no optimisation (``benchmarks/bayes_release_information.py``: within 0.15–3.7 % on the
registry). For a Gaussian linear model its coefficients' block is XᵀX / σ²: N, the covariates' means and
their whole covariance, correlations included, which the attack's grid (one coordinate at a time)
cannot find. :func:`fit_information` fits a restart's cloud (its covariates' affine map and mass, the
responses from the model's predictive as at every start) so that the pseudo-data's information
Σ_j w_j (−∇²_θ log p(x_j | θ̄)) matches Î, whitened by the draws' covariance, by Levenberg–Marquardt.
It runs where the grid and the Newton stages on a subset of draws left the restart, from that cloud
(the orders of magnitude and locations of the covariates: a covariate at 10³ behind a log link
overflows from a unit cloud) and from unit clouds, and keeps the restart's cloud unless the fit
matches the information better. It knows nothing of the model's form: on a model whose information
says little of the data, or whose posterior is far from Gaussian, it moves the cloud little or
somewhere the Newton stage on every draw leaves, and that restart loses to the others by objective.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from bayes_recon import pseudo
from bayes_recon.optimise import tree_where
from bayes_recon.weighting import WeightedModel

Array = jax.Array

FIT_STEPS = 400  # Levenberg–Marquardt steps at most (diamonds, 26 parameters: 100 left it short)
FIT_TOL = 1e-6  # stop once a step lowers the mismatch by less than this fraction of it
MAX_DAMPING = 1e8  # ... or once no step of any length lowers it


class AffineFit(NamedTuple):
    """The start's parameters while it is fitted (see :func:`fit_information`)."""

    shift: Array  # (K,) the covariates' b
    affine: Array  # (K, K) their A
    log_mass: Array  # (C,)


class FitState(NamedTuple):
    flat: Array  # the parameters accepted so far, flat
    candidate: Array  # the next step's
    mismatch: Array  # ‖residual‖² at ``flat``
    r: Array  # the residual at ``flat``
    jacobian: Array  # and its Jacobian
    damping: Array  # Marquardt's λ
    gain: Array  # the last accepted step's relative decrease of the mismatch
    steps: Array


class ReleasedInformation(NamedTuple):
    """Î whitened by the draws' covariance, RᵀÎR = I − Rᵀ H_prior(θ̄) R (R Rᵀ = Cov(θ)), R and θ̄."""

    target: Array
    root: Array
    mean: Array


def released_information(weighted: WeightedModel, layout: pseudo.Layout, theta: Array) -> ReleasedInformation:
    mean = theta.mean(axis=0)
    root = jnp.linalg.cholesky(jnp.atleast_2d(jnp.cov(theta.T)))
    prior = -jax.hessian(lambda t: weighted.log_prior(t, layout.example(1)))(mean)
    return ReleasedInformation(jnp.eye(theta.shape[1]) - root.T @ prior @ root, root, mean)


def fit_information(
    weighted: WeightedModel,
    layout: pseudo.Layout,
    with_responses: Callable[[pseudo.Cloud, Array], pseudo.Pseudo],
    covariates: tuple[int, ...],
    stratified: bool,
    released: ReleasedInformation,
    cloud: pseudo.Cloud,
    base: Array,
) -> tuple[pseudo.Cloud, Array]:
    """The cloud whose pseudo-data (on the base points ``base``, responses by ``with_responses``) have
    the whitened information at θ̄ closest to the release's, fitted from ``cloud`` and from unit clouds;
    ``cloud`` itself where the fitted cloud matches no better or is not finite. With the mismatch
    relative to the release's, ‖S − T‖ / ‖T‖ over the upper triangles, at ``cloud`` and at the cloud
    returned (each as the attack takes a cloud: responses by ``with_responses``, on ``base``).
    ``stratified``: ``with_responses`` shares the points out over the strata of discrete responses,
    into clouds on the base points (else it puts each point where it was given).

    The fit moves the covariates (``covariates``: their coordinates) by a full affine map of the base
    points, x = b + A u, and the mass, not the cloud's Cholesky factor: the information of a Gaussian
    linear model is linear in the covariates' second moments, a factorisation F Fᵀ in A. The responses
    come from the model's predictive at its own noise, every stratum's covariates alike (the
    predictive shares them out): with the noise free (or kept at the restart's), the fit traded the
    mass for it and stopped with diamonds' mass 50 times too small. The cloud returned has the fitted
    covariates' mean and covariance in every stratum. A kinked likelihood (Laplace) has no curvature off
    its kinks: its information is not fitted, and a fit that matches the rest no better leaves the cloud.
    """
    target, root, mean = released
    rows, cols = np.triu_indices(target.shape[0])
    index = np.asarray(covariates, dtype=int)
    covariate = np.isin(np.arange(layout.dim), index)
    block = covariate[:, None] & covariate[None, :]
    lower_rows, lower_cols = np.tril_indices(layout.dim, -1)

    def information(params: pseudo.Pseudo, on: Array) -> Array:
        points, weights = pseudo.measure(layout, params, on)
        curvature = jax.hessian(lambda t: weights @ weighted.loglik_per_point(t, points))(mean)
        return -root.T @ curvature @ root

    def pooled(params: pseudo.Pseudo, on: Array) -> tuple[Array, Array]:
        """The covariates' mean and covariance over every stratum's points."""
        z, _, weights = pseudo.coordinates(layout, params, on)
        p = weights / jnp.sum(weights)
        x = z[:, index]
        centred = x - p @ x
        return p @ x, (centred * p[:, None]).T @ centred

    plain = jax.tree_util.tree_map(jnp.zeros_like, cloud)  # the responses at the model's own noise

    def responded(fit: AffineFit) -> tuple[pseudo.Pseudo, Array]:
        """The pseudo-data of a fit, and the base points they are on."""
        moved = base.at[:, index].set(fit.shift + base[:, index] @ fit.affine.T)
        return with_responses(plain._replace(log_mass=fit.log_mass), moved), base if stratified else moved

    def starting(shift: Array, affine: Array) -> Array:
        """A start, flat, its mass scaled so that the information's trace is the release's (it is linear in
        the mass): from a mass far off, the fit crept (diamonds from 300 against 5,000)."""
        fit = AffineFit(shift, affine, cloud.log_mass)
        ratio = jnp.trace(target) / jnp.trace(information(*responded(fit)))
        log_mass = fit.log_mass + jnp.log(jnp.where(jnp.isfinite(ratio) & (ratio > 0), ratio, 1.0))
        return ravel_pytree(fit._replace(log_mass=log_mass))[0]

    # three starts: the cloud's covariates as they are, at unit spread, at the unconstrained space's unit
    # cloud (diamonds: the grid's cloud had 17 covariates 35 times too wide, and from there the fit crept)
    centre, spread = pooled(with_responses(cloud, base), base)
    unit = jnp.eye(len(index))
    starts = jax.vmap(starting)(
        jnp.stack([centre, centre, jnp.zeros_like(centre)]),
        jnp.stack([pseudo.regularised_cholesky(spread), unit, unit]),
    )
    unravel = ravel_pytree(AffineFit(centre, unit, cloud.log_mass))[1]

    def residual(flat: Array) -> Array:
        return (information(*responded(unravel(flat))) - target)[rows, cols]

    found, fitted_mismatch = jax.vmap(partial(levenberg_marquardt, residual))(starts)
    fitted = unravel(found[jnp.argmin(fitted_mismatch)])
    params, moved = responded(fitted)
    centre, spread = pooled(params, moved)
    d = layout.dim
    factor = jnp.zeros((d, d)).at[np.ix_(index, index)].set(pseudo.regularised_cholesky(spread))
    scale = jnp.broadcast_to(jnp.where(block, factor, jnp.eye(d)), (cloud.log_mass.shape[0], d, d))
    fitted_cloud = pseudo.Cloud(
        jnp.broadcast_to(jnp.zeros(layout.dim).at[index].set(centre), cloud.shift.shape),
        jnp.log(jnp.diagonal(scale, axis1=1, axis2=2)),
        scale[:, lower_rows, lower_cols],
        fitted.log_mass,
    )

    def mismatch(candidate: pseudo.Cloud) -> Array:
        value = jnp.linalg.norm((information(with_responses(candidate, base), base) - target)[rows, cols])
        return jnp.where(jnp.isfinite(value), value, jnp.inf)

    before, after = jax.vmap(mismatch)(
        jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), cloud, fitted_cloud)
    )
    finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(leaf)) for leaf in fitted_cloud]))
    better = finite & (after < before)
    relative = jnp.stack([before, jnp.where(better, after, before)]) / jnp.linalg.norm(target[rows, cols])
    return tree_where(better, fitted_cloud, cloud), relative


def levenberg_marquardt(residual: Callable[[Array], Array], flat: Array) -> tuple[Array, Array]:
    """Where Levenberg–Marquardt (Marquardt's scaling) takes ``flat`` on ‖residual‖², as one loop, and
    ‖residual‖² there. Each step evaluates the residual and its Jacobian once, at the
    step's candidate (so the program holds one copy of them): accepted where it lowers ‖residual‖²,
    the damping lowered, else refused and the damping raised."""

    def evaluate(flat: Array) -> tuple[Array, Array, Array]:
        jacobian, r = jax.jacfwd(lambda f: (residual(f),) * 2, has_aux=True)(flat)
        value = jnp.sum(r**2)
        return jnp.where(jnp.isfinite(value), value, jnp.inf), r, jacobian

    def step(state: FitState) -> FitState:
        value, r, jacobian = evaluate(state.candidate)
        better = value < state.mismatch
        r, jacobian = jnp.where(better, r, state.r), jnp.where(better, jacobian, state.jacobian)
        damping = jnp.where(better | (state.steps == 0), state.damping / 3.0, state.damping * 4.0)
        normal = jacobian.T @ jacobian
        damped = normal + damping * jnp.diag(jnp.diag(normal)) + 1e-12 * jnp.eye(len(flat))
        accepted = jnp.where(better, state.candidate, state.flat)
        return FitState(
            accepted,
            accepted - jnp.linalg.solve(damped, jacobian.T @ r),
            jnp.where(better, value, state.mismatch),
            r,
            jacobian,
            damping,
            jnp.where(better & (state.steps > 0), 1.0 - value / state.mismatch, state.gain),
            state.steps + 1,
        )

    def going(state: FitState) -> Array:
        return (state.steps < FIT_STEPS) & (state.gain > FIT_TOL) & (state.damping < MAX_DAMPING)

    size = jax.eval_shape(residual, flat).shape[0]
    begun = FitState(
        flat, flat, jnp.asarray(jnp.inf), jnp.zeros(size), jnp.zeros((size, len(flat))),
        jnp.asarray(3e-3), jnp.asarray(1.0), jnp.asarray(0),
    )  # fmt: skip
    fitted = jax.lax.while_loop(going, step, begun)
    return fitted.flat, fitted.mismatch
