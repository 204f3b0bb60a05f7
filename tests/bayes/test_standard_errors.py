"""The sandwich's machinery on an objective whose Monte Carlo error is known exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayes_recon import pseudo
from bayes_recon.precision import float64
from bayes_recon.standard_errors import build_sandwich, moment_errors, statistic_covariance

LAYOUT = pseudo.Layout({"x": ()}, {})
THETA = 0.3 + 2.0 * jax.random.normal(jax.random.PRNGKey(0), (4000,), dtype=jnp.float64)


def _sandwich(noisy_flat_direction: float):
    """ℓ_s = (Σ w x − θ_s)² + Σ (w_j − 1)² + c (x_0 − x_1)(θ_s − θ̄) over two points: the optimum has
    Σ w x = θ̄ and w = 1, so Σ w x has standard error sd(θ)/√S. Moving x_0 − x_1 leaves the mean flat:
    without noise along it (c = 0) a symmetry, with noise (c ≠ 0) a direction the draws do not determine."""
    centred = THETA - THETA.mean()

    def terms(data, weights):
        x = data["x"]
        fit = (weights @ x - THETA) ** 2 + jnp.sum((weights - 1.0) ** 2)
        return fit + noisy_flat_direction * (x[0] - x[1]) * centred

    points = {"x": jnp.array([THETA.mean() / 2 + 1.0, THETA.mean() / 2 - 1.0])}
    return build_sandwich(terms, lambda data: 0.0, LAYOUT, points, jnp.ones(2), dim=1), points


@float64
def test_the_sandwich_gives_the_standard_error_of_a_mean_and_a_symmetry_adds_nothing():
    sandwich, points = _sandwich(0.0)
    value, covariance = statistic_covariance(sandwich, lambda data, w: jnp.stack([w @ data["x"], w.sum()]))
    assert value[0] == pytest.approx(float(THETA.mean()), rel=1e-12)
    expected = float(np.std(np.asarray(THETA), ddof=1) / np.sqrt(len(THETA)))
    assert np.sqrt(covariance[0, 0]) == pytest.approx(expected, rel=1e-6)
    assert np.sqrt(covariance[1, 1]) < 1e-6 * expected  # N is pinned (no noise), so is its error
    # The relative units of the moments: N's over N, the mean's over the measure's sd (here 1).
    errors = moment_errors(sandwich, points)
    assert set(errors) == {"total_mass", "mean[0]", "sd[0]"}
    assert errors["mean[0]"] == pytest.approx(expected / 2, rel=1e-6)  # the mean is Σ w x / 2


@float64
def test_a_flat_direction_with_noise_along_it_gets_an_error_beyond_any_use():
    sandwich, _ = _sandwich(0.5)
    _, covariance = statistic_covariance(sandwich, lambda data, w: jnp.stack([data["x"][0], w @ data["x"]]))
    expected = float(np.std(np.asarray(THETA), ddof=1) / np.sqrt(len(THETA)))
    assert np.sqrt(covariance[0, 0]) > 1e6  # x_0 alone moves along the flat direction
    assert np.sqrt(covariance[1, 1]) == pytest.approx(expected, rel=1e-6)  # Σ w x does not
