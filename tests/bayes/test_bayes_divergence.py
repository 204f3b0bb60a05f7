"""Fisher-divergence estimators on Gaussians, where every expectation has a closed form.

p = N(m, S) is the target (represented by exact draws), q = N(μ, C) the model, P = C⁻¹:
    ∇log q(θ) = −P(θ − μ),   ∇²log q = −P,   ∇log p(θ) = −S⁻¹(θ − m).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayes_recon.divergence import (
    ESTIMATORS,
    Coordinates,
    exact_term,
    gaussian_terms,
    rademacher_slices,
    score_matching_objective,
    sliced_term,
)

DIM = 3
N_DRAWS = 4000


def _spd(rng: np.random.Generator, d: int, scale: float) -> np.ndarray:
    a = rng.standard_normal((d, d))
    return scale * (a @ a.T / d + 0.5 * np.eye(d))


@pytest.fixture(scope="module")
def gaussians():
    rng = np.random.default_rng(7)
    m, mu = rng.normal(0, 1, DIM), rng.normal(0, 1, DIM)
    s, c = _spd(rng, DIM, 1.0), _spd(rng, DIM, 2.0)
    draws = rng.multivariate_normal(m, s, size=N_DRAWS)
    return {"m": m, "S": s, "mu": mu, "C": c, "P": np.linalg.inv(c), "draws": jnp.asarray(draws)}


def _log_q(g):
    mu, p = jnp.asarray(g["mu"]), jnp.asarray(g["P"])
    return lambda theta: -0.5 * (theta - mu) @ p @ (theta - mu)


def _objective_closed_form(m, s, mu, p) -> float:
    """E_p[tr ∇²log q + ½||∇log q||²] = −tr P + ½ [tr(P² S) + (m − μ)ᵀ P² (m − μ)]."""
    p2 = p @ p
    return float(-np.trace(p) + 0.5 * (np.trace(p2 @ s) + (m - mu) @ p2 @ (m - mu)))


def _identity_closed_form(m, s, mu, p) -> float:
    """½ E_p||∇log q − ∇log p||² − ½ E_p||∇log p||², computed directly (no integration by parts)."""
    s_inv = np.linalg.inv(s)
    a = s_inv - p  # ∇log q − ∇log p = A(θ − m) + P(μ − m)
    fisher = 0.5 * (np.trace(a @ s @ a.T) + np.sum((p @ (mu - m)) ** 2))
    return float(fisher - 0.5 * np.trace(s_inv))


def test_closed_forms_agree(gaussians):
    """The integration-by-parts identity itself, in closed form (guards the reference values)."""
    g = gaussians
    np.testing.assert_allclose(
        _objective_closed_form(g["m"], g["S"], g["mu"], g["P"]),
        _identity_closed_form(g["m"], g["S"], g["mu"], g["P"]),
        rtol=1e-12,
    )


def test_exact_term_pointwise(gaussians):
    g = gaussians
    log_q = _log_q(g)
    for theta in np.asarray(g["draws"][:5]):
        score = -g["P"] @ (theta - g["mu"])
        expected = -np.trace(g["P"]) + 0.5 * score @ score
        np.testing.assert_allclose(float(exact_term(log_q, jnp.asarray(theta))), expected, rtol=1e-12)


def test_exact_objective_matches_the_fisher_identity(gaussians):
    g = gaussians
    log_q = _log_q(g)
    estimate = float(score_matching_objective(log_q, g["draws"], None, "exact"))
    terms = np.asarray(jax.vmap(lambda t: exact_term(log_q, t))(g["draws"]))
    np.testing.assert_allclose(estimate, terms.mean(), rtol=1e-12)
    se = terms.std(ddof=1) / np.sqrt(len(terms))
    target = _identity_closed_form(g["m"], g["S"], g["mu"], g["P"])
    assert abs(estimate - target) <= 5 * se, (estimate, target, se)
    # the check has power: the same draws against a q with another mean give a different value
    shifted = _identity_closed_form(g["m"], g["S"], g["mu"] + 2.0, g["P"])
    assert abs(estimate - shifted) > 10 * se


def test_objective_is_minimised_at_q_equal_p(gaussians):
    """Up to p's constant the objective is the Fisher divergence, zero at q = p: value −½ tr S⁻¹."""
    g = gaussians
    p_inv = np.linalg.inv(g["S"])
    assert _objective_closed_form(g["m"], g["S"], g["m"], p_inv) == pytest.approx(-0.5 * np.trace(p_inv))
    assert _objective_closed_form(g["m"], g["S"], g["mu"], g["P"]) > -0.5 * np.trace(p_inv)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_the_gaussian_of_the_draws_scores_half_its_precisions_trace(gaussians, estimator):
    """The Gaussian with the draws' mean m̂ and covariance Ŝ (precision P̂): its terms −tr P̂ + ½|P̂(θ − m̂)|²
    average −½ tr P̂ (1 + 1/S) exactly (Ŝ with S − 1), the floor the self-check holds a measure to; the
    sliced estimators' Rademacher traces agree with it in expectation. Fitted to the draws, it scores
    below the posterior on them (what ``floor_check`` takes off)."""
    g = gaussians
    draws = g["draws"]
    slices = None if estimator == "exact" else rademacher_slices(jax.random.PRNGKey(0), N_DRAWS, 4, DIM)
    terms = np.asarray(gaussian_terms(draws, slices, estimator))
    precision = np.linalg.inv(np.cov(np.asarray(draws), rowvar=False))
    floor = -0.5 * np.trace(precision) * (1 + 1 / N_DRAWS)
    if estimator == "exact":
        np.testing.assert_allclose(terms.mean(), floor, rtol=1e-10)
    else:
        assert abs(terms.mean() - floor) < 5 * terms.std(ddof=1) / np.sqrt(N_DRAWS)
    if estimator == "exact":  # fitted to the draws, it scores below the posterior they are drawn from
        truth = jax.vmap(lambda t: exact_term(_log_q({"mu": g["m"], "P": np.linalg.inv(g["S"])}), t))(draws)
        assert terms.mean() < float(jnp.mean(truth))


