"""The attack's start and stages: the responses it draws from the model's predictive before optimising."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from bayes_recon import pseudo
from bayes_recon.models import lookup
from bayes_recon.stages import (
    Response,
    response_coordinates,
    response_predictor,
    share_strata,
    stratum_shares,
    with_responses,
)
from bayes_recon.weighting import WeightedModel

KIDIQ = "kidiq-kidscore_momiq"


def predicted(predict, layout: pseudo.Layout, covariates: dict, noise: jax.Array) -> dict:
    """The predictor's draws at these covariates' values, as data."""
    n = len(next(iter(covariates.values())))
    bits = jnp.zeros((n, layout.discrete_dim))
    z = layout.unconstrain({**layout.assemble(jnp.zeros((n, layout.dim)), bits), **covariates})
    return layout.assemble(predict(z, bits, noise), bits)


def test_response_predictor_finds_the_observed_column_and_predicts_the_regression_line():
    entry = lookup(KIDIQ)
    layout = pseudo.Layout({"mom_iq": (), "kid_score": ()}, entry.support)
    params = {"beta": jnp.array([26.0, 0.6]), "sigma": jnp.asarray(18.0)}
    responses, predict = response_predictor(entry.model, layout, {}, params)
    assert responses == (1,)
    mom_iq = jnp.array([80.0, 100.0, 120.0])
    mean = predicted(predict, layout, {"mom_iq": mom_iq}, jnp.zeros((3, 1)))["kid_score"]
    np.testing.assert_allclose(mean, 26.0 + 0.6 * mom_iq, rtol=1e-9)
    high = predicted(predict, layout, {"mom_iq": mom_iq}, jnp.ones((3, 1)))["kid_score"]
    np.testing.assert_allclose(high - mean, 18.0, rtol=1e-6)  # noise maps through the quantile function


def test_a_count_response_is_predicted_from_the_model():
    """A count's responses follow the covariates from the start (before, counts had no quantile and
    stayed in the cloud, independent of the covariates: a negative binomial regression's cloud then
    collapsed its covariate to one value)."""

    def model(x, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.NegativeBinomial2(jnp.exp(b * x), 5.0), obs=y)

    layout = pseudo.Layout({"x": (), "y": ()}, {"y": numpyro.distributions.constraints.positive})
    responses, predict = response_predictor(model, layout, {}, {"b": jnp.asarray(0.5)})
    assert responses == (1,)
    x = jnp.array([-2.0, 0.0, 2.0])
    median = predicted(predict, layout, {"x": x}, jnp.zeros((3, 1)))["y"]
    assert np.all(np.diff(median) > 0)  # rises with the covariate, like the count's mean exp(b x)


def test_a_beta_response_is_predicted_through_a_stand_in_with_its_mean():
    """Beta's quantile (bisection on the incomplete beta function) has no derivative in its shapes, so
    its responses stayed in the cloud, independent of the covariate (stop 30: a Beta regression at
    M = 10 lost its covariate). The stand-in follows the model's mean, inside the unit interval."""

    def model(x, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            mean = jax.nn.sigmoid(b * x)
            numpyro.sample("y", dist.Beta(10.0 * mean, 10.0 * (1.0 - mean)), obs=y)

    layout = pseudo.Layout({"x": (), "y": ()}, {"y": constraints.unit_interval})
    responses, predict = response_predictor(model, layout, {}, {"b": jnp.asarray(1.0)})
    assert responses == (1,)
    x = jnp.array([-3.0, 0.0, 3.0])
    median = predicted(predict, layout, {"x": x}, jnp.zeros((3, 1)))["y"]
    np.testing.assert_allclose(
        median, jax.nn.sigmoid(x), rtol=1e-9
    )  # the logit-normal's median is the mean's
    spread = predicted(predict, layout, {"x": x}, jnp.full((3, 1), 6.0))["y"]
    assert np.all((spread > median) & (spread < 1.0))
    # a covariate that saturates the mean (1 − 3e-7 at 15, exactly 1 at 40) gives finite values and
    # derivatives at every point (a NaN there spread to every point's gradient through the cloud)
    far = jnp.stack([jnp.array([-3.0, 3.0, 15.0, 40.0, -800.0]), jnp.zeros(5)], axis=1)
    bits, noise = jnp.zeros((5, 0)), -jnp.ones((5, 1))
    hessian = jax.jit(jax.hessian(lambda z: jnp.sum(predict(z, bits, noise))))(far)
    assert np.all(np.isfinite(jax.jit(predict)(far, bits, noise))) and np.all(np.isfinite(hessian))


def test_a_response_is_a_coordinate_an_observed_site_depends_on_alone_directly_or_through_a_transform():
    """Stan's earnings and mesquite models observe log(earn) and log(weight) of the free column, an AR(K)
    model its window's last entry: each is a response all the same (before, such a coordinate stayed
    in the cloud, uncorrelated with the covariates at the start: earnings-logearn_interaction at
    M = 10 ended 2 % off its oracle, above the truth's objective). A site that also moves with a
    covariate (y − x) has none."""

    def log_response(x, earn=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample(
                "log_earn", dist.Normal(1.0 + b * x, 0.5), obs=None if earn is None else jnp.log(earn)
            )

    def difference(x, y):
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("gap", dist.Normal(0.0, 1.0), obs=y - x)

    def binomial(x, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Binomial(5, logits=b * x), obs=y)

    def windows(window):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", window.shape[0]):
            numpyro.sample("y", dist.Normal(b * window[:, 1], 1.0), obs=window[:, 2])

    seed = 0
    earnings = pseudo.Layout({"x": (), "earn": ()}, {"earn": constraints.positive})
    log_earn = Response("log_earn", 0, False, "earn")
    assert response_coordinates(log_response, {}, earnings, seed) == {1: log_earn}
    assert response_coordinates(difference, {}, pseudo.Layout({"x": (), "y": ()}, {}), seed) == {}
    counts = pseudo.Layout({"x": (), "y": ()}, {"y": constraints.integer_interval(0, 5)})
    assert response_coordinates(binomial, {}, counts, seed) == {}  # a count stratifies instead
    ar = pseudo.Layout({"window": (3,)}, {})
    assert response_coordinates(windows, {}, ar, seed) == {2: Response("y", 0, True, "window")}

    responses, predict = response_predictor(log_response, earnings, {}, {"b": jnp.asarray(2.0)})
    assert responses == (1,)
    x = jnp.array([-1.0, 0.0, 1.0])
    earn = predicted(predict, earnings, {"x": x}, jnp.ones((3, 1)))["earn"]
    np.testing.assert_allclose(jnp.log(earn), 1.0 + 2.0 * x + 0.5, rtol=1e-9)  # one sd up, on the log
    _, predict = response_predictor(windows, ar, {}, {"b": jnp.asarray(0.5)})
    lags = jnp.array([[0.0, 2.0, 0.0], [1.0, -4.0, 0.0]])
    window = predicted(predict, ar, {"window": lags}, jnp.zeros((2, 1)))["window"]
    np.testing.assert_allclose(window, [[0.0, 2.0, 1.0], [1.0, -4.0, -2.0]], rtol=1e-9)


def test_every_point_starts_on_its_predicted_response_even_where_the_predictive_has_two_modes():
    """The refitted cloud has the predicted points' mean and covariance, and the points' residuals put
    each on its own draw: a mixture's two modes survive (a Gaussian cloud alone had one), and a Gaussian
    response needs no residual at all. Unfactored (as the objectives take them), the same points."""

    def mixture(x, y=None):
        gap = numpyro.sample("gap", dist.HalfNormal(10.0))
        with numpyro.plate("data", x.shape[0]):
            loc = x[:, None] + jnp.stack([jnp.zeros_like(gap), gap])
            components = dist.Normal(loc, 0.5)
            numpyro.sample(
                "y", dist.MixtureSameFamily(dist.Categorical(jnp.array([0.5, 0.5])), components), obs=y
            )

    def line(x, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * x, 1.0), obs=y)

    layout = pseudo.Layout({"x": (), "y": ()}, {})
    base = pseudo.base_points(jax.random.PRNGKey(0), 200, layout.dim)
    cloud = pseudo.initial(200, layout).cloud
    for model, params in ((mixture, {"gap": jnp.asarray(8.0)}), (line, {"b": jnp.asarray(2.0)})):
        _, predict = response_predictor(model, layout, {}, params)
        start = with_responses(layout, (1,), predict, None, cloud, base)
        points, weights = pseudo.measure(layout, start, base)
        # the objective's pseudo-data (the unit cloud, no factorisation): the same points and weights
        unfactored = with_responses(layout, (1,), predict, None, cloud, base, factored=False)
        assert not np.any(unfactored.cloud.lower) and not np.any(unfactored.cloud.log_diag)
        for got, want in zip(pseudo.measure(layout, unfactored, base), (points, weights), strict=True):
            jax.tree_util.tree_map(
                lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12), got, want
            )
        drawn = predicted(predict, layout, {"x": points["x"]}, base[:, 1:])["y"]
        np.testing.assert_allclose(points["y"], drawn, atol=1e-9)
        residual = np.abs(np.asarray(start.points.residual)).max()
        if model is mixture:
            assert (
                np.mean(np.abs(np.asarray(drawn) - np.asarray(points["x"]) - 4.0) < 1.0) < 0.05
            )  # two modes
            assert residual > 0.1
        else:
            assert residual < 1e-6  # the refit's jitter (1e-9 of the variance)


