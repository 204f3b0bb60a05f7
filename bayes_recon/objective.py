"""The attack's objective: the score-matching (Fisher-divergence) objective of the pseudo-data.

:func:`build_objective` turns a weighted model, the pseudo-data layout and the draws into
J(params; base points, key), the estimated Fisher divergence between the released posterior and
the posterior of the weighted pseudo-data, plus :func:`information_penalty`, which keeps every
pseudo-point within the Fisher information a real data point can carry. The weighted log-likelihood
is a sum of one term per point, so everything is built from every point's own score and curvature at
each draw (:func:`point_terms`) and the prior's (:func:`prior_terms`): the objective, its exact
quadratic in the total mass (:func:`build_mass_quadratic`, the grid's), and its Hessian in the
pseudo-data's parameters from derivatives in each point's own coordinates, with every draw's gradient
(:func:`build_point_derivatives`: Newton's, through :func:`build_hessian`, and the standard errors'
sandwich). The memory budgets (:data:`GRADIENT_BUDGET`, :data:`VALUE_BUDGET`) decide how many draws
(or grid candidates) go through at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from bayes_recon import pseudo
from bayes_recon.divergence import (
    Coordinates,
    Estimator,
    map_in_chunks,
    rademacher_slices,
)
from bayes_recon.weighting import Bandwidths, WeightedModel

Array = jax.Array

PseudoObjective = Callable[[pseudo.Pseudo, Array, Array], Array]
# (pseudo_of, params, base points) → the objective's Hessian in params (flattened by ravel_pytree), where
# pseudo_of(params) is the pseudo-data they stand for
PseudoHessian = Callable[[Callable[[Any], pseudo.Pseudo], Any, Array], Array]
# (params, base points, key) → (a, b, c): the objective at t times the weights is a t² + b t + c
MassQuadratic = Callable[[pseudo.Pseudo, Array, Array], tuple[Array, Array, Array]]


class ScoreMatching(NamedTuple):
    """What the objective is of: the weighted model, the pseudo-data's layout, the attack's coordinates
    of θ, and the estimator (with its slices per draw)."""

    weighted: WeightedModel
    layout: pseudo.Layout
    coordinates: Coordinates
    estimator: Estimator
    n_slices: int


class Objectives(NamedTuple):
    """The score-matching objective on a subset of draws (coarse stage), on all draws, and minibatched;
    of the first, its quadratic in the mass (the grid's) and its Hessian in any parameters of the
    pseudo-data (Newton's, on the cloud)."""

    coarse: PseudoObjective
    full: PseudoObjective
    full_error: PseudoObjective  # the Monte Carlo standard error of ``full`` (:func:`build_objective_error`)
    minibatch: PseudoObjective | None
    coarse_in_mass: MassQuadratic
    coarse_hessian: PseudoHessian


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


def draw_slices(estimator: Estimator, key: Array, n_draws: int, n_slices: int, dim: int) -> Array | None:
    """Slices for ``n_draws`` draws from ``key`` (None for the exact estimator)."""
    return None if estimator == "exact" else rademacher_slices(key, n_draws, n_slices, dim)


# Silverman's rule of thumb for a normal kernel: bandwidth 1.06 σ S^(-1/5) for S draws of spread σ.
SILVERMAN = 1.06


def kink_bandwidths(
    weighted: WeightedModel, coordinates: Coordinates, data: Mapping[str, Array], draws: Array
) -> Bandwidths:
    """Per observed site with a kink (Laplace, asymmetric Laplace), the bandwidth by which it is smoothed
    (:class:`bayes_recon.weighting._SmoothedLaplace`) at every point: Silverman's rule on the point's
    standardised residual over ``draws`` (attack coordinates), so that the kink's curvature averaged over
    the draws is a kernel density estimate there. A function of the points, differentiated with them.
    Empty (and the objective the plain one) for a model without such sites."""
    if not weighted.kink_residuals(coordinates.to_model(draws[0]), data):  # one draw tells, cheaply
        return {}
    residuals = jax.vmap(lambda x: weighted.kink_residuals(coordinates.to_model(x), data))(draws)
    return {
        name: SILVERMAN * len(draws) ** -0.2 * jnp.sqrt(jnp.var(r, axis=0) + 1e-16)
        for name, r in residuals.items()
    }


def point_terms(
    problem: ScoreMatching, data: Mapping[str, Array], draw: Array, v: Array | None, bandwidths: Bandwidths
) -> tuple[Array, Array]:
    """Every point's score g_j = ∇ log p(x_j | θ) (n, d) and curvature term t_j (n,) at one draw (attack
    coordinates): the trace of ∇² log p(x_j | θ), or with slices ``v`` (K, d) the mean of vᵀ∇² log p v;
    kinks smoothed by ``bandwidths`` (:func:`kink_bandwidths`).

    The weighted log-likelihood is Σ_j w_j log p(x_j | θ), so at a draw the objective's term is
    c + Σ_j w_j t_j + ½ |√M G|², with c and the prior score in G = prior score + Σ_j w_j g_j from the prior
    alone (:func:`prior_terms`) and M the identity (or, for the plain sliced estimator, the slices' mean
    vvᵀ: :func:`metric_root`). Forward derivatives along each direction give every point's own.
    """

    def loglik(x: Array) -> Array:
        return problem.weighted.loglik_per_point(problem.coordinates.to_model(x), data, bandwidths)

    def along(u: Array) -> tuple[Array, Array]:  # each point's first and second derivative along u
        return jax.jvp(lambda x: jax.jvp(loglik, (x,), (u,))[1], (draw,), (u,))

    scores, second = jax.vmap(along)(jnp.eye(draw.shape[0]))
    curvature = second.sum(axis=0) if v is None else jax.vmap(along)(v)[1].mean(axis=0)
    return scores.T, curvature


def prior_terms(problem: ScoreMatching) -> Callable[[Array, Array | None], tuple[Array, Array]]:
    """(draw, slices) → the prior's score (d,) and curvature term at the draw (attack coordinates)."""
    weighted, example = problem.weighted, problem.layout.example(1)
    log_prior = problem.coordinates.pull_back(lambda th: weighted.log_prior(th, example))

    def terms(draw: Array, v: Array | None) -> tuple[Array, Array]:
        score, curvature_along = jax.linearize(jax.grad(log_prior), draw)
        directions = jnp.eye(draw.shape[0]) if v is None else v
        curvature = jax.vmap(lambda u: u @ curvature_along(u))(directions)
        return score, curvature.sum() if v is None else curvature.mean()

    return terms


def metric_root(estimator: Estimator) -> Callable[[Array, Array | None], Array]:
    """√M applied to the leading axis of an array (given the draw's slices), so that GᵀMG = |√M G|²."""
    if estimator == "sliced":
        return lambda vector, v: jnp.tensordot(v, vector, axes=1) / jnp.sqrt(v.shape[0])
    return lambda vector, v: vector


def _mass_terms(
    problem: ScoreMatching, draws: Array, seed: int, batch_size: int | None
) -> Callable[[pseudo.Pseudo, Array, Array], tuple[Array, Array, Array, Array]]:
    """(params, base points, key) → the mass quadratic's a, b, c at every draw used (3 × (S,)) and the
    information penalty (see :func:`build_mass_quadratic`)."""
    layout, estimator, n_slices = problem.layout, problem.estimator, problem.n_slices
    n_draws, dim = draws.shape
    fixed_slices = draw_slices(estimator, jax.random.PRNGKey(seed), n_draws, n_slices, dim)
    prior = prior_terms(problem)
    root = metric_root(estimator)

    def terms(params: pseudo.Pseudo, base: Array, batch_key: Array) -> tuple[Array, Array, Array, Array]:
        points, w = pseudo.measure(layout, params, base)
        rows = w.shape[0] * problem.weighted.copies
        at_once = max(1, GRADIENT_BUDGET // (rows * dim * value_size(estimator, dim, n_slices)))
        on, slices = draws, fixed_slices
        if batch_size is not None:
            rows_key, slices_key = jax.random.split(batch_key)
            on = draws[jax.random.choice(rows_key, n_draws, (batch_size,), replace=False)]
            slices = draw_slices(estimator, slices_key, batch_size, n_slices, dim)
        bandwidths = kink_bandwidths(problem.weighted, problem.coordinates, points, on)

        def at_draw(pair: tuple) -> tuple[Array, ...]:
            draw, v = pair
            scores, curvature = point_terms(problem, points, draw, v, bandwidths)
            prior_score, prior_curvature = prior(draw, v)
            data_score, prior_score = root(w @ scores, v), root(prior_score, v)
            return (
                0.5 * data_score @ data_score,
                w @ curvature + prior_score @ data_score,
                prior_curvature + 0.5 * prior_score @ prior_score,
                jnp.sum(scores**2, axis=1),
            )

        a, b, c, information = map_in_chunks(at_draw, (on, slices), at_once)
        return a, b, c, penalty_of(jnp.mean(information, axis=0), dim)

    return terms


def build_mass_quadratic(
    problem: ScoreMatching,
    draws: Array,
    seed: int,
    batch_size: int | None = None,
) -> MassQuadratic:
    """(params, base points, key) → (a, b, c): the score-matching objective of the weighted posterior
    plus the information penalty, at t times the pseudo-data's weights, is a t² + b t + c (the weighted
    log-likelihood is linear in the weights). From every point's own terms (:func:`point_terms`), in
    forward derivatives only, with the penalty's scores among them: at t = 1 the value of
    :func:`bayes_recon.divergence.score_matching_objective` of the weighted log density plus
    :func:`information_penalty`, to rounding.

    With ``batch_size`` the draws (and their slices) are a fresh random minibatch per key, the penalty
    on them too; otherwise all draws with slices fixed once (from ``seed``), so it is deterministic.
    """
    terms = _mass_terms(problem, draws, seed, batch_size)

    def quadratic(params: pseudo.Pseudo, base: Array, batch_key: Array) -> tuple[Array, Array, Array]:
        a, b, c, penalty = terms(params, base, batch_key)
        return jnp.mean(a), jnp.mean(b), jnp.mean(c) + penalty

    return jax.jit(quadratic)


def build_objective_error(problem: ScoreMatching, draws: Array, seed: int) -> PseudoObjective:
    """(params, base points, key) → the Monte Carlo standard error of :func:`build_objective`'s objective
    on all draws (slices from ``seed``): its terms' sd over the draws / √S."""
    terms = _mass_terms(problem, draws, seed, None)

    def error(params: pseudo.Pseudo, base: Array, key: Array) -> Array:
        a, b, c, _ = terms(params, base, key)
        return jnp.std(a + b + c, ddof=1) / jnp.sqrt(a.shape[0])

    return jax.jit(error)


def build_objective(
    problem: ScoreMatching,
    draws: Array,
    seed: int,
    batch_size: int | None = None,
) -> PseudoObjective:
    """J(params; base points, key): the objective at the pseudo-data's own weights, a + b + c of
    :func:`build_mass_quadratic` (the same arguments)."""
    quadratic = build_mass_quadratic(problem, draws, seed, batch_size)
    return jax.jit(lambda params, base, key: sum(quadratic(params, base, key)))


def build_hessian(
    problem: ScoreMatching,
    draws: Array,
    seed: int,
) -> PseudoHessian:
    """The Hessian of :func:`build_objective`'s objective (all draws, slices from ``seed``) in any
    parameters p of the pseudo-data (``pseudo_of(p)`` the pseudo-data they stand for): Newton's, on the
    cloud (:func:`build_point_derivatives`)."""
    derivatives = build_point_derivatives(problem, draws, seed)

    def hessian(pseudo_of: Callable[[Any], pseudo.Pseudo], params: Any, base: Array) -> Array:
        return derivatives(lambda p: pseudo.coordinates(problem.layout, pseudo_of(p), base), params)[0]

    return hessian


def gram_in_chunks(fn: Callable[[Any], Array], xs: Any, at_once: int) -> Array:
    """Σ_s fn(x_s)ᵀ fn(x_s) over the leading axis of the pytree ``xs`` (fn: one element → (K, P)),
    ``at_once`` elements at a time: the (S, K, P) rows are never all held (a sandwich over 10,000 draws
    and 1,400 parameters: 1.1 GB)."""
    n = len(jax.tree_util.tree_leaves(xs)[0])
    at_once = min(at_once, n)
    chunks = -(-n // at_once)
    padded = jax.tree_util.tree_map(
        lambda x: jnp.concatenate([x, jnp.repeat(x[:1], chunks * at_once - n, axis=0)]), xs
    )
    kept = (jnp.arange(chunks * at_once) < n).reshape(chunks, at_once)

    def add(i: Array, total: Array) -> Array:
        part = jax.tree_util.tree_map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * at_once, at_once), padded)
        rows = jax.vmap(fn)(part) * kept[i][:, None, None]
        return total + jnp.einsum("skp,skq->pq", rows, rows)

    row = jax.eval_shape(fn, jax.tree_util.tree_map(lambda x: x[0], xs))
    return jax.lax.fori_loop(0, chunks, add, jnp.zeros((row.shape[-1],) * 2, row.dtype))


# params → the points' unconstrained coordinates (n, D), discrete values (n, B) and weights (n,), as
# pseudo.coordinates gives them
PointsOf = Callable[[Any], tuple[Array, Array, Array]]


class PointDerivatives(Protocol):
    """The objective's Hessian (P, P) in ``params`` and, with ``per_draw``, every draw's term's gradient
    (S, P)."""

    def __call__(
        self, points_of: PointsOf, params: Any, per_draw: bool = False
    ) -> tuple[Array, Array | None]: ...


def build_point_derivatives(
    problem: ScoreMatching,
    draws: Array,
    seed: int,
) -> PointDerivatives:
    """(points_of, params, per_draw=False) → the Hessian of :func:`build_objective`'s objective (all draws,
    slices from ``seed``) in any parameters p of the pseudo-data, and with ``per_draw`` the gradient of
    each draw's term in them (S, P), the information penalty left out (the sandwich's, in
    :mod:`bayes_recon.standard_errors`). ``points_of(p)``: the points' coordinates and weights
    (:data:`PointsOf`).

    Differentiating the objective along each of P parameters (Newton on nes2000's clouds: 112; a measure
    of 200 points of nine coordinates: 2,000) costs P passes through every point and draw. But at a draw
    the objective is Σ_j w_j t_j + ½ |√M G|² plus terms free of the pseudo-data (:func:`point_terms`), and
    the information penalty is a sum over points of each one's own information. With u = (z_j, w_j) the
    points' coordinates and weights, H = mean_s Bᵀ M B (B = ∂G/∂p, from each point's ∂g_j/∂z_j) +
    Jᵀ ∇²_u F J + the curvature of u(p) weighted by ∇_u F, where F, the objective with every G held fixed,
    is a sum of terms of one point each: its Hessian in u has a D × D block per point, and cross terms
    with the point's own weight. A draw's gradient is that draw's term of ∇_u F, so through J. D + 1
    passes through the points instead of P (nes2000 at M = 50: a round took 130 s, now 49 s); the same
    matrices up to rounding, except that the bandwidths of likelihood kinks (:func:`kink_bandwidths`) are
    held at the points' values: a Newton step needs only a model of the curvature, and the sandwich
    leaves the bandwidths' share out.
    """
    layout, estimator, n_slices = problem.layout, problem.estimator, problem.n_slices
    n_draws, dim = draws.shape
    slices = draw_slices(estimator, jax.random.PRNGKey(seed), n_draws, n_slices, dim)
    prior = prior_terms(problem)
    root = metric_root(estimator)

    def derivatives(points_of: PointsOf, params: Any, per_draw: bool = False) -> tuple[Array, Array | None]:
        flat, unravel = ravel_pytree(params)

        def coordinates_of(x: Array) -> tuple[Array, Array]:
            z, _, w = points_of(unravel(x))
            return z, w

        z, bits, w = points_of(params)
        n, d_points = z.shape
        rows = n * problem.weighted.copies
        at_once = max(
            1, GRADIENT_BUDGET // (rows * dim * value_size(estimator, dim, n_slices) * (d_points + 1))
        )
        # held at the points' values (see above)
        bandwidths = kink_bandwidths(problem.weighted, problem.coordinates, layout.assemble(z, bits), draws)

        def terms(z: Array, draw: Array, v: Array | None) -> tuple[Array, Array]:
            return point_terms(problem, layout.assemble(z, bits), draw, v, bandwidths)

        def total_score(pair: tuple) -> Array:
            draw, v = pair
            return prior(draw, v)[0] + w @ terms(z, draw, v)[0]

        score = map_in_chunks(total_score, (draws, slices), at_once)  # G at every draw (S, d)

        def linear(z: Array, draw: Array, v: Array | None, g_held: Array) -> tuple[Array, Array]:
            """Every point's ∂/∂w_j of the draw's term, G held (n,), and its information (n,)."""
            scores, curvature = terms(z, draw, v)
            return curvature + root(scores.T, v).T @ root(g_held, v), jnp.sum(scores**2, axis=1)

        def held(z: Array, w: Array) -> Array:
            """The objective with every draw's G held at its value: a sum of terms of one point each."""
            each, information = map_in_chunks(lambda t: linear(z, *t), (draws, slices, score), at_once)
            return w @ jnp.mean(each, axis=0) + penalty_of(jnp.mean(information, axis=0), dim)

        def directions(tz: Array, tw: Array) -> tuple:
            return jax.jvp(jax.grad(held, argnums=(0, 1)), (z, w), (tz, tw))

        # one direction per point coordinate (every point at once: no point's terms involve another's),
        # one along every weight
        tz = jnp.zeros((d_points + 1, n, d_points)).at[jnp.arange(d_points), :, jnp.arange(d_points)].set(1.0)
        tw = jnp.zeros((d_points + 1, n)).at[d_points].set(1.0)
        (grad_z, grad_w), (curve_z, _) = jax.vmap(directions)(tz, tw)
        grad_z, grad_w = grad_z[0], grad_w[0]  # ∇_z F (n, D) and ∂F/∂w_j (n,)
        jz, jw = jax.jacfwd(coordinates_of)(flat)  # (n, D, P), (n, P)

        def along_points(fn: Callable[[Array], Array]) -> Array:
            """fn's derivative along each point coordinate, every point at once (D, *fn's shape)."""
            return jax.vmap(lambda u: jax.jvp(fn, (z,), (u,))[1])(tz[:-1])

        def gauss_newton(pair: tuple) -> Array:  # √M B at one draw (d or K, P)
            draw, v = pair
            b = terms(z, draw, v)[0].T @ jw
            if d_points:
                moved = along_points(lambda y: terms(y, draw, v)[0])  # (D, n, d)
                b = b + jnp.einsum("n,and,nap->dp", w, moved, jz)
            return root(b, v)

        gram = gram_in_chunks(gauss_newton, (draws, slices), at_once)  # Σ_s Bᵀ M B
        cross = jnp.einsum("np,na,naq->pq", jw, curve_z[-1], jz)  # ∂²F/∂w_j∂z_j, point j's own

        def along_u(x: Array) -> Array:  # ∇_u F · u(p), its gradient held: u's own curvature
            zx, wx = coordinates_of(x)
            return jnp.sum(grad_z * zx) + grad_w @ wx

        hessian = (
            gram / n_draws
            + jnp.einsum("nap,anb,nbq->pq", jz, curve_z[:-1], jz)
            + cross
            + cross.T
            + jax.hessian(along_u)(flat)
        )
        if not per_draw:
            return hessian, None

        def draw_gradient(triple: tuple) -> Array:  # the draw's term: Σ_j w_j linear_j, G held
            each = linear(z, *triple)[0]
            gradient = each @ jw
            if d_points:
                moved = along_points(lambda y: linear(y, *triple)[0])  # (D, n): each point's own
                gradient = gradient + jnp.einsum("n,an,nap->p", w, moved, jz)
            return gradient

        return hessian, map_in_chunks(draw_gradient, (draws, slices, score), at_once)

    return derivatives


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
    weighted: WeightedModel,
    coordinates: Coordinates,
    draws: Array,
    points: Mapping[str, Array],
    bandwidths: Bandwidths | None = None,
) -> Array:
    """Each point's Fisher information per unit weight, E_s ||∇_z log p(x_j | θ_s)||² over ``draws`` (M,),
    with kinks smoothed by ``bandwidths`` as in the objective (:func:`kink_bandwidths`)."""

    def information(z: Array) -> Array:
        scores = weighted.point_scores(coordinates.to_model(z), points, bandwidths) @ coordinates.scale
        return jnp.sum(scores**2, axis=-1)

    n_points = len(next(iter(points.values())))
    at_once = max(1, GRADIENT_BUDGET // (n_points * weighted.copies * draws.shape[1] ** 2))
    information = map_in_chunks(information, draws, at_once)
    return jnp.mean(information, axis=0)


def information_penalty(
    weighted: WeightedModel,
    coordinates: Coordinates,
    draws: Array,
    points: Mapping[str, Array],
    bandwidths: Bandwidths | None = None,
) -> Array:
    """d × the mean over points of (information / bound − 1)² where it exceeds INFORMATION_BOUND × d."""
    information = point_information(weighted, coordinates, draws, points, bandwidths)
    return penalty_of(information, draws.shape[1])


def within_information_bound(information: Any, dim: int) -> Any:
    """Whether a measure's information Σ_j w_j E_s |∇ log p(x_j | θ_s)|² (one value or an array of them)
    is within what a release can carry: INFORMATION_BOUND × d, about ten times the true data's. The
    Frank–Wolfe rounds keep no measure beyond it, nor the attack a restart where another is within it."""
    return information <= INFORMATION_BOUND * dim


def penalty_of(information: Array, dim: int) -> Array:
    """The information penalty of points with this information (:func:`point_information`) each."""
    bounded = jnp.where(jnp.isfinite(information), information, 1e30) / (INFORMATION_BOUND * dim)
    return dim * jnp.mean(jnp.maximum(bounded - 1.0, 0.0) ** 2)
