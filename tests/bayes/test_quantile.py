"""Quantiles for the attack's start, at the level Φ(score) of a normal score: bisected ones invert the
CDF, stand-ins have the moments they are built from, closed forms in the score agree with NumPyro's
``icdf``, and all differentiate as finite differences say."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax.scipy.special import ndtri

from bayes_recon.quantile import LEVEL_BOUND, preimage, quantile

LEVELS = jnp.array([1e-6, 0.3, 0.5, 0.9, 0.999])
SCORES = ndtri(LEVELS)
MIDPOINTS = (jnp.arange(200_000) + 0.5) / 200_000  # ∫ q(u) du by the rectangle rule


def mixture(eta: jax.Array) -> dist.Distribution:
    loc = jnp.stack([eta, eta + 4.0], axis=-1)
    return dist.MixtureSameFamily(
        dist.Categorical(probs=jnp.array([0.4, 0.6])), dist.Normal(loc, jnp.array([1.0, 0.5]))
    )


def central_difference(f, x: jax.Array, h: float = 1e-5) -> np.ndarray:
    return np.array([(f(x.at[i].add(h)) - f(x.at[i].add(-h))) / (2 * h) for i in range(x.size)])


def test_a_mixtures_bisected_quantile_inverts_its_cdf_and_differentiates():
    eta = jnp.array([0.0, 1.0, -2.0, 3.0, 0.5])
    y = quantile(mixture(eta), SCORES)
    np.testing.assert_allclose(mixture(eta).cdf(y), LEVELS, rtol=1e-10, atol=1e-14)

    def total(e: jax.Array) -> jax.Array:
        return jnp.sum(quantile(mixture(e), SCORES) ** 2)

    np.testing.assert_allclose(jax.grad(total)(eta), central_difference(total, eta), rtol=1e-6)
    density = jnp.exp(mixture(eta).log_prob(y))  # dy/dscore = φ(score) / f(y)
    along_score = jax.grad(lambda s: quantile(mixture(eta), s).sum())(SCORES)
    np.testing.assert_allclose(along_score, jnp.exp(dist.Normal().log_prob(SCORES)) / density, rtol=1e-9)


def test_closed_forms_in_the_score_are_numpyros_quantiles_clipped_to_the_level_bound():
    """A normal's and a lognormal's quantile in the score is NumPyro's icdf at Φ(score), the level kept
    within LEVEL_BOUND of 0 and 1 (a score of 40 is the quantile at 1 − 10⁻¹²), and a normal's is
    linear in the score (no Φ⁻¹(Φ(·)) round trip to differentiate)."""
    scores = jnp.array([-40.0, -2.0, 0.0, 0.7, 40.0])
    levels = jnp.clip(jax.scipy.special.ndtr(scores), LEVEL_BOUND, 1 - LEVEL_BOUND)
    for fn in (dist.Normal(1.0, 2.0), dist.LogNormal(0.5, 0.3)):
        # 1 − 10⁻¹² is itself rounded in float64: Φ⁻¹ of it is 7.034487, not 7.034484
        np.testing.assert_allclose(quantile(fn, scores), fn.icdf(levels), rtol=1e-6)
        np.testing.assert_allclose(quantile(fn, scores[1:4]), fn.icdf(levels[1:4]), rtol=1e-12)
    second = jax.hessian(lambda s: quantile(dist.Normal(1.0, 2.0), s).sum())(scores[1:4])
    assert np.all(second == 0)


def test_a_gammas_stand_in_is_the_lognormal_of_its_mean_and_variance_and_differentiates_twice():
    """Gamma(shape, shape / mean), shape and mean traced (under jit, as in the attack): the lognormal
    stand-in has the gamma's mean and variance (and the lognormal's median, not the gamma's), and
    derivatives in both to second order."""

    @jax.jit
    def drawn(shape: jax.Array, log_mean: jax.Array, score: jax.Array) -> jax.Array:
        return quantile(dist.Gamma(shape, shape / jnp.exp(log_mean)), score)

    y = drawn(jnp.asarray(2.0), jnp.asarray(1.0), ndtri(MIDPOINTS))
    assert np.all(np.diff(y) > 0) and y[0] > 0
    gamma = dist.Gamma(2.0, 2.0 / np.e)
    np.testing.assert_allclose(y.mean(), gamma.mean, rtol=1e-3)
    np.testing.assert_allclose(y.var(), gamma.variance, rtol=2e-3)
    median = drawn(jnp.asarray(2.0), jnp.asarray(1.0), jnp.asarray(0.0))
    np.testing.assert_allclose(median, np.e / np.sqrt(1.5), rtol=1e-12)  # the gamma's is 2.281

    def total(v: jax.Array) -> jax.Array:  # v = (shape, log mean)
        return jnp.sum(drawn(v[0], v[1], SCORES))

    v = jnp.array([2.0, 0.0])
    np.testing.assert_allclose(jax.grad(total)(v), central_difference(total, v), rtol=1e-5)
    hessian = jax.hessian(total)(v)
    for i in range(2):
        along = central_difference(lambda x, i=i: jax.grad(total)(x)[i], v)
        np.testing.assert_allclose(hessian[i], along, rtol=1e-4)
    assert np.all(hessian != 0)  # no derivative silently zero


def test_a_student_ts_stand_in_is_the_normal_of_its_location_and_scale():
    """Whatever its degrees of freedom (traced; 1.5 has no variance), a Student-t's stand-in is
    loc + scale · score, differentiable in the location and scale."""

    @jax.jit
    def drawn(df: jax.Array, loc: jax.Array, scale: jax.Array) -> jax.Array:
        return quantile(dist.StudentT(df, loc, scale), SCORES)

    for df in (1.5, 3.3):
        y = drawn(jnp.asarray(df), jnp.ones(5), jnp.asarray(0.9))
        np.testing.assert_allclose(y, dist.Normal(1.0, 0.9).icdf(LEVELS), rtol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(lambda v: drawn(3.3, v, 0.9))(jnp.ones(5)), np.eye(5), atol=1e-12)
    along_scale = jax.grad(lambda s: drawn(3.3, jnp.ones(5), s).sum())(jnp.asarray(0.9))
    np.testing.assert_allclose(along_scale, dist.Normal(0.0, 1.0).icdf(LEVELS).sum(), rtol=1e-12)


def test_a_counts_quantile_is_a_smooth_stand_in_with_its_mean_and_variance():
    """Counts get a quantile (they had none, so their responses were not predicted from the model)."""
    for count in (dist.Poisson(3.0), dist.NegativeBinomial2(4.0, 2.0)):
        y = quantile(count, ndtri(MIDPOINTS))
        assert np.all(np.diff(y) > 0) and y[0] > 0
        np.testing.assert_allclose(y.mean(), count.mean, rtol=1e-3)
        np.testing.assert_allclose(y.var(), count.variance, rtol=2e-2)

    def total(log_mean: jax.Array) -> jax.Array:  # the stages differentiate it twice in the covariates
        return jnp.sum(quantile(dist.NegativeBinomial2(jnp.exp(log_mean), 2.0), SCORES))

    log_mean = jnp.array([1.0])
    second = jax.grad(lambda x: jax.grad(total)(x)[0])
    np.testing.assert_allclose(
        second(log_mean), central_difference(lambda x: jax.grad(total)(x)[0], log_mean), rtol=1e-5
    )
    with pytest.raises(NotImplementedError):  # few values are stratified, never relaxed
        quantile(dist.Bernoulli(probs=0.3), SCORES)


def test_a_count_at_its_lower_bound_has_a_finite_quantile_and_derivative():
    def total(rate: jax.Array) -> jax.Array:
        return jnp.sum(quantile(dist.Poisson(rate), SCORES))

    zero = jnp.asarray(0.0)
    assert np.all(np.isfinite(quantile(dist.Poisson(zero), SCORES)))
    assert np.isfinite(jax.grad(total)(zero))


def test_a_zero_inflated_counts_quantile_puts_the_gates_share_exactly_at_zero():
    """Zeros from the gate, the rest the base count's stand-in: the lognormal of the whole mixture has no
    atom at 0, and a zero-inflated negative binomial started from it ended at mass 0.8 of 200."""
    levels = (jnp.arange(100_000) + 0.5) / 100_000
    base = dist.NegativeBinomialProbs(3.0, 0.4)
    y = quantile(dist.ZeroInflatedDistribution(base, gate=0.25), ndtri(levels))
    assert np.mean(y == 0.0) == pytest.approx(0.25, abs=1e-4)
    rest = quantile(base, ndtri((levels[levels >= 0.25] - 0.25) / 0.75))
    np.testing.assert_allclose(y[levels >= 0.25], rest, rtol=1e-12)

    def total(gate: jax.Array) -> jax.Array:  # the stages differentiate it twice in the covariates
        return jnp.sum(quantile(dist.ZeroInflatedPoisson(gate, 2.0), SCORES))

    gate = jnp.asarray(0.2)
    second = jax.grad(jax.grad(total))(gate)
    assert np.isfinite(second)
    np.testing.assert_allclose(jax.grad(total)(gate), central_difference(total, gate[None])[0], rtol=1e-5)


@pytest.mark.parametrize(
    "h",
    [lambda z: z / np.log(10.0), lambda z: 3.0 - 2.0 * z, lambda z: jnp.exp(z) + z**3],
    ids=["log10 of exp", "falling", "convex"],
)
def test_the_preimage_of_a_monotone_map_inverts_it_and_differentiates_implicitly(h):
    """An observed log10(earn) is z / ln 10 in earn's unconstrained z; the solve finds z from far away
    (a target 10⁴ takes doublings of the bracket) and its derivative is 1 / h'(z)."""
    target = jnp.array([-30.0, 0.5, 1e4])
    z = preimage(h, target)
    np.testing.assert_allclose(h(z), target, rtol=1e-10, atol=1e-10)
    slope = jax.vmap(jax.grad(h))(z)
    np.testing.assert_allclose(jax.jacfwd(lambda t: preimage(h, t))(target), np.diag(1.0 / slope), rtol=1e-8)


def test_a_response_a_plate_expands_has_its_base_distributions_quantile_in_every_row():
    """y ~ Normal(μ, σ) in a plate of rows is an ExpandedDistribution, with no icdf or cdf of its own."""
    scores = ndtri(jnp.array([0.1, 0.5, 0.975]))
    for expanded, base in (
        (dist.Normal(1.0, 2.0).expand([3]), dist.Normal(1.0, 2.0)),
        (dist.Chi2(4.0).expand([3]).to_event(1), dist.Chi2(4.0)),  # bisected
        (dist.Normal(1.0, 2.0).expand([3]).mask(jnp.array([True, False, True])), dist.Normal(1.0, 2.0)),
    ):
        np.testing.assert_allclose(quantile(expanded, scores), quantile(base, scores), rtol=1e-10)
    np.testing.assert_allclose(
        quantile(dist.Normal(1.0, 2.0).expand([3]), scores)[2], 1.0 + 2.0 * 1.959964, rtol=1e-6
    )