def test_the_grid_refines_a_scale_between_its_points():
    """A sharp valley at log-scale 6.6, between the coarse grid's 6 and 8: refined by ±1 only, the grid
    stopped at 7; halving the refinement to ±¼ lands within ⅛ of it."""

    def in_mass(cloud: pseudo.Cloud) -> tuple:  # J(t m) = (t m)² − 2 t m · gain at the cloud's mass m
        gain = 1.0 + jnp.exp(-(((cloud.log_diag[0, 0] - 6.6) / 0.3) ** 2))
        mass = jnp.exp(cloud.log_mass[0])
        return mass**2, -2.0 * mass * gain, 0.0

    layout = pseudo.Layout({"x": ()}, {})
    found = pseudo.search_scales(in_mass, pseudo.initial(5, layout).cloud, (0,))
    assert abs(float(found.log_diag[0, 0]) - 6.6) <= 0.125
    # In chunks (a large objective's memory bound), the same: a one-coordinate cloud has an empty
    # ``lower``, which JAX's chunked map could not batch (an ordinal regression crashed there).
    chunked = pseudo.search_scales(in_mass, pseudo.initial(5, layout).cloud, (0,), (0,), at_once=4)
    whole = pseudo.search_scales(in_mass, pseudo.initial(5, layout).cloud, (0,), (0,))
    jax.tree_util.tree_map(np.testing.assert_array_equal, chunked, whole)


