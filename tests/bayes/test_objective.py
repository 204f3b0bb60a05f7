"""The attack's objective: the information penalty leaves real data alone and charges an impossible point;
its Hessian from the points' own derivatives is the objective's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

from bayes_recon import objective as objective_module
from bayes_recon import pseudo
from bayes_recon.divergence import Coordinates, score_matching_objective, score_matching_terms
from bayes_recon.draws import as_draws
from bayes_recon.modelcheck import prepare_release
from bayes_recon.models import lookup
from bayes_recon.objective import (
    INFORMATION_BOUND,
    ScoreMatching,
    build_hessian,
    build_mass_quadratic,
    build_objective,
    build_point_derivatives,
    draw_slices,
    information_penalty,
    kink_bandwidths,
    point_information,
)
from bayes_recon.optimise import columns_hessian
from bayes_recon.posteriordb import load_posterior
from bayes_recon.standard_errors import measure_parameters
from bayes_recon.weighting import WeightedModel

KIDIQ = "kidiq-kidscore_momiq"


def test_information_penalty_is_zero_for_the_true_data_and_charges_a_point_far_out():
    """kidiq's children each carry well under INFORMATION_BOUND × d; one mother's IQ × 1000 does not."""
    entry, posterior = lookup(KIDIQ), load_posterior(KIDIQ)
    data = {k: jnp.asarray(v) for k, v in entry.model_data(posterior.data).items() if k in entry.free}
    draws = {k: jnp.asarray(v)[:300] for k, v in as_draws(posterior.draws).items()}
    model = WeightedModel(entry.model, entry.free, {}, {k: v[0] for k, v in draws.items()})
    theta = jnp.asarray(model.to_unconstrained(draws, data))
    coordinates = Coordinates.standardised(theta)
    z = coordinates.to_attack(theta)
    dim = z.shape[1]

    information = np.asarray(point_information(model, coordinates, z, data))
    assert information.shape == (len(data["mom_iq"]),)
    assert information.max() < INFORMATION_BOUND * dim
    assert float(information_penalty(model, coordinates, z, data)) == 0.0

    far = {**data, "mom_iq": data["mom_iq"].at[0].multiply(1000.0)}
    assert float(point_information(model, coordinates, z, far)[0]) > INFORMATION_BOUND * dim
    assert float(information_penalty(model, coordinates, z, far)) > 0.0


def logistic_with_a_binary_covariate(x, group, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 3.0).expand([3]))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=beta[0] + beta[1] * x + beta[2] * group), obs=y)


def normal_with_a_binary_covariate(x, group, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 3.0).expand([3]))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(beta[0] + beta[1] * x + beta[2] * group, 1.0), obs=y)


def laplace_with_a_binary_covariate(x, group, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 3.0).expand([3]))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Laplace(beta[0] + beta[1] * x + beta[2] * group, 1.0), obs=y)


def logistic_attack(estimator: str, seed: int = 1, model=logistic_with_a_binary_covariate, spread=3.0):
    """The attack's pieces on a logistic regression with a binary covariate (or another ``model`` of the
    same columns), at pseudo-data far out enough for the information penalty (the cloud's log-scales up
    by ``spread``): (problem, draws in its coordinates, params, base points); slices from 5."""
    rng = np.random.default_rng(0)
    draws = {"beta": np.array([0.5, 1.0, -1.0]) + 0.2 * rng.normal(size=(40, 3))}
    release = prepare_release(model, draws, ["x", "group", "y"], None, {"group": constraints.boolean})
    layout = release.layout
    coordinates = Coordinates.standardised(jnp.asarray(release.theta))
    z = coordinates.to_attack(jnp.asarray(release.theta))
    n_points, key = 4, jax.random.PRNGKey(seed)
    start = pseudo.initial(n_points, layout)
    params = jax.tree_util.tree_map(lambda leaf: leaf + 0.3 * jax.random.normal(key, leaf.shape), start)
    params = params._replace(cloud=params.cloud._replace(log_diag=params.cloud.log_diag + spread))
    problem = ScoreMatching(release.weighted_model, layout, coordinates, estimator, 3)
    base = pseudo.base_points(key, n_points, layout.dim)
    return problem, z, params, base


@pytest.mark.parametrize("estimator", ["exact", "sliced", "sliced_vr"])
def test_the_hessian_from_each_points_derivatives_is_the_objectives_own(estimator):
    """Newton's Hessian from D + 1 passes over the points equals the objective's, P columns of it, in every
    parameter of the pseudo-data (clouds, residuals, weights), with the information penalty active."""
    problem, z, params, base = logistic_attack(estimator)
    points, _ = pseudo.measure(problem.layout, params, base)
    assert float(information_penalty(problem.weighted, problem.coordinates, z, points)) > 0.0
    objective = build_objective(problem, z, 5)
    hessian = build_hessian(problem, z, 5)

    expected = jax.jit(columns_hessian(lambda p, k: objective(p, base, k)))(params, jax.random.PRNGKey(0))
    found = jax.jit(lambda p: hessian(lambda q: q, p, base))(params)
    np.testing.assert_allclose(found, expected, rtol=1e-7, atol=1e-9 * float(jnp.abs(expected).max()))


@pytest.mark.parametrize(
    ("estimator", "model"),
    [("exact", logistic_with_a_binary_covariate), ("sliced", normal_with_a_binary_covariate)],
)
def test_the_sandwichs_derivatives_from_each_points_are_the_objectives_own(estimator, model, monkeypatch):
    """In the measure's own parameters (its points' coordinates and log-weights) the Hessian and every
    draw's gradient from D + 1 passes over the points are those of the per-draw terms taken whole, P
    directions each, with the information penalty active (in the Hessian; the draws' gradients leave it
    out): one continuous coordinate (x, logistic) or two (x, y, normal), the 40 draws in chunks of 4 or 3
    (the last padded)."""
    monkeypatch.setattr(objective_module, "GRADIENT_BUDGET", 2000)
    problem, z, params, base = logistic_attack(estimator, model=model)
    points, weights = pseudo.measure(problem.layout, params, base)
    phi, unpack, points_of = measure_parameters(problem.layout, points, weights)
    slices = draw_slices(estimator, jax.random.PRNGKey(5), z.shape[0], 3, z.shape[1])

    def terms(p):
        data, w = unpack(p)
        log_q = problem.coordinates.pull_back(lambda th: problem.weighted.log_density(th, data, w))
        return score_matching_terms(log_q, z, slices, estimator, None)

    def objective(p):
        penalty = information_penalty(problem.weighted, problem.coordinates, z, unpack(p)[0])
        return jnp.mean(terms(p)) + penalty

    assert float(information_penalty(problem.weighted, problem.coordinates, z, points)) > 0.0
    derivatives = build_point_derivatives(problem, z, 5)
    hessian, gradients = jax.jit(lambda p: derivatives(points_of, p, per_draw=True))(phi)
    expected = jax.jit(jax.hessian(objective))(phi)
    np.testing.assert_allclose(hessian, expected, rtol=1e-7, atol=1e-9 * float(jnp.abs(expected).max()))
    expected = jax.jit(jax.jacfwd(terms))(phi)
    np.testing.assert_allclose(gradients, expected, rtol=1e-7, atol=1e-9 * float(jnp.abs(expected).max()))


@pytest.mark.parametrize("estimator", ["exact", "sliced", "sliced_vr"])
@pytest.mark.parametrize(
    ("model", "spread"), [(logistic_with_a_binary_covariate, 3.0), (laplace_with_a_binary_covariate, 4.5)]
)
def test_the_objective_from_each_points_terms_is_the_score_matching_objective(estimator, model, spread):
    """Built from every point's own terms, the objective is the score-matching objective of the weighted
    log density (its Hessian traced whole) plus the information penalty, both with a Laplace likelihood's
    kinks smoothed alike."""
    problem, z, params, base = logistic_attack(estimator, model=model, spread=spread)
    weighted, coordinates = problem.weighted, problem.coordinates
    points, w = pseudo.measure(problem.layout, params, base)
    bandwidths = kink_bandwidths(weighted, coordinates, points, z)
    assert bool(bandwidths) == (model is laplace_with_a_binary_covariate)
    log_q = coordinates.pull_back(lambda th: weighted.log_density(th, points, w, bandwidths))
    slices = draw_slices(estimator, jax.random.PRNGKey(5), z.shape[0], 3, z.shape[1])
    expected = score_matching_objective(log_q, z, slices, estimator)
    penalty = information_penalty(weighted, coordinates, z, points, bandwidths)
    assert float(penalty) > 0.0
    expected += penalty
    found = build_objective(problem, z, 5)(params, base, None)
    np.testing.assert_allclose(float(found), float(expected), rtol=1e-11)


@pytest.mark.parametrize("estimator", ["exact", "sliced", "sliced_vr"])
def test_the_objective_is_its_quadratic_in_the_mass(estimator):
    """At t times the weights the objective is a t² + b t + c."""
    for seed in (1, 2):
        problem, z, params, base = logistic_attack(estimator, seed)
        objective = build_objective(problem, z, 5)
        a, b, c = build_mass_quadratic(problem, z, 5)(params, base, None)
        assert float(a) > 0.0
        for t in (0.5, 1.0, 3.0):
            scaled = params._replace(cloud=params.cloud._replace(log_mass=params.cloud.log_mass + np.log(t)))
            expected = float(a * t**2 + b * t + c)
            np.testing.assert_allclose(float(objective(scaled, base, None)), expected, rtol=1e-11)


KINKED = {  # a location model's likelihood, and the size of the jump in its log-density's slope
    "laplace": (lambda theta: dist.Laplace(theta, 1.0), 2.0),
    "asymmetric": (lambda theta: dist.AsymmetricLaplace(theta, 1.0, 2.0), 1 / 2 + 2),
    "quantile": (lambda theta: dist.AsymmetricLaplaceQuantile(theta, 1.0, 0.2), 0.2 + 0.8),  # check loss
}


@pytest.mark.parametrize("kind", list(KINKED))
def test_a_kinks_curvature_is_a_kernel_density_estimate(kind):
    """With θ ~ N(0, 1) under the release, E[∂²θ log p(y | θ)] = −c φ(y) for a log-density whose slope
    jumps by c at y = θ (integration by parts: all of it the kink's Dirac delta). The plain curvature is
    0 at every draw; with the kink smoothed by Silverman's bandwidth on the draws' residuals, its mean
    over the draws is that expectation to a few % (at 20,000 draws the estimate's bias and its Monte
    Carlo error are each about 1 % at y = −1.5), and away from the kink the log-density is the model's."""
    likelihood, jump = KINKED[kind]

    def location(y=None):
        theta = numpyro.sample("theta", dist.Normal(0.0, 10.0))
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", likelihood(theta), obs=y)

    draws = jax.random.normal(jax.random.PRNGKey(0), (20_000, 1))
    weighted = WeightedModel(location, ("y",), {}, {"theta": jnp.zeros(())})
    data = {"y": jnp.array([0.0, 0.7, -1.5])}
    bandwidths = kink_bandwidths(weighted, Coordinates.identity(1), data, draws)
    assert set(bandwidths) == {"y"}
    residuals = jax.vmap(lambda t: weighted.kink_residuals(t, data))(draws)["y"]  # (y − θ) / scale
    assert np.allclose(bandwidths["y"], 1.06 * np.std(residuals, axis=0) * 20_000**-0.2)

    def curvature(bandwidths):
        second = jax.vmap(jax.hessian(lambda t: weighted.loglik_per_point(t, data, bandwidths)))(draws)
        return np.asarray(second[..., 0, 0].mean(axis=0))

    expected = -jump * np.exp(-0.5 * data["y"] ** 2) / np.sqrt(2 * np.pi)
    assert np.allclose(curvature(None), 0.0)
    assert np.allclose(curvature(bandwidths), expected, rtol=0.05)
    far = {"y": jnp.array([-9.0, 9.0])}
    exact = likelihood(0.3).log_prob(far["y"])
    smoothed = weighted.loglik_per_point(jnp.array([0.3]), far, {"y": jnp.array([0.05, 0.05])})
    np.testing.assert_allclose(smoothed, exact, rtol=1e-12)


def test_a_model_without_a_laplace_site_has_no_bandwidths():
    entry, posterior = lookup(KIDIQ), load_posterior(KIDIQ)
    data = {k: jnp.asarray(v)[:5] for k, v in entry.model_data(posterior.data).items() if k in entry.free}
    draws = {k: jnp.asarray(v)[:10] for k, v in as_draws(posterior.draws).items()}
    model = WeightedModel(entry.model, entry.free, {}, {k: v[0] for k, v in draws.items()})
    theta = jnp.asarray(model.to_unconstrained(draws, data))
    assert kink_bandwidths(model, Coordinates.identity(theta.shape[1]), data, theta) == {}
