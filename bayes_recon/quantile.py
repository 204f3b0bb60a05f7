"""Quantile functions of continuous distributions that NumPyro gives none (mixtures, Gamma, Beta, …).

The start of the attack draws responses through their quantile function (:mod:`bayes_recon.stages`),
and its objective is differentiated through them. Where ``icdf`` is missing, the quantile is found by
bisection on the CDF and differentiated implicitly: from F(y(p, u); p) = u,
dy = (du − ∂F/∂p·dp) / f(y), which is exact at the solution whatever the bisection's path.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from numpyro.distributions import Distribution

Array = jax.Array
BISECTION_STEPS = 100  # halves a bracket of 100 sd below float64's resolution
BRACKET_SD = 50.0


def quantile(fn: Distribution, u: Array) -> Array:
    """``fn.icdf(u)``, or the bisected quantile of a continuous ``fn`` without one (else it raises)."""
    try:
        return fn.icdf(u)
    except (NotImplementedError, ImportError):
        if fn.support.is_discrete:
            raise
    leaves, tree = jax.tree_util.tree_flatten(fn)
    return _bisected(tree, leaves, u)


def _bracket(fn: Distribution, u: Array) -> tuple[Array, Array]:
    centre, spread = jnp.broadcast_to(fn.mean, u.shape), jnp.sqrt(jnp.broadcast_to(fn.variance, u.shape))
    centre = jnp.where(jnp.isfinite(centre), centre, 0.0)
    spread = jnp.where(jnp.isfinite(spread) & (spread > 0), spread, 1e3 * (1 + jnp.abs(centre)))
    low = jnp.maximum(centre - BRACKET_SD * spread, getattr(fn.support, "lower_bound", -jnp.inf))
    high = jnp.minimum(centre + BRACKET_SD * spread, getattr(fn.support, "upper_bound", jnp.inf))
    return low, high


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _bisected(tree: jax.tree_util.PyTreeDef, leaves: list[Array], u: Array) -> Array:
    fn = jax.tree_util.tree_unflatten(tree, leaves)

    def halve(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        low, high = bracket
        middle = (low + high) / 2
        below = fn.cdf(middle) < u
        return jnp.where(below, middle, low), jnp.where(below, high, middle)

    low, high = jax.lax.fori_loop(0, BISECTION_STEPS, halve, _bracket(fn, u))
    return (low + high) / 2


@_bisected.defjvp
def _bisected_jvp(tree: jax.tree_util.PyTreeDef, primals: tuple, tangents: tuple) -> tuple[Array, Array]:
    leaves, u = primals
    d_leaves, d_u = tangents
    y = _bisected(tree, leaves, u)
    _, d_cdf = jax.jvp(lambda ls: jax.tree_util.tree_unflatten(tree, ls).cdf(y), (leaves,), (d_leaves,))
    density = jnp.exp(jax.tree_util.tree_unflatten(tree, leaves).log_prob(y))
    return y, (d_u - d_cdf) / jnp.maximum(density, jnp.finfo(density.dtype).tiny)