def test_sliced_with_scaled_basis_is_exact(gaussians):
    """With the d slices √d·e_i, both sliced forms reproduce the exact term at every draw."""
    g = gaussians
    log_q = _log_q(g)
    draws = g["draws"][:50]
    basis = jnp.broadcast_to(np.sqrt(DIM) * jnp.eye(DIM), (len(draws), DIM, DIM))
    exact = score_matching_objective(log_q, draws, None, "exact")
    for estimator in ("sliced", "sliced_vr"):
        np.testing.assert_allclose(
            float(score_matching_objective(log_q, draws, basis, estimator)), float(exact), rtol=1e-12
        )


@pytest.mark.parametrize("estimator", ["sliced", "sliced_vr"])
def test_sliced_estimators_are_unbiased(gaussians, estimator):
    g = gaussians
    log_q = _log_q(g)
    draws = g["draws"][:2000]
    slices = rademacher_slices(jax.random.PRNGKey(3), len(draws), 8, DIM)
    vr = estimator == "sliced_vr"
    per_draw = jax.vmap(lambda t, v: sliced_term(log_q, t, v, vr) - exact_term(log_q, t))(draws, slices)
    per_draw = np.asarray(per_draw)
    assert per_draw.std() > 1e-3  # really random: the slices do matter
    se = per_draw.std(ddof=1) / np.sqrt(len(per_draw))
    assert abs(per_draw.mean()) <= 5 * se, (per_draw.mean(), se)
    estimate = float(score_matching_objective(log_q, draws, slices, estimator))
    exact = float(score_matching_objective(log_q, draws, None, "exact"))
    np.testing.assert_allclose(estimate - exact, per_draw.mean(), atol=1e-10)


def test_variance_reduction_reduces_variance(gaussians):
    g = gaussians
    log_q = _log_q(g)
    draws = g["draws"][:1000]
    slices = rademacher_slices(jax.random.PRNGKey(4), len(draws), 2, DIM)
    spread = {
        vr: float(np.std(jax.vmap(lambda t, v, vr=vr: sliced_term(log_q, t, v, vr))(draws, slices)))
        for vr in (False, True)
    }
    assert spread[True] < spread[False]


def test_rademacher_slices():
    v = rademacher_slices(jax.random.PRNGKey(0), 500, 4, DIM)
    assert v.shape == (500, 4, DIM) and v.dtype == jnp.float64
    assert set(np.unique(np.asarray(v))) == {-1.0, 1.0}
    second_moment = np.einsum("ski,skj->ij", np.asarray(v), np.asarray(v)) / (500 * 4)
    np.testing.assert_allclose(second_moment, np.eye(DIM), atol=0.1)


def test_estimator_names():
    assert ESTIMATORS == ("exact", "sliced", "sliced_vr")


# ---- coordinates --------------------------------------------------------------------------------


