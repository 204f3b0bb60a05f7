"""Bisected quantiles: the CDF's inverse, with derivatives that match finite differences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest

from bayes_recon.quantile import quantile

LEVELS = jnp.array([1e-6, 0.3, 0.5, 0.9, 0.999])


def mixture(eta: jax.Array) -> dist.Distribution:
    loc = jnp.stack([eta, eta + 4.0], axis=-1)
    return dist.MixtureSameFamily(
        dist.Categorical(probs=jnp.array([0.4, 0.6])), dist.Normal(loc, jnp.array([1.0, 0.5]))
    )


def central_difference(f, x: jax.Array, h: float = 1e-5) -> np.ndarray:
    return np.array([(f(x.at[i].add(h)) - f(x.at[i].add(-h))) / (2 * h) for i in range(x.size)])


def test_a_mixtures_bisected_quantile_inverts_its_cdf_and_differentiates():
    eta = jnp.array([0.0, 1.0, -2.0, 3.0, 0.5])
    y = quantile(mixture(eta), LEVELS)
    np.testing.assert_allclose(mixture(eta).cdf(y), LEVELS, rtol=1e-10, atol=1e-14)

    def total(e: jax.Array) -> jax.Array:
        return jnp.sum(quantile(mixture(e), LEVELS) ** 2)

    np.testing.assert_allclose(jax.grad(total)(eta), central_difference(total, eta), rtol=1e-6)
    density = jnp.exp(mixture(eta).log_prob(y))  # dy/du = 1 / f(y)
    np.testing.assert_allclose(jax.grad(lambda u: quantile(mixture(eta), u).sum())(LEVELS), 1 / density)


def test_a_gamma_shapes_quantile_differentiates_and_counts_have_none():
    def total(shape: jax.Array) -> jax.Array:
        return jnp.sum(quantile(dist.Gamma(shape, 1.0), LEVELS))

    shape = jnp.array([2.0])
    np.testing.assert_allclose(jax.grad(total)(shape), central_difference(total, shape), rtol=1e-5)
    with pytest.raises(NotImplementedError):
        quantile(dist.Poisson(3.0), LEVELS)
