"""weight_likelihood and WeightedModel: q_w(θ) ∝ p(θ) Π_j p(x_j | θ)^{w_j}, in unconstrained space."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.stats
from numpyro import handlers
from numpyro.infer.util import potential_energy

from bayes_recon.models import regression as m
from bayes_recon.weighting import WeightedModel, between_counts, unvalidated, weight_likelihood

RNG = np.random.default_rng(20240501)


def _momiq_case(n: int = 30):
    mom_iq = RNG.uniform(70, 130, n)
    kid_score = 25 + 0.6 * mom_iq + 18 * RNG.standard_normal(n)
    example = {"beta": jnp.array([25.0, 0.6]), "sigma": jnp.array(18.0)}
    return WeightedModel(m.kidscore_momiq, ("mom_iq", "kid_score"), {}, example), {
        "mom_iq": jnp.asarray(mom_iq),
        "kid_score": jnp.asarray(kid_score),
    }


def _kilpisjarvi_case(n: int = 25):
    x = RNG.uniform(-2, 2, n)
    y = 0.5 - 1.5 * x + 0.7 * RNG.standard_normal(n)
    fixed = {"pmualpha": 1.0, "psalpha": 3.0, "pmubeta": -0.5, "psbeta": 2.0}
    example = {"alpha": jnp.array(0.0), "beta": jnp.array(0.0), "sigma": jnp.array(1.0)}
    data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
    return WeightedModel(m.kilpisjarvi, ("x", "y"), fixed, example), data


def _blr_case(n: int = 40, d: int = 3):
    x = RNG.standard_normal((n, d))
    y = x @ np.arange(1.0, d + 1) + RNG.standard_normal(n)
    example = {"beta": jnp.zeros(d), "sigma": jnp.array(1.0)}
    return WeightedModel(m.blr, ("X", "y"), {}, example), {"X": jnp.asarray(x), "y": jnp.asarray(y)}


def tempered(x, y=None):  # a power posterior: every row's likelihood raised to 1/2 by handlers.scale
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    with numpyro.plate("rows", x.shape[0]), handlers.scale(scale=0.5):
        numpyro.sample("y", dist.Normal(b * x, s), obs=y)


def _tempered_case(n: int = 30):
    x = RNG.standard_normal(n)
    data = {"x": jnp.asarray(x), "y": jnp.asarray(0.8 * x + RNG.standard_normal(n))}
    return WeightedModel(tempered, ("x", "y"), {}, {"b": jnp.array(0.0), "s": jnp.array(1.0)}), data


CASES = {"momiq": _momiq_case, "kilpisjarvi": _kilpisjarvi_case, "blr": _blr_case, "tempered": _tempered_case}


def _thetas(wm: WeightedModel, data, k: int = 4) -> list[jnp.ndarray]:
    return [jnp.asarray(RNG.normal(0, 0.5, wm.dim) + ravel(wm, data)) for _ in range(k)]


def ravel(wm: WeightedModel, data) -> np.ndarray:
    """The unconstrained flat vector of the example draw (a sensible centre for test points)."""
    return np.asarray(wm.to_unconstrained({k: v[None] for k, v in wm.latent_example.items()}, data)[0])


def test_momiq_log_density_by_hand():
    """Against an explicit formula: Σ_j w_j log N(y_j | b0 + b1 x_j, σ) + log HalfCauchy(σ; 2.5) + log σ."""
    wm, data = _momiq_case()
    x, y = np.asarray(data["mom_iq"]), np.asarray(data["kid_score"])
    n = len(x)

    def by_hand(theta, w):
        b0, b1, log_sigma = theta
        sigma = np.exp(log_sigma)
        loglik = -0.5 * np.log(2 * np.pi) - log_sigma - 0.5 * ((y - b0 - b1 * x) / sigma) ** 2
        log_prior = np.log(2 / (np.pi * 2.5)) - np.log1p((sigma / 2.5) ** 2)
        return w @ loglik + log_prior + log_sigma  # the last term: Jacobian of σ = exp(u)

    for w in (np.ones(n), np.zeros(n), RNG.uniform(0, 3, n)):
        for theta in _thetas(wm, data):
            got = float(wm.log_density(theta, data, jnp.asarray(w)))
            np.testing.assert_allclose(got, by_hand(np.asarray(theta), w), rtol=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_unit_weights_give_the_models_own_posterior(case):
    wm, data = CASES[case]()
    n = len(next(iter(data.values())))
    kwargs = {**wm.fixed, **data}
    for theta in _thetas(wm, data):
        expected = -potential_energy(wm.model, (), kwargs, wm.unravel(theta))
        got = wm.log_density(theta, data, jnp.ones(n))
        np.testing.assert_allclose(float(got), float(expected), rtol=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_zero_weights_give_the_prior(case):
    """The prior with its Jacobian: the model's potential energy with the observed site hidden."""
    wm, data = CASES[case]()
    n = len(next(iter(data.values())))
    kwargs = {**wm.fixed, **data}
    trace = handlers.trace(handlers.substitute(wm.model, dict(wm.latent_example))).get_trace(**kwargs)
    observed = [k for k, s in trace.items() if s["type"] == "sample" and s["is_observed"]]
    assert observed
    prior_model = handlers.block(wm.model, hide=observed)
    for theta in _thetas(wm, data):
        expected = -potential_energy(prior_model, (), kwargs, wm.unravel(theta))
        got = wm.log_density(theta, data, jnp.zeros(n))
        np.testing.assert_allclose(float(got), float(expected), rtol=1e-12)
        # and it does not depend on the data at all
        moved = {k: v + 1.0 for k, v in data.items()}
        np.testing.assert_allclose(float(wm.log_density(theta, moved, jnp.zeros(n))), float(got), rtol=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_log_density_is_affine_in_the_weights(case):
    wm, data = CASES[case]()
    n = len(next(iter(data.values())))
    w1, w2 = jnp.asarray(RNG.uniform(0, 2, n)), jnp.asarray(RNG.uniform(0, 2, n))
    for theta in _thetas(wm, data):
        base = wm.log_density(theta, data, jnp.zeros(n))
        d1 = wm.log_density(theta, data, w1) - base
        d2 = wm.log_density(theta, data, w2) - base
        d12 = wm.log_density(theta, data, w1 + w2) - base
        np.testing.assert_allclose(float(d12), float(d1 + d2), rtol=1e-10)
        assert abs(float(d1)) > 1.0  # the weights do enter


@pytest.mark.parametrize("case", sorted(CASES))
def test_loglik_per_point_is_the_weighted_increment(case):
    wm, data = CASES[case]()
    n = len(next(iter(data.values())))
    w = jnp.asarray(RNG.uniform(0, 2, n))
    for theta in _thetas(wm, data):
        per_point = wm.loglik_per_point(theta, data)
        assert per_point.shape == (n,)
        increment = wm.log_density(theta, data, w) - wm.log_density(theta, data, jnp.zeros(n))
        np.testing.assert_allclose(float(w @ per_point), float(increment), rtol=1e-10)
        # a unit weight on point j alone adds exactly log p(x_j | θ)
        e3 = jnp.zeros(n).at[3].set(1.0)
        single = wm.log_density(theta, data, e3) - wm.log_density(theta, data, jnp.zeros(n))
        np.testing.assert_allclose(float(single), float(per_point[3]), rtol=1e-10)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_prior_and_the_weighted_points_make_the_log_density(case):
    """log q_w(θ) = log prior(θ) + Σ_j w_j log p(x_j | θ), the prior taken at any other data (one point here):
    what the attack's objective is built from (bayes_recon.objective.point_terms)."""
    wm, data = CASES[case]()
    n = len(next(iter(data.values())))
    w = jnp.asarray(RNG.uniform(0, 2, n))
    elsewhere = {k: v[:1] + 1.0 for k, v in data.items()}
    for theta in _thetas(wm, data):
        expected = wm.log_density(theta, data, w)
        found = wm.log_prior(theta, elsewhere) + w @ wm.loglik_per_point(theta, data)
        np.testing.assert_allclose(float(found), float(expected), rtol=1e-10)
        posterior_score = jax.grad(lambda t: wm.log_density(t, data, w))(theta)
        assert not np.allclose(posterior_score, jax.grad(wm.log_prior)(theta, data))  # no likelihood in it


def test_weights_broadcast_over_extra_batch_dimensions():
    """An observed site with batch shape (n, k): point j's k entries all get weight w_j."""
    n, k = 6, 3
    y = jnp.asarray(RNG.standard_normal((n, k)))

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("points", n, dim=-2), numpyro.plate("outputs", k, dim=-1):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    wm = WeightedModel(model, ("y",), {}, {"mu": jnp.array(0.0)})
    w = jnp.asarray(RNG.uniform(0, 2, n))
    theta = jnp.array([0.3])
    per_entry = -0.5 * np.log(2 * np.pi) - 0.5 * (np.asarray(y) - 0.3) ** 2
    expected = float(np.asarray(w) @ per_entry.sum(axis=1)) + (-0.5 * np.log(2 * np.pi) - 0.5 * 0.3**2)
    np.testing.assert_allclose(float(wm.log_density(theta, {"y": y}, w)), expected, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(wm.loglik_per_point(theta, {"y": y})), per_entry.sum(axis=1))


def test_handler_leaves_latent_sites_unscaled():
    _, data = _momiq_case()
    w = jnp.full(len(data["mom_iq"]), 2.0)
    params = {"beta": jnp.array([20.0, 0.5]), "sigma": jnp.array(15.0)}
    weighted = handlers.substitute(weight_likelihood(m.kidscore_momiq, weights=w), params)
    trace = handlers.trace(weighted).get_trace(**data)
    assert trace["beta"]["scale"] is None and trace["sigma"]["scale"] is None
    np.testing.assert_array_equal(np.asarray(trace["kid_score"]["scale"]), np.asarray(w))


def test_to_unconstrained_and_unravel_round_trip():
    wm, data = _kilpisjarvi_case()
    draws = {"alpha": np.array([0.1, -2.0]), "beta": np.array([1.0, 3.0]), "sigma": np.array([0.5, 2.0])}
    theta = wm.to_unconstrained(draws, data)
    assert theta.shape == (2, wm.dim) == (2, 3)
    for i in range(2):
        unc = wm.unravel(jnp.asarray(theta[i]))
        np.testing.assert_allclose(float(unc["alpha"]), draws["alpha"][i])
        np.testing.assert_allclose(float(unc["beta"]), draws["beta"][i])
        np.testing.assert_allclose(float(unc["sigma"]), np.log(draws["sigma"][i]))


def test_log_density_is_differentiable_in_everything():
    """The attack differentiates in θ (the score) and in data and weights (the optimiser)."""
    wm, data = _blr_case()
    n = len(data["y"])
    theta = jnp.asarray(ravel(wm, data))
    g_theta, g_data, g_w = jax.grad(wm.log_density, argnums=(0, 1, 2))(theta, data, jnp.ones(n))
    assert g_theta.shape == (wm.dim,) and g_data["X"].shape == data["X"].shape and g_w.shape == (n,)
    np.testing.assert_allclose(np.asarray(g_w), np.asarray(wm.loglik_per_point(theta, data)), rtol=1e-10)


@pytest.mark.parametrize(
    ("count", "atol"),
    [
        (dist.ZeroInflatedPoisson(0.3, 2.5), 1e-12),
        # NumPyro's negative binomial goes through JAX's betaln, 1e-6 off (see the next test)
        (dist.ZeroInflatedDistribution(dist.NegativeBinomial2(3.0, 2.0), gate_logits=-0.4), 2e-6),
        (dist.NegativeBinomial2(3.0, 2.0), 2e-6),
        (dist.Binomial(40, 0.3), 1e-12),
    ],
)
def test_a_count_relaxes_to_its_own_log_probability_at_the_counts_and_is_interpolated_between(count, atol):
    """At every count the model's own log-probability; between two counts the straight line joining them
    (a pseudo-count is two data rows), with the slope as its derivative, and beyond the support the line
    through its first two counts; categorical labels untouched."""
    relaxed = between_counts(unvalidated(count))
    counts = jnp.arange(0.0, 12.0)
    np.testing.assert_allclose(relaxed.log_prob(counts), count.log_prob(counts), atol=atol)
    low, up = jnp.floor(jnp.linspace(0.05, 10.95, 50)), jnp.linspace(0.05, 10.95, 50) % 1.0
    line = (1 - up) * count.log_prob(low) + up * count.log_prob(low + 1)
    np.testing.assert_allclose(relaxed.log_prob(low + up), line, atol=atol, rtol=1e-6)
    slope = jax.vmap(jax.grad(relaxed.log_prob))(low + up)
    rise = count.log_prob(low + 1) - count.log_prob(low)
    np.testing.assert_allclose(slope, rise, atol=10 * atol, rtol=1e-5)
    below = relaxed.log_prob(jnp.asarray(-0.5))  # off the support (a column declared real): the line goes on
    np.testing.assert_allclose(below, 1.5 * count.log_prob(0.0) - 0.5 * count.log_prob(1.0), rtol=1e-6)
    labels = dist.Categorical(probs=jnp.array([0.2, 0.5, 0.3]))
    np.testing.assert_allclose(between_counts(labels).log_prob(jnp.arange(3)), jnp.log(labels.probs))


def test_a_relaxed_count_moves_from_an_integer_never_turns_impossible_counts_into_nan_and_reaches_vectors():
    """The slope in y at a count is the next count's rise (a pseudo-count on an integer still moves; the
    audit's slope of a Binomial(1) at 0 is its logit); a count beside one of probability 0 keeps its own
    value, not 0·(−∞); counts in a vector event (``.to_event``) are interpolated one by one."""
    poisson = between_counts(unvalidated(dist.Poisson(3.0)))
    assert float(jax.grad(poisson.log_prob)(1.0)) == pytest.approx(float(jnp.log(1.5)))
    assert float(jax.grad(poisson.log_prob)(0.0)) == pytest.approx(float(jnp.log(3.0)))
    single = between_counts(unvalidated(dist.Binomial(1, logits=0.3)))
    assert float(jax.grad(single.log_prob)(0.0)) == pytest.approx(0.3)
    assert float(jax.grad(single.log_prob)(1.0)) == pytest.approx(0.3)
    nothing = between_counts(unvalidated(dist.Poisson(0.0)))
    assert float(nothing.log_prob(0.0)) == pytest.approx(0.0) and float(nothing.log_prob(2.0)) == -np.inf
    certain = between_counts(unvalidated(dist.Binomial(5, probs=1.0)))
    assert float(certain.log_prob(5.0)) == pytest.approx(0.0)
    inflated = dist.ZeroInflatedPoisson(jnp.full(2, 0.5), jnp.full(2, 3.0))
    vector = between_counts(unvalidated(inflated.to_event(1)))
    one_by_one = between_counts(unvalidated(inflated))
    values = jnp.array([1e-6, 2.5])
    assert float(vector.log_prob(values)) == pytest.approx(float(one_by_one.log_prob(values).sum()))
    assert float(vector.log_prob(jnp.zeros(2))) == pytest.approx(float(vector.log_prob(1e-9 * jnp.ones(2))))


def test_a_negative_binomial_is_evaluated_by_log_gammas_to_scipys_precision():
    """The relaxed negative binomial is the model's own at every count, within 1e-9 of SciPy's log pmf
    (JAX's ``betaln``, which NumPyro's formula uses, is up to 1e-6 off there), and smooth between."""
    counts = np.arange(0.0, 3000.0)
    for mean, concentration in [(0.3, 0.05), (5.0, 1.0), (200.0, 30.0), (1e4, 1e4)]:
        model = dist.NegativeBinomial2(mean, concentration)
        expected = scipy.stats.nbinom.logpmf(counts, concentration, concentration / (concentration + mean))
        relaxed = unvalidated(model)
        assert type(relaxed) is not type(model)
        np.testing.assert_allclose(relaxed.log_prob(counts), expected, atol=1e-9, rtol=1e-12)
        np.testing.assert_allclose(model.log_prob(counts), expected, atol=2e-6)
        assert np.all(np.isfinite(jax.vmap(jax.grad(relaxed.log_prob))(jnp.linspace(0.05, 50.5, 40))))

    # a data set's counts as integers (a zero-inflated count evaluates them as given): differentiable in
    # the parameters, as the same counts as floats
    def slope(counts: jax.Array) -> jax.Array:
        inflated = lambda phi: unvalidated(dist.ZeroInflatedNegativeBinomial2(5.0, phi, gate=0.3))  # noqa: E731
        return jax.grad(lambda phi: jnp.sum(inflated(phi).log_prob(counts)))(2.0)

    np.testing.assert_allclose(slope(jnp.arange(20)), slope(jnp.arange(20.0)), rtol=1e-12)
