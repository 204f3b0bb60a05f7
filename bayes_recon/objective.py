"""The attack's objective: the score-matching (Fisher-divergence) objective of the pseudo-data.

:func:`build_objective` turns a weighted model, the pseudo-data layout and the draws into
J(params; base points, key), the estimated Fisher divergence between the released posterior and
the posterior of the weighted pseudo-data, plus :func:`information_penalty`, which keeps every
pseudo-point within the Fisher information a real data point can carry. The memory budgets
(:data:`GRADIENT_BUDGET`, :data:`VALUE_BUDGET`) decide how many draws (or grid candidates) go
through at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayes_recon import pseudo
from bayes_recon.divergence import (
    Coordinates,
    Estimator,
    map_in_chunks,
    rademacher_slices,
    score_matching_objective,
)
from bayes_recon.weighting import WeightedModel

Array = jax.Array

PseudoObjective = Callable[[pseudo.Pseudo, Array, Array], Array]


class Objectives(NamedTuple):
    """The score-matching objective on a subset of draws (coarse stage), on all draws, and minibatched."""

    coarse: PseudoObjective
    full: PseudoObjective
    minibatch: PseudoObjective | None


# Memory bounds, in draws × pseudo-points × d·t, where d is the number of parameters and t the
# estimator's tangents (d for the exact trace, else the slices): a value takes about d·t numbers per
# draw and point (a d × d Hessian), a gradient d times that. Above a bound the draws (or the grid's
# candidates) go in rematerialised chunks. Calibrated at d = 3: earnings at M = N (1,192 points on
# 10,000 draws, 59 candidates on 1,000) asked for 31 GB unchunked; at d = 10 nes2000 asked for 32 GB
# at M = 50 (200 points) before the dimension was counted. kidiq (d = 3) stays below both at M = N.
GRADIENT_BUDGET = 135_000_000  # draws × points × d²·t
VALUE_BUDGET = 270_000_000  # grid candidates × draws × points × d·t


def value_size(estimator: Estimator, dim: int, n_slices: int) -> int:
    """d·t: numbers per draw and pseudo-point in one evaluation of the objective's value."""
    return dim * (dim if estimator == "exact" else n_slices)


def build_objective(
    weighted: WeightedModel,
    layout: pseudo.Layout,
    coordinates: Coordinates,
    draws: Array,
    estimator: Estimator,
    n_slices: int,
    seed: int,
    batch_size: int | None = None,
    side_by_side: int = 1,
) -> PseudoObjective:
    """J(params; base points, key): the score-matching objective of the weighted posterior.

    With ``batch_size`` the draws (and their slices) are a fresh random minibatch per key;
    otherwise all draws with slices fixed once (from ``seed``), so the objective is deterministic.
    ``side_by_side``: how many of its gradients run at once (Newton's Hessian columns), for memory.
    """
    n_draws, dim = draws.shape
    sliced = estimator != "exact"
    fixed_slices = rademacher_slices(jax.random.PRNGKey(seed), n_draws, n_slices, dim) if sliced else None

    def objective(params: pseudo.Pseudo, base: Array, batch_key: Array) -> Array:
        points, w = pseudo.measure(layout, params, base)
        log_q = coordinates.pull_back(lambda th: weighted.log_density(th, points, w))
        per_draw = side_by_side * w.shape[0] * dim * value_size(estimator, dim, n_slices)
        at_once = max(1, GRADIENT_BUDGET // per_draw)
        penalty = information_penalty(weighted, coordinates, draws, points)
        if batch_size is None:
            return score_matching_objective(log_q, draws, fixed_slices, estimator, at_once) + penalty
        rows_key, slices_key = jax.random.split(batch_key)
        rows = jax.random.choice(rows_key, n_draws, (batch_size,), replace=False)
        slices = rademacher_slices(slices_key, batch_size, n_slices, dim) if sliced else None
        return score_matching_objective(log_q, draws[rows], slices, estimator, at_once) + penalty

    return jax.jit(objective)  # traced once, reused by every stage and derivative


# One data point tells less about θ than the whole data set: in the attack's (whitened)
# coordinates, where the posterior's precision is about the identity, a point's Fisher information
# E_s ||∇_z log p(x | θ_s)||² is at most about d (the whole data's is about d by the information
# identity, more when the data are over-dispersed for the model, hence the margin
# INFORMATION_BOUND; a typical point's is d / N). A pseudo-point far beyond that is a point no data
# set contains: a logistic or Laplace likelihood at an extreme covariate is a near-step in θ whose
# curvature falls between the draws, and the score-matching estimate, blind between its draws,
# rewards it without end (a logistic regression at covariate scales 0.01 to 1,000 went to mass 0
# with points at 10⁶ and an objective far below the true data's). The penalty is zero up to
# INFORMATION_BOUND × d and grows with the square of the excess, faster than such a step's reward
# (which grows with its slope, the square root of the information); real data do not pay it. Per
# point and per unit weight, it leaves the objective a quadratic in the total mass
# (:func:`bayes_recon.pseudo.at_best_mass`). It is estimated on the objective's own draws: a step
# between the draws it is estimated on would escape it.
INFORMATION_BOUND = 10.0


def point_information(
    weighted: WeightedModel, coordinates: Coordinates, draws: Array, points: Mapping[str, Array]
) -> Array:
    """Each point's Fisher information per unit weight, E_s ||∇_z log p(x_j | θ_s)||² over ``draws`` (M,)."""

    def information(z: Array) -> Array:
        scores = weighted.point_scores(coordinates.shift + coordinates.scale @ z, points) @ coordinates.scale
        return jnp.sum(scores**2, axis=-1)

    n_points = len(next(iter(points.values())))
    at_once = max(1, GRADIENT_BUDGET // (n_points * draws.shape[1] ** 2))
    information = map_in_chunks(information, draws, at_once)
    return jnp.mean(information, axis=0)


def information_penalty(
    weighted: WeightedModel, coordinates: Coordinates, draws: Array, points: Mapping[str, Array]
) -> Array:
    """d × the mean over points of (information / bound − 1)² where it exceeds INFORMATION_BOUND × d."""
    dim = draws.shape[1]
    info = point_information(weighted, coordinates, draws, points)
    excess = jnp.maximum(jnp.where(jnp.isfinite(info), info, 1e30) / (INFORMATION_BOUND * dim) - 1.0, 0.0)
    return dim * jnp.mean(excess**2)
