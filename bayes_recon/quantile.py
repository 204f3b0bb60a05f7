"""Quantile functions of continuous distributions that NumPyro gives none (mixtures, Gamma, Beta, …).

The start of the attack draws responses through their quantile function (:mod:`bayes_recon.stages`),
and its objective is differentiated through them. Where ``icdf`` is missing, the quantile is found by
bisection on the CDF and differentiated implicitly (``jax.lax.custom_root``): from F(y(p, u); p) = u,
dy = (du − ∂F/∂p·dp) / f(y), which is exact at the solution whatever the bisection's path. The
distribution stays a closure (never flattened: NumPyro orders a distribution's fields differently in
every process, and the traced program is a key of :mod:`bayes_recon.programs`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.distributions import Distribution

Array = jax.Array
WIDENING_STEPS = 40  # doublings of the first bracket (±10 sd), for heavy tails
BISECTION_STEPS = 160  # halves even a fully widened bracket below float64's resolution


def quantile(fn: Distribution, u: Array) -> Array:
    """``fn.icdf(u)``, or the bisected quantile of a continuous ``fn`` without one (else it raises)."""
    try:
        return fn.icdf(u)
    except (NotImplementedError, ImportError):
        if fn.support.is_discrete:
            raise
    return jax.lax.custom_root(
        lambda y: fn.cdf(y) - u,
        jnp.zeros_like(u),
        lambda f, _: _bisected(fn, u),
        lambda g, y: y / g(jnp.ones_like(y)),  # F's Jacobian in y is diagonal: the density
    )


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
    def halve(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        low, high = bracket
        middle = (low + high) / 2
        below = fn.cdf(middle) < u
        return jnp.where(below, middle, low), jnp.where(below, high, middle)

    low, high = jax.lax.fori_loop(0, BISECTION_STEPS, halve, _bracket(fn, u))
    return (low + high) / 2
