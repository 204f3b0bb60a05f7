"""Quantile functions for the attack's start: bisected where NumPyro has none (mixtures), closed-form
stand-ins where the quantile cannot be differentiated cheaply (counts, Beta, Gamma, Student-t).

The start of the attack draws responses through their quantile function (:mod:`bayes_recon.stages`)
at the level of a standard-normal noise, and its objective is differentiated through them: every
quantile here takes that noise (the normal score of the level), so a normal's is its location plus
its scale times the noise. Where ``icdf`` is missing, the quantile is found by
bisection on the CDF and differentiated implicitly (``jax.lax.custom_root``): from F(y(p, u); p) = u,
dy = (du − ∂F/∂p·dp) / f(y), which is exact at the solution whatever the bisection's path. The
distribution stays a closure (never flattened: NumPyro orders a distribution's fields differently in
every process, and the traced program is a key of :mod:`bayes_recon.programs`).

Counts (Poisson, negative binomial: support ``integer_greater_than``) have a step function for a
quantile, with no derivative. Their pseudo-values move over the positive reals anyway (the relaxed
support of :mod:`bayes_recon.supports`), so they get the quantile of a continuous stand-in: the
lognormal with the count's mean and variance above its lower bound. It is only a start — the stages
free the responses afterwards — but one where the responses follow the covariates: kept in the
pseudo-data cloud instead, a count is independent of the covariates at the start, and on a
negative binomial regression (covariate at 10³) the cloud's best was then a collapsed covariate (a
single x value: one direction of (a, b) left to the prior) that no later stage leaves. A response on
the unit interval whose quantile has no second derivative in its parameters (Beta: JAX does not
differentiate the incomplete beta function in its shapes) gets such a stand-in too
(:func:`moment_quantile`), and so do two unimodal families whose quantile is an inverse incomplete
gamma or beta function: a gamma the lognormal of its mean and variance, a Student-t the normal of its
location and scale (:data:`IN_SCORES`). From stop 38 to 55 they were bisections, differentiated up to
four times in the attack's program: a quarter of a gamma regression's compilation, and a start needs
the response's location and spread, not its tails (README, stop 56). A mixture keeps its bisected
quantile: its modes are what a stand-in of its moments would lose.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri
from numpyro.distributions import (
    Distribution,
    ExpandedDistribution,
    Gamma,
    Independent,
    LogNormal,
    MaskedDistribution,
    Normal,
    StudentT,
    constraints,
)
from numpyro.distributions.discrete import ZeroInflatedProbs

Array = jax.Array
WIDENING_STEPS = 40  # doublings of the first bracket (±10 sd), for heavy tails
BISECTION_STEPS = 160  # halves even a fully widened bracket below float64's resolution
LEVEL_BOUND = 1e-12  # levels are kept within [LEVEL_BOUND, 1 − LEVEL_BOUND], where every quantile is finite
SCORE_BOUND = 7.034483825  # −Φ⁻¹(LEVEL_BOUND): the same bound on normal scores


def quantile(fn: Distribution, score: Array) -> Array:
    """The quantile of ``fn`` at the level Φ(score), the score clipped to ±SCORE_BOUND: in closed form in
    the score for a normal, a lognormal and the stand-ins of a gamma and a Student-t (:data:`IN_SCORES`)
    and of a count (:func:`relaxed_count_quantile`); else ``fn.icdf``, or the bisected quantile of a
    continuous ``fn`` without one; other discrete supports raise NotImplementedError. An expanded,
    independent or masked distribution's is its base's, broadcast: NumPyro gives them neither ``icdf``
    nor ``cdf``, and a plate expands a response whose parameters have no row dimension (y ~ Normal(μ, σ)).

    The stages draw responses from standard-normal noise and differentiate them up to three times: the
    round trip Φ⁻¹(Φ(score)) that a normal's ``icdf`` would take was a quarter of a normal regression's
    program (kidiq: compile 35.0 → 24.8 s without it) for the identity."""
    while isinstance(fn, ExpandedDistribution | Independent | MaskedDistribution):
        fn = fn.base_dist
    score = jnp.clip(score, -SCORE_BOUND, SCORE_BOUND)
    if type(fn) in IN_SCORES:
        shape = jnp.broadcast_shapes(jnp.shape(score), fn.batch_shape)
        return IN_SCORES[type(fn)](fn, jnp.broadcast_to(score, shape))
    u = jnp.clip(ndtr(score), LEVEL_BOUND, 1 - LEVEL_BOUND)
    try:
        return fn.icdf(u)
    except (NotImplementedError, ImportError):
        if fn.support.is_discrete:
            return relaxed_count_quantile(fn, score)
    return jax.lax.custom_root(
        lambda y: fn.cdf(y) - u,
        jnp.zeros_like(u),
        lambda f, _: _bisected(fn, u),
        lambda g, y: y / g(jnp.ones_like(y)),  # F's Jacobian in y is diagonal: the density
    )


def _lognormal_quantile(mean: Array, variance: Array, low: Array | float, score: Array) -> Array:
    """Quantile at Φ(score) of the lognormal with this mean and variance above ``low``, finite at the bound
    and at zero spread."""
    tiny = jnp.finfo(score.dtype).tiny ** 0.25
    mean = jnp.maximum(jnp.broadcast_to(mean, score.shape) - low, tiny)
    variance = jnp.maximum(jnp.broadcast_to(variance, score.shape), tiny)
    log_variance = jnp.log1p(variance / mean**2)  # σ² of the log
    return low + jnp.exp(jnp.log(mean) - log_variance / 2 + jnp.sqrt(log_variance) * score)


# Quantiles at Φ(score) in closed form in the score: a normal's and a lognormal's own, and stand-ins for
# families whose quantile inverts an incomplete gamma or beta function (a t with 2 or fewer degrees of
# freedom has no variance, so its stand-in is the normal of its location and scale, not of its moments)
IN_SCORES: dict[type, Callable[[Distribution, Array], Array]] = {
    Normal: lambda fn, score: fn.loc + fn.scale * score,
    LogNormal: lambda fn, score: jnp.exp(fn.base_dist.loc + fn.base_dist.scale * score),
    Gamma: lambda fn, score: _lognormal_quantile(fn.mean, fn.variance, 0.0, score),
    StudentT: lambda fn, score: fn.loc + fn.scale * score,
}


def relaxed_count_quantile(fn: Distribution, score: Array) -> Array:
    """Quantile at Φ(score) of the lognormal with a count's mean and variance, shifted to its lower bound:
    smooth in the count's parameters, so the stages can differentiate the predicted responses twice.

    A zero-inflated count puts its gate's share exactly at 0 and the rest through its base count's
    stand-in: the lognormal of the mixture's mean and variance has no atom, and the gate's atom is the
    likelihood's only at 0 (between 0 and 1 it is interpolated: :func:`bayes_recon.weighting.between_counts`).
    """
    if isinstance(fn, ZeroInflatedProbs):
        u = ndtr(score)
        gate = jnp.broadcast_to(fn.gate, u.shape)
        beyond = jnp.clip((u - gate) / (1.0 - gate), LEVEL_BOUND, 1 - LEVEL_BOUND)  # the level in the base
        rest = relaxed_count_quantile(fn.base_dist, ndtri(beyond))
        return jnp.where(u < gate, 0.0, rest)
    if not isinstance(fn.support, constraints._IntegerGreaterThan):
        raise NotImplementedError(f"no quantile for the discrete support {fn.support}")
    return _lognormal_quantile(fn.mean, fn.variance, fn.support.lower_bound, score)


# The stand-in's logit stays within ±LOGIT_BOUND, where sigmoid and logit still invert each other in
# float64 (sigmoid(37) is 1.0): a covariate that saturates the mean (the grid tries e^±14 of a scale)
# gives a response at the bound's edge with zero derivatives, not NaN, which would spread to every
# point's gradient through the cloud.
LOGIT_BOUND = 30.0


def moment_quantile(fn: Distribution, score: Array) -> Array:
    """Quantile at Φ(score) of a logit-normal stand-in for a response on the unit interval:
    sigmoid(m + s·score), m = logit(mean) and s = sd / (mean (1 − mean)), smooth in fn's parameters
    wherever its mean and variance are, the logit kept within ±LOGIT_BOUND. Other supports raise
    NotImplementedError: there the responses stay in the cloud (a heavy tail may have no variance)."""
    if fn.support is not constraints.unit_interval:
        raise NotImplementedError(f"no stand-in quantile for the support {fn.support}")
    edge = jax.nn.sigmoid(-LOGIT_BOUND)
    score = jnp.clip(score, -SCORE_BOUND, SCORE_BOUND)
    mean = jnp.clip(jnp.broadcast_to(fn.mean, score.shape), edge, 1.0 - edge)
    sd = jnp.sqrt(jnp.maximum(jnp.broadcast_to(fn.variance, score.shape), edge**2))
    logit = jax.scipy.special.logit(mean) + sd / (mean * (1.0 - mean)) * score
    return jax.nn.sigmoid(jnp.clip(logit, -LOGIT_BOUND, LOGIT_BOUND))


def _bracket(fn: Distribution, u: Array) -> tuple[Array, Array]:
    """About the bulk from the mean and sd, then doubled outwards until it holds the level u."""
    centre, spread = jnp.broadcast_to(fn.mean, u.shape), jnp.sqrt(jnp.broadcast_to(fn.variance, u.shape))
    centre = jnp.where(jnp.isfinite(centre), centre, 0.0)
    spread = jnp.where(jnp.isfinite(spread) & (spread > 0), spread, 1 + jnp.abs(centre))
    lowest = getattr(fn.support, "lower_bound", -jnp.inf)
    highest = getattr(fn.support, "upper_bound", jnp.inf)

    def widen(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        low, high = bracket
        width = high - low
        low = jnp.where(fn.cdf(low) > u, jnp.maximum(low - width, lowest), low)
        return low, jnp.where(fn.cdf(high) < u, jnp.minimum(high + width, highest), high)

    start = (jnp.maximum(centre - 10 * spread, lowest), jnp.minimum(centre + 10 * spread, highest))
    return jax.lax.fori_loop(0, WIDENING_STEPS, widen, start)


def _bisected(fn: Distribution, u: Array) -> Array:
    return _bisect(lambda y: fn.cdf(y) < u, *_bracket(fn, u))


def _bisect(below: Callable[[Array], Array], low: Array, high: Array) -> Array:
    """The point where ``below`` turns from true to false, between ``low`` (true) and ``high`` (false)."""

    def halve(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        low, high = bracket
        middle = (low + high) / 2
        lower = below(middle)
        return jnp.where(lower, middle, low), jnp.where(lower, high, middle)

    low, high = jax.lax.fori_loop(0, BISECTION_STEPS, halve, (low, high))
    return (low + high) / 2


def preimage(h: Callable[[Array], Array], target: Array) -> Array:
    """z with h(z) = target, elementwise, for an elementwise monotone h over the reals (a model that
    observes log(earn), as a function of earn's unconstrained value): bracketed by doublings from
    [−1, 1], bisected, and differentiated implicitly (dz = dtarget / h'(z))."""
    ones = jnp.ones_like(target)
    rising = h(ones) >= h(-ones)

    def below(z: Array) -> Array:
        value = h(z)
        return jnp.where(rising, value < target, value > target)

    def widen(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        low, high = bracket
        width = high - low
        return jnp.where(below(low), low, low - width), jnp.where(below(high), high + width, high)

    def solve(_: Callable, __: Array) -> Array:
        return _bisect(below, *jax.lax.fori_loop(0, 2 * WIDENING_STEPS, widen, (-ones, ones)))

    return jax.lax.custom_root(
        lambda z: h(z) - target, jnp.zeros_like(target), solve, lambda g, y: y / g(ones)
    )