def _logistic(x, hs, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=a + b * x + 2.0 * hs), obs=y)


def test_the_strata_of_a_binary_response_get_its_predictive_shares_of_the_covariates():
    """Exact case: each stratum's mass is Σ_j w_j p(y = s | x_j, hs_j) over the points with its
    covariate hs, and its cloud sits at the mean and sd of those points weighted so; a binary
    covariate (hs) is not a response and shares nothing across its values."""
    layout = pseudo.Layout(
        {"x": (), "hs": (), "y": ()}, {"hs": constraints.boolean, "y": constraints.boolean}
    )
    weighted = WeightedModel(_logistic, ("x", "hs", "y"), {}, {"a": jnp.asarray(0.0), "b": jnp.asarray(0.0)})
    theta = jnp.asarray([[0.5, 1.5]])  # a, b (both real: unconstrained is constrained)
    shares = stratum_shares(weighted, layout, theta.mean(axis=0))
    assert shares is not None and shares.responses.tolist() == [False, True]  # bits: hs, y
    strata = np.asarray(layout.strata)  # (hs, y): 00, 01, 10, 11
    n = 7
    z = jax.random.normal(jax.random.PRNGKey(3), (4, n, 1)) * 2.0
    weights = jax.random.uniform(jax.random.PRNGKey(4), (4, n), minval=0.5, maxval=2.0)
    cloud = share_strata(layout, shares, pseudo.initial(n, layout).cloud, z, weights)
    x, w = np.asarray(z[..., 0]), np.asarray(weights)
    for s, (hs, y) in enumerate(strata):
        pool = strata[:, 0] == hs  # the points of both strata with this hs
        px, pw = x[pool].ravel(), w[pool].ravel()
        p1 = 1.0 / (1.0 + np.exp(-(0.5 + 1.5 * px + 2.0 * hs)))
        share = pw * (p1 if y else 1.0 - p1)
        np.testing.assert_allclose(np.exp(cloud.log_mass[s]) * n, share.sum(), rtol=1e-9)
        mean = share @ px / share.sum()
        np.testing.assert_allclose(cloud.shift[s, 0], mean, rtol=1e-9)
        sd = np.sqrt(share @ (px - mean) ** 2 / share.sum())
        np.testing.assert_allclose(np.exp(cloud.log_diag[s, 0]), sd, rtol=1e-6)
    assert float(cloud.shift[1, 0]) > float(cloud.shift[0, 0])  # y = 1 where x is high (b > 0)


def test_a_model_without_discrete_responses_has_no_strata_shares():
    layout = pseudo.Layout({"x": (), "hs": ()}, {"hs": constraints.boolean})

    def model(x, hs, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * x + hs, 1.0), obs=y)

    weighted = WeightedModel(model, ("x", "hs"), {"y": jnp.zeros(1)}, {"b": jnp.asarray(0.0)})
    assert stratum_shares(weighted, layout, jnp.zeros(1)) is None