def test_standardised_coordinates_whiten_the_draws(gaussians):
    draws = gaussians["draws"]
    coords = Coordinates.standardised(draws)
    z = np.asarray(coords.to_attack(draws))
    np.testing.assert_allclose(np.asarray(coords.to_model(z)), np.asarray(draws), atol=1e-10)  # its inverse
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.cov(z, rowvar=False), np.eye(DIM), atol=1e-10)
    # lower-triangular scale with scale @ scaleᵀ the draws' covariance
    np.testing.assert_allclose(np.triu(np.asarray(coords.scale), 1), 0.0)
    cov = np.cov(np.asarray(draws), rowvar=False)
    np.testing.assert_allclose(np.asarray(coords.scale @ coords.scale.T), cov)


def test_standardised_one_dimensional():
    draws = jnp.asarray(np.random.default_rng(1).normal(3.0, 2.0, (500, 1)))
    z = np.asarray(Coordinates.standardised(draws).to_attack(draws))
    assert z.shape == (500, 1)
    np.testing.assert_allclose([z.mean(), z.std(ddof=1)], [0.0, 1.0], atol=1e-10)


def test_pull_back_is_consistent_with_to_attack(gaussians):
    g = gaussians
    log_q = _log_q(g)
    coords = Coordinates.standardised(g["draws"])
    pulled = coords.pull_back(log_q)
    for theta in g["draws"][:5]:
        z = coords.to_attack(theta[None])[0]
        np.testing.assert_allclose(float(pulled(z)), float(log_q(theta)), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(coords.shift + coords.scale @ z), np.asarray(theta), atol=1e-10)
        # chain rule: ∇_z = scaleᵀ ∇_θ
        np.testing.assert_allclose(
            np.asarray(jax.grad(pulled)(z)), np.asarray(coords.scale.T @ jax.grad(log_q)(theta)), rtol=1e-10
        )


def test_pull_back_of_the_target_is_standard_normal(gaussians):
    """With shift m and scale chol(S) the target's score in attack coordinates is −z."""
    g = gaussians
    s_inv = jnp.asarray(np.linalg.inv(g["S"]))
    m = jnp.asarray(g["m"])
    coords = Coordinates(m, jnp.linalg.cholesky(jnp.asarray(g["S"])))
    pulled = coords.pull_back(lambda t: -0.5 * (t - m) @ s_inv @ (t - m))
    z = coords.to_attack(g["draws"][:20])
    np.testing.assert_allclose(np.asarray(jax.vmap(jax.grad(pulled))(z)), -np.asarray(z), atol=1e-10)
    # and the objective in attack coordinates is the closed form for p_z = N(0, I), q_z
    log_q = _log_q(g)
    l_inv = np.linalg.inv(np.asarray(coords.scale))
    p_z = np.asarray(coords.scale).T @ g["P"] @ np.asarray(coords.scale)
    target = _objective_closed_form(np.zeros(DIM), np.eye(DIM), l_inv @ (g["mu"] - g["m"]), p_z)
    z_all = coords.to_attack(g["draws"])
    terms = np.asarray(jax.vmap(lambda t: exact_term(coords.pull_back(log_q), t))(z_all))
    assert abs(terms.mean() - target) <= 5 * terms.std(ddof=1) / np.sqrt(len(terms))


def test_identity_coordinates_change_nothing(gaussians):
    g = gaussians
    coords = Coordinates.identity(DIM)
    np.testing.assert_allclose(np.asarray(coords.to_attack(g["draws"][:10])), np.asarray(g["draws"][:10]))
    log_q = _log_q(g)
    np.testing.assert_allclose(float(coords.pull_back(log_q)(g["draws"][0])), float(log_q(g["draws"][0])))


@pytest.mark.parametrize("estimator", ["exact", "sliced_vr"])
def test_chunked_draws_give_the_same_objective_and_gradient(estimator):
    """Draws in rematerialised chunks (bounded memory) change nothing but the memory."""
    draws = jax.random.normal(jax.random.PRNGKey(0), (37, 3))
    slices = None if estimator == "exact" else rademacher_slices(jax.random.PRNGKey(1), 37, 2, 3)

    def objective(shift, at_once):
        def log_q(t):
            return -0.5 * jnp.sum((t - shift) ** 2 * jnp.array([1.0, 2.0, 0.5]))

        return score_matching_objective(log_q, draws, slices, estimator, at_once)

    shift = jnp.array([0.3, -0.2, 1.0])
    whole = jax.value_and_grad(objective)(shift, None)
    chunked = jax.value_and_grad(objective)(shift, 8)  # 37 = 4 × 8 + 5: the remainder too
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-12)
    np.testing.assert_allclose(chunked[1], whole[1], rtol=1e-12)
