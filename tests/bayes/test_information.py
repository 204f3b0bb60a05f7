"""The release's information (Bernstein–von Mises) and the start cloud fitted to it, on an exact case: a
Gaussian linear regression of known noise, whose posterior is Gaussian with precision XᵀX + prior."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bayes_recon as br
from bayes_recon import pseudo
from bayes_recon.information import released_information
from bayes_recon.modelcheck import prepare_release
from bayes_recon.stages import make_start

PRIOR_SD = 10.0
N = 200


def regression(x1, x2, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, PRIOR_SD).expand([3]))
    with numpyro.plate("data", x1.shape[0]):
        numpyro.sample("y", dist.Normal(b[0] + b[1] * x1 + b[2] * x2, 1.0), obs=y)


@pytest.fixture(scope="module")
def exact_release():
    """Correlated covariates on different scales and exact posterior draws (20,000)."""
    rng = np.random.default_rng(0)
    u = rng.standard_normal((N, 2))
    x1, x2 = 3.0 + u[:, 0], -1.0 + 5.0 * (0.8 * u[:, 0] + 0.6 * u[:, 1])
    design = np.column_stack([np.ones(N), x1, x2])
    y = design @ np.array([1.0, 0.5, -0.2]) + rng.standard_normal(N)
    precision = design.T @ design + np.eye(3) / PRIOR_SD**2
    mean = np.linalg.solve(precision, design.T @ y)
    draws = mean + rng.standard_normal((20_000, 3)) @ np.linalg.cholesky(np.linalg.inv(precision)).T
    release = prepare_release(regression, {"b": draws}, ["x1", "x2", "y"], None, None)
    return release, design, {"x1": x1, "x2": x2}


def test_the_released_information_is_the_designs_second_moments(exact_release):
    release, design, _ = exact_release
    theta = jnp.asarray(release.theta)
    target, root, _ = released_information(release.weighted_model, release.layout, theta)
    expected = root.T @ design.T @ design @ root  # the data's information, whitened as the target is
    assert np.linalg.norm(target - expected) / np.linalg.norm(expected) < 0.03


def test_the_fitted_start_has_the_datas_mass_means_and_covariance(exact_release):
    """From the unit cloud (mass M, covariates at 0 ± 1), the fit finds N, the covariates' means and
    their covariance, correlation included, which the grid's one-coordinate-at-a-time search cannot."""
    release, _, truth = exact_release
    weighted, layout = release.weighted_model, release.layout
    theta = jnp.asarray(release.theta)
    config = br.ReconConfig()
    begin = make_start(weighted, layout, theta, 20, "exact", config)
    base = pseudo.base_points(jax.random.PRNGKey(0), 20, layout.dim)
    cloud, relative = jax.jit(begin.refit)(begin.params.cloud, base)
    before, after = np.asarray(relative)
    assert after < 0.05 < before
    points, weights = pseudo.measure(layout, begin.with_responses(cloud, base), base)
    weights = np.asarray(weights)
    assert weights.sum() == pytest.approx(N, rel=0.05)
    x = np.column_stack([np.asarray(points[k]) for k in truth])
    true_x = np.column_stack(list(truth.values()))
    sd = true_x.std(axis=0)
    assert np.all(np.abs(weights @ x / weights.sum() - true_x.mean(axis=0)) < 0.05 * sd)
    fitted = np.cov(x.T, aweights=weights, bias=True) / np.outer(sd, sd)  # correlation 0.8 included
    np.testing.assert_allclose(fitted, np.cov(true_x.T, bias=True) / np.outer(sd, sd), atol=0.05)
